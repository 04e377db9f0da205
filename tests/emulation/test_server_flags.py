"""The --pdd-emulate-* flags on PddServerConfig, and KV charged at the emulated model's size."""

from __future__ import annotations

import pytest

from sglang_pdd.config import PddServerConfig
from sglang_pdd.transfer.ledger import TransferLedger


@pytest.mark.parametrize(
    "kw, flag",
    [
        (dict(token_scale=4), "--pdd-token-scale"),
        (dict(time_dilation=2.0), "--pdd-time-dilation"),
        (dict(emulate_model="m.yaml"), "--pdd-emulate-model"),
        (dict(emulate_chips=4), "--pdd-emulate-chips"),
    ],
)
def test_emulation_flags_need_a_chip(kw, flag):
    with pytest.raises(ValueError, match=flag):
        PddServerConfig(**kw)


def test_unknown_chip_is_refused_at_start():
    with pytest.raises(ValueError, match="--pdd-emulate-chip"):
        PddServerConfig(emulate_chip="Z")


def test_time_dilation_stretches_the_emulated_wan():
    cfg = PddServerConfig(
        role="prefill",
        wan_hosts=("10.0.0.2",),
        wan_bandwidth_mbps=1000.0,
        wan_delay_ms=15.0,
        emulate_chip="A",
        time_dilation=2.0,
    )
    assert cfg.wan.bandwidth_mbps == 500.0 and cfg.wan.one_way_delay_ms == 30.0
    assert cfg.emulation.chip.name == "A" and cfg.emulation.time_dilation == 2.0


def test_an_emulated_ledger_charges_the_model_bytes_on_the_local_link():
    ledger = TransferLedger()
    ledger.set_emulation(kv_scale=1000.0, local_bytes_per_s=1e12)
    assert ledger.before_transfer("10.9.9.9:1234", 4096)
    ledger.after_transfer("10.9.9.9:1234", 4096)
    assert ledger.bytes_by_session["10.9.9.9:1234"] == 4096
    assert ledger.model_bytes_by_session["10.9.9.9:1234"] == 4_096_000
    assert ledger._local.bytes_sent == 4_096_000
