"""``PddServerConfig`` and the ``--pdd-*`` server flags: accepted values and refusals."""

from __future__ import annotations

import argparse
from argparse import Namespace
from types import SimpleNamespace

import pytest

from sglang_pdd.config import PddServerConfig, check_main_decode_modes
from sglang_pdd.patches import server_args_cli, server_args_from_cli
from sglang_pdd.transfer.wan_link import WanLinkConfig


def _args(**overrides) -> Namespace:
    """What SGLang's parser, with our flags added by ``patches/server_args_cli.py``, makes of
    the ``--pdd-*`` flags in ``overrides`` (``pdd_wan_hosts="a,b"`` is ``--pdd-wan-hosts a,b``;
    True is a bare flag); other keys are SGLang's own flags, set as given."""
    parser = argparse.ArgumentParser()
    server_args_cli.hook(None, parser)
    argv = []
    sglang = {"disaggregation_mode": "prefill", "disaggregation_decode_enable_radix_cache": False}
    for key, value in {"pdd_role": "prefill", **overrides}.items():
        if not key.startswith("pdd_"):
            sglang[key] = value
        elif value is True:
            argv.append("--" + key.replace("_", "-"))
        else:
            argv += ["--" + key.replace("_", "-"), str(value)]
    args = parser.parse_args(argv)
    for key, value in sglang.items():
        setattr(args, key, value)
    return args


def _config(kv_events_config: str | None = None, **overrides) -> PddServerConfig:
    server_args = SimpleNamespace(kv_events_config=kv_events_config)
    server_args_from_cli.hook(server_args, None, _args(**overrides))
    return server_args._pdd


def test_wan_hosts_without_emulation_is_a_real_wan():
    cfg = _config(pdd_wan_hosts="10.0.0.7, 10.0.0.8")
    assert cfg.wan_hosts == ("10.0.0.7", "10.0.0.8") and cfg.wan is None


def test_emulated_link():
    cfg = _config(pdd_wan_hosts="127.0.0.2", pdd_wan_bandwidth_mbps=8.0, pdd_wan_delay_ms=100.0)
    assert cfg.wan == WanLinkConfig(bandwidth_mbps=8.0, one_way_delay_ms=100.0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"pdd_wan_delay_ms": 50.0}, "--pdd-wan-delay-ms needs --pdd-wan-bandwidth-mbps"),
        ({"pdd_wan_jitter_ms": 5.0}, "--pdd-wan-jitter-ms needs --pdd-wan-bandwidth-mbps"),
        ({"pdd_wan_bandwidth_mbps": 8.0}, "--pdd-wan-bandwidth-mbps needs --pdd-wan-hosts"),
        ({"pdd_role": "relay"}, "--pdd-role relay needs --disaggregation-mode decode"),
        (
            {"pdd_role": "main", "disaggregation_mode": "decode", "pdd_control_port": 5600},
            "--disaggregation-decode-enable-radix-cache",
        ),
        ({"pdd_role": "main", "disaggregation_mode": "decode"}, "--pdd-control-port"),
        ({"pdd_control_port": 5600}, "only accepted with --pdd-role main"),
        ({"pdd_control_host": "10.0.0.5"}, "--pdd-control-host is only accepted"),
        (
            {
                "pdd_role": "main",
                "disaggregation_mode": "decode",
                "pdd_control_port": 5600,
                "disaggregation_decode_enable_radix_cache": True,
                "pdd_control_host": "tcp://x",
            },
            "--pdd-control-host takes",
        ),
    ],
)
def test_contradictions_are_refused_naming_the_flags(overrides, message):
    with pytest.raises(ValueError, match=message):
        _config(**overrides)


MAIN = {
    "pdd_role": "main",
    "disaggregation_mode": "decode",
    "pdd_control_port": 5600,
    "disaggregation_decode_enable_radix_cache": True,
}


