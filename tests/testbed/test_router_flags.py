"""``start_router``'s options become router flags the router's own parser reads back."""

from __future__ import annotations

import pytest

from sglang_pdd.router.cli import build_parser
from sglang_pdd.testbed.cluster import PddClusterConfig, router_flags, router_options


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
    ],
    ids=["defaults", "switches-on"],
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
