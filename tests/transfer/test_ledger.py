"""Prefill's ``TransferLedger``: the WAN-bound bytes in hand, as the Mooncake hook
(``patches/kv_transfer_ledger.py``) enters and leaves each write: what the routers' shared
ledger reports as the WAN's queue. No servers: the hook around a stand-in write."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd import config as pdd_config
from sglang_pdd.patches import kv_transfer_ledger
from sglang_pdd.transfer import ledger as ledger_module
from sglang_pdd.transfer.kv_link_faults import set_link_state

WAN, LOCAL = "10.9.9.9:17000", "127.0.0.1:17000"


@pytest.fixture
def fresh_ledger(monkeypatch):
    """A new process ledger, with 10.9.9.9 across the WAN (no emulated link)."""
    before = pdd_config.current()
    pdd_config.set_current(pdd_config.PddServerConfig(role="prefill", wan_hosts=("10.9.9.9",)))
    monkeypatch.setattr(ledger_module, "_ledger", ledger_module.TransferLedger())
    yield ledger_module.ledger()
    pdd_config.set_current(before)


def _write(session: str, lengths: list[int], inside=None, fail: bool = False):
    """One write through the hook; ``inside`` runs where Mooncake would be sending."""

    def original(self, session_id, buffers, peers, lengths):
        if inside is not None:
            inside()
        if fail:
            raise RuntimeError("the write broke")
        return 0

    return kv_transfer_ledger.hook(original, None, session, [0], [0], lengths)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([WAN, LOCAL]), st.integers(0, 1 << 20), st.booleans()),
        max_size=12,
    )
)
def test_a_writes_wan_bytes_are_in_hand_while_it_runs_and_only_then(writes):
    before = pdd_config.current()
    pdd_config.set_current(pdd_config.PddServerConfig(role="prefill", wan_hosts=("10.9.9.9",)))
    ledger = ledger_module.TransferLedger()
    saved, ledger_module._ledger = ledger_module._ledger, ledger
    try:
        for session, nbytes, fail in writes:
            seen = []
            inside = lambda seen=seen: seen.append(ledger.wan_sending_bytes())  # noqa: E731
            if fail:
                with pytest.raises(RuntimeError):
                    _write(session, [nbytes], inside, fail=True)
            else:
                assert _write(session, [nbytes], inside) == 0
            assert seen == [nbytes if session == WAN else 0]
            assert ledger.wan_sending_bytes() == 0
    finally:
        ledger_module._ledger = saved
        pdd_config.set_current(before)


def test_concurrent_writes_add_up_and_a_dropped_link_holds_nothing(fresh_ledger, tmp_path):
    inside = threading.Barrier(4)  # three writers and this test, all inside at once
    leave = threading.Event()

    def hold():
        inside.wait(timeout=30)
        assert leave.wait(timeout=30)

    threads = [
        threading.Thread(target=_write, args=(session, [n, n], hold))
        for session, n in ((WAN, 100), (WAN, 1000), (LOCAL, 7))
    ]
    for t in threads:
        t.start()
    inside.wait(timeout=30)
    assert fresh_ledger.wan_sending_bytes() == 2200
    leave.set()
    for t in threads:
        t.join(timeout=30)
    assert fresh_ledger.wan_sending_bytes() == 0

    # A write the emulated link refuses (dropped) returns -1 and leaves nothing in hand.
    faults = tmp_path / "wan"
    set_link_state(faults, "drop")
    pdd_config.set_current(
        pdd_config.PddServerConfig(
            role="prefill",
            wan_hosts=("10.9.9.9",),
            wan_bandwidth_mbps=1000.0,
            wan_fault_file=str(faults),
        )
    )
    assert _write(WAN, [4096]) == -1
    assert fresh_ledger.wan_sending_bytes() == 0


def test_with_an_emulated_chip_the_wan_bytes_in_hand_are_the_emulated_models(fresh_ledger):
    """The routers weigh transfers in the emulated model's bytes (``--kv-bytes-per-token``):
    P's word on its WAN queue is in the same units, and leaves nothing behind."""
    fresh_ledger.set_emulation(kv_scale=3200.0, local_bytes_per_s=1e9)
    seen = []
    assert _write(WAN, [100, 28], lambda: seen.append(fresh_ledger.wan_sending_bytes())) == 0
    assert _write(LOCAL, [100], lambda: seen.append(fresh_ledger.wan_sending_bytes())) == 0
    assert seen == [128 * 3200, 0]
    assert fresh_ledger.wan_sending_bytes() == 0
