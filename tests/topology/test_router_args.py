"""``sglang-pdd router --topology FILE``: the file becomes the router's flags, the router's own
parser checks them, flags after it win, instance flags beside it are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_pdd.router.cli import build_parser, config_from_args
from sglang_pdd.topology.router_args import expand_topology

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "topology.yaml")
KEYS = {"PDD_API_KEY": "user-key", "PDD_ADMIN_API_KEY": "admin-key"}


def _config(argv, environ=KEYS):
    return config_from_args(build_parser().parse_args(expand_topology(argv, environ)))


def test_the_file_sets_instances_wan_options_and_keys():
    c = _config(["--topology", EXAMPLE])
    assert c.prefill == ("http://10.0.0.11:30000",) and c.relay == ("http://10.0.0.12:30000",)
    (main,) = c.main
    assert (main.url, main.control, main.kv_events) == (
        "http://10.1.0.21:30000",
        "tcp://10.1.0.21:5600",
        "tcp://10.1.0.21:5557",
    )
    assert (c.wan_bandwidth_mbps, c.wan_rtt_ms, c.port, c.host) == (10000, 40, 8000, "0.0.0.0")
    assert (c.handoff.mode, c.handoff_switch) == ("auto", "overlap")
    assert (c.api_key, c.admin_api_key) == ("user-key", "admin-key")
    assert c.transfer_ledger == "tcp://10.0.0.11:5700"  # the prefill's ledger_port


def test_flags_after_the_file_win():
    c = _config(["--topology", EXAMPLE, "--handoff-mode", "catch-up", "--port", "9000"])
    assert (c.handoff.mode, c.port) == ("catch-up", 9000)


def test_instance_flags_beside_the_file_are_refused():
    with pytest.raises(ValueError, match="--prefill: the topology file lists the instances"):
        expand_topology(["--topology", EXAMPLE, "--prefill", "http://x:1"], KEYS)


def test_a_missing_key_variable_is_named():
    with pytest.raises(ValueError, match="router.keys.admin_api_key_env: .*PDD_ADMIN_API_KEY"):
        expand_topology(["--topology", EXAMPLE], {"PDD_API_KEY": "k"})


def test_an_unknown_router_option_is_refused_by_the_routers_parser(tmp_path):
    text = Path(EXAMPLE).read_text().replace("handoff-mode: auto", "hand-off-mode: auto")
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit):
        build_parser().parse_args(expand_topology(["--topology", str(path)], KEYS))


def test_without_the_file_the_flags_pass_through():
    argv = ["--prefill", "http://p:1", "--relay", "http://r:1"]
    assert expand_topology(argv, {}) == argv


SAME_HOST = "host: 10.0.0.12\n        port: 30000"
MOVED = "host: 10.0.0.11\n        port: 30001"  # RLD moved onto P's host


@pytest.mark.parametrize(
    "edits, shares",
    [
        ([], False),  # RLD on a host of its own
        ([(SAME_HOST, MOVED)], True),  # P's host, one of P's chips
        (
            [
                (SAME_HOST, MOVED),
                (
                    "tp: 8\n        chips: [0, 1, 2, 3, 4, 5, 6, 7]",
                    "tp: 4\n        chips: [0, 1, 2, 3]",
                ),
                ("chips: [0]\n", "chips: [4]\n"),
            ],
            False,  # P's host, a chip P does not use
        ),
        ([(SAME_HOST, MOVED), ("        chips: [0]\n", "")], True),  # all chips
    ],
    ids=["own-host", "p-chip", "own-chip", "unlisted-chips"],
)
def test_a_relay_on_a_prefills_host_and_chips_shares_its_hardware(tmp_path, edits, shares):
    text = Path(EXAMPLE).read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "t.yaml"
    path.write_text(text)
    assert _config(["--topology", str(path)]).pipeline.relay_shares_prefill is shares