def test_the_control_socket_is_closed_by_default():
    """MD binds loopback unless told otherwise; a non-loopback address needs CURVE keys or
    an explicit --pdd-control-insecure."""
    assert _config(**MAIN).control_host == "127.0.0.1"
    assert _config(**MAIN, pdd_control_host="127.0.0.2").control_host == "127.0.0.2"
    for host in ("0.0.0.0", "10.0.0.5", "md.example"):
        with pytest.raises(ValueError, match="--pdd-control-insecure"):
            _config(**MAIN, pdd_control_host=host)
    cfg = _config(**MAIN, pdd_control_host="0.0.0.0", pdd_control_insecure=True)
    assert cfg.control_insecure and cfg.control_host == "0.0.0.0"
    with pytest.raises(ValueError, match="--pdd-control-insecure is only accepted"):
        _config(pdd_control_insecure=True)


def test_unknown_role_lists_the_accepted_values():
    with pytest.raises(ValueError, match="accepted values are none, prefill, relay, main"):
        PddServerConfig(role="decode")


def test_main_decode_refuses_modes_it_cannot_serve_naming_the_flags():
    ok = dict(pp_size=1, dp_size=1, speculative=None)
    check_main_decode_modes(**ok)
    for change, flag in (
        (dict(pp_size=2), "--pp-size 2"),
        (dict(dp_size=4), "--dp-size 4"),
        (dict(speculative="EAGLE"), "--speculative-algorithm EAGLE"),
        (dict(page_size=16), "--page-size 16"),
        (dict(dp_attention=True), "--enable-dp-attention"),
    ):
        with pytest.raises(ValueError, match=f"--pdd-role main does not support .*{flag}"):
            check_main_decode_modes(**{**ok, **change})


def test_parked_ttl_is_a_positive_main_decode_flag():
    PddServerConfig(role="main", control_port=5000, parked_ttl_s=5.0)
    with pytest.raises(ValueError, match="--pdd-parked-ttl-s must be > 0"):
        PddServerConfig(role="main", control_port=5000, parked_ttl_s=0.0)
    with pytest.raises(ValueError, match="--pdd-parked-ttl-s is only accepted with"):
        PddServerConfig(role="relay", parked_ttl_s=5.0)


def test_the_transfer_ledger_is_a_prefill_flag():
    PddServerConfig(role="prefill", ledger_port=5700, ledger_claim_ttl_s=30.0)
    for role in ("relay", "main", "none"):
        extra = {"control_port": 5000} if role == "main" else {}
        with pytest.raises(ValueError, match="--pdd-ledger-port is only accepted with"):
            PddServerConfig(role=role, ledger_port=5700, **extra)
    with pytest.raises(ValueError, match="--pdd-ledger-host is only accepted with"):
        PddServerConfig(role="relay", ledger_host="0.0.0.0")
    with pytest.raises(ValueError, match="--pdd-ledger-port must be in 1..65535"):
        PddServerConfig(role="prefill", ledger_port=70000)
    with pytest.raises(ValueError, match="--pdd-ledger-claim-ttl-s must be > 0"):
        PddServerConfig(role="prefill", ledger_claim_ttl_s=0.0)


def test_the_wan_fault_file_needs_a_prefill_with_the_emulated_link():
    wan = {"wan_bandwidth_mbps": 8.0, "wan_delay_ms": 10.0}
    PddServerConfig(role="prefill", wan_hosts=("127.0.0.2",), wan_fault_file="/x", **wan)
    for role, link in (("prefill", {}), ("relay", wan)):
        with pytest.raises(ValueError, match="--pdd-wan-fault-file is only accepted with"):
            PddServerConfig(
                role=role, wan_hosts=("127.0.0.2",) if link else (), wan_fault_file="/x", **link
            )


def test_every_flag_is_a_field_with_its_default_written_once():
    """The parser's defaults are the dataclass's own: a config built from no flags equals
    ``PddServerConfig()``, and every field is a --pdd-* flag with help."""
    import dataclasses

    from sglang_pdd.options import flags

    plain = _config(pdd_role="none", disaggregation_mode="null")
    assert plain == PddServerConfig()
    names = flags(PddServerConfig, "--pdd-")
    assert set(names) == {f.name for f in dataclasses.fields(PddServerConfig)}
    parser = argparse.ArgumentParser()
    server_args_cli.hook(None, parser)
    helps = {a.option_strings[0]: a.help for a in parser._actions if a.option_strings}
    assert all(helps[flag] for flag in names.values()), helps


