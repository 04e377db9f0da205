"""``start_router``'s options become router flags the router's own parser reads back."""

from __future__ import annotations

import pytest

from sglang_pdd.router.cli import build_parser
from sglang_pdd.testbed.cluster import PddClusterConfig, router_flags, router_options
from sglang_pdd.testbed.emulated_chips import ChipEmulation


def _parsed(opts: dict):
    return build_parser().parse_args(["--topology", "t.yaml", *router_flags(opts)])


def _dest(key: str) -> str:
    """Where the router's parser stores the flag named after ``key``."""
    flag = "--no-tail-on-relay" if key == "tail_on_relay" else "--" + key.replace("_", "-")
    (dest,) = [a.dest for a in build_parser()._actions if flag in a.option_strings]
    return dest


@pytest.mark.parametrize(
    "cfg",
    [
        PddClusterConfig(model_path="m"),
        PddClusterConfig(
            model_path="m",
            ttft_slo_s=None,
            incremental_streams=True,
            seeded_sampling=True,
            tool_call_parser="qwen25",
        ),
        PddClusterConfig(model_path="m", emulation=ChipEmulation(token_scale=32)),
    ],
    ids=["defaults", "switches-on", "emulated"],
)
def test_every_option_reaches_the_router_as_given(cfg):
    opts = router_options(cfg)
    args = _parsed(opts)
    defaults = _parsed({})
    for key, value in opts.items():
        if key == "control_curve":
            continue
        # None leaves the router's default; every other value is what the router reads.
        dest = _dest(key)
        expected = getattr(defaults, dest) if value is None else value
        assert getattr(args, dest) == expected, key


def test_the_switches_with_a_default_of_on_and_the_key_pair():
    opts = {"tail_on_relay": False, "control_curve": ("s.key_secret", "m.key")}
    args = _parsed(opts)
    assert args.tail_on_relay is False
    assert (args.control_curve_secret, args.control_curve_server) == ("s.key_secret", "m.key")
    assert _parsed({"tail_on_relay": True}).tail_on_relay is True


def test_an_emulated_testbed_tells_the_router_the_emulated_models_kv_size():
    emulation = ChipEmulation(token_scale=32)
    opts = router_options(PddClusterConfig(model_path="m", emulation=emulation))
    per_token = emulation.config("A").model.kv_bytes_per_token
    assert opts["kv_bytes_per_token"] == 32 * per_token > 0
    assert router_options(PddClusterConfig(model_path="m"))["kv_bytes_per_token"] is None


@pytest.mark.parametrize("emulated", [False, True])
def test_rld_shares_ps_compute_on_the_cpu_testbed_and_not_on_emulated_chips(tmp_path, emulated):
    """Emulated chips make P and RLD instances of their own, as deployed: the topology lists
    their chips apart and the router does not yield RLD to P's queue."""
    from types import SimpleNamespace

    from sglang_pdd.testbed.cluster import MainDecodeSite, write_topology
    from sglang_pdd.topology.router_args import expand_topology

    cfg = PddClusterConfig(model_path="m", emulation=ChipEmulation() if emulated else None)
    server = SimpleNamespace(url="http://127.0.0.1:31000", port=31000)
    main = MainDecodeSite(
        server=server,
        http_via_wan="http://127.0.0.1:31001",
        control_via_wan="tcp://127.0.0.1:31002",
        kv_events_via_wan=None,
    )
    cluster = SimpleNamespace(config=cfg, prefill=server, ledger_port=None)
    path = write_topology(
        tmp_path / "t.yaml", cluster, ["http://127.0.0.1:31003"], [main], port=31004
    )
    argv = expand_topology(["--topology", str(path)], environ={})
    assert ("--relay-shares-prefill" in argv) is not emulated
