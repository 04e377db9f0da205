"""``sglang-pdd launch``: each instance's launch_server flags and environment, checked by
SGLang's own parser with our flags added (the same path launch_server takes)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sglang_pdd.patches import server_args_cli
from sglang_pdd.topology.launch import launch_commands, main
from sglang_pdd.topology.schema import load_topology

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "topology.yaml"


def _parse(argv: list[str]) -> argparse.Namespace:
    """launch_server's argv (after ``python -m sglang.launch_server``) through SGLang's parser."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    server_args_cli.hook(None, parser)
    return parser.parse_args(argv[3:])


def test_each_role_gets_the_flags_it_needs():
    t = load_topology(EXAMPLE)
    prefill, relay = launch_commands(t, "A")
    (main_decode,) = launch_commands(t, "B")
    p = _parse(prefill.argv)
    assert (p.pdd_role, p.disaggregation_mode, p.tp_size, p.port) == (
        "prefill",
        "prefill",
        8,
        30000,
    )
    assert p.pdd_wan_hosts == ("10.1.0.21",) and p.disaggregation_ib_device == "mlx5_0"
    assert p.disaggregation_bootstrap_port == 8998
    assert (p.pdd_ledger_port, p.pdd_ledger_host) == (5700, "10.0.0.11")
    r = _parse(relay.argv)
    assert (r.pdd_role, r.disaggregation_mode) == ("relay", "decode")
    m = _parse(main_decode.argv)
    assert (m.pdd_role, m.pdd_control_port, m.pdd_control_host) == ("main", 5600, "10.1.0.21")
    assert m.disaggregation_decode_enable_radix_cache and m.pdd_kv_events_insecure
    assert '"endpoint": "tcp://10.1.0.21:5557"' in m.kv_events_config
    assert prefill.env["MOONCAKE_PROTOCOL"] == "rdma"  # site A has an RDMA device
    assert main_decode.env["MOONCAKE_PROTOCOL"] == "tcp"
    assert main_decode.env["MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER"] == "65535"
    assert main_decode.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert main_decode.env["SGLANG_HOST_IP"] == "10.1.0.21"


def test_print_writes_a_script_with_the_router_in_its_site(capsys):
    assert main(["--topology", str(EXAMPLE), "--site", "A", "--print"]) == 0
    out = capsys.readouterr().out
    assert out.count("sglang.launch_server") == 2
    assert "sglang_pdd.cli router --topology" in out


def test_an_unknown_site_is_named():
    with pytest.raises(ValueError, match="--site 'C': the topology's sites are A, B"):
        launch_commands(load_topology(EXAMPLE), "C")