@pytest.mark.parametrize(
    ("endpoint", "bind", "refused"),
    [
        ("tcp://*:5557", None, True),  # SGLang's default: binds every interface
        ("tcp://0.0.0.0:5557", True, True),
        ("tcp://10.1.2.3:5557", True, True),
        ("tcp://127.0.0.1:5557", True, False),
        ("tcp://localhost:5557", True, False),
        ("tcp://10.1.2.3:5557", None, False),  # connects to a remote SUB, binds nothing
        ("ipc:///tmp/kv", None, False),
    ],
)
def test_a_kv_event_publisher_on_a_non_loopback_address_is_refused(endpoint, bind, refused):
    import json

    from sglang_pdd.config import check_kv_events

    cfg = json.dumps({"publisher": "zmq", "endpoint": endpoint, "bind": bind})
    if refused:
        with pytest.raises(ValueError, match="--pdd-kv-events-insecure"):
            check_kv_events(cfg, insecure=False)
    else:
        check_kv_events(cfg, insecure=False)
    check_kv_events(cfg, insecure=True)  # the operator's explicit choice


def test_a_kv_event_replay_endpoint_is_checked_too():
    import json

    from sglang_pdd.config import check_kv_events

    cfg = {"publisher": "zmq", "endpoint": "tcp://127.0.0.1:1", "bind": True}
    check_kv_events(json.dumps(cfg), insecure=False)
    with pytest.raises(ValueError, match="replay_endpoint"):
        check_kv_events(json.dumps({**cfg, "replay_endpoint": "tcp://*:2"}), insecure=False)
    check_kv_events(None, insecure=False)
    check_kv_events(json.dumps({"publisher": "null"}), insecure=False)


def test_launch_server_refuses_a_wide_open_kv_event_publisher():
    """Through the --pdd-* flags' own path (ServerArgs.from_cli_args' hook)."""
    import json

    wide = json.dumps({"publisher": "zmq", "endpoint": "tcp://*:5557"})
    with pytest.raises(ValueError, match="binds a non-loopback address"):
        _config(wide, pdd_role="prefill", disaggregation_mode="prefill")
    config = _config(
        wide, pdd_role="prefill", disaggregation_mode="prefill", pdd_kv_events_insecure=True
    )
    assert config.kv_events_insecure
    plain = _config(wide, pdd_role="none", disaggregation_mode="null")
    assert plain.role == "none"  # a server without a PDD role: SGLang's own choice


@pytest.mark.parametrize(
    ("cpu_engine", "cuda", "refused"), [("1", False, False), ("0", False, True), ("1", True, True)]
)
def test_fork_subprocesses_applies_only_to_the_cpu_engine(monkeypatch, cpu_engine, cuda, refused):
    """--pdd-fork-subprocesses switches SGLang's start method to fork after SGLang set spawn,
    and is refused, naming the flag, where a forked child could not use CUDA."""
    import multiprocessing

    import torch

    from sglang_pdd.patches import cpu_fork_subprocesses

    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", cpu_engine)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    chosen = []
    monkeypatch.setattr(multiprocessing, "set_start_method", lambda m, force: chosen.append(m))
    server_args = SimpleNamespace(_pdd=_config(pdd_fork_subprocesses=True))
    if refused:
        with pytest.raises(ValueError, match="--pdd-fork-subprocesses needs SGLang's CPU engine"):
            cpu_fork_subprocesses.hook(None, server_args)
        assert chosen == []
    else:
        assert cpu_fork_subprocesses.hook("r", server_args) == "r"
        assert chosen == ["fork"]
    # Without the flag (the default) SGLang's spawn stays, on any device.
    assert cpu_fork_subprocesses.hook("r", SimpleNamespace(_pdd=PddServerConfig())) == "r"
    assert len(chosen) == (0 if refused else 1)
