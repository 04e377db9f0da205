"""``benchmark/handoff.py``'s verdicts: each stall against RTT + its extend + one of MD's ITL."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmark"


@pytest.fixture(scope="module")
def handoff():
    sys.path.insert(0, str(BENCHMARK))  # handoff.py imports extend_cost from its folder
    try:
        spec = importlib.util.spec_from_file_location("handoff_bench", BENCHMARK / "handoff.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARK))
    return module


def _case(handoff, mode, stalls, extends, itls):
    n = len(stalls)
    return handoff.Case(
        mode, "idle", 1000, 30, stalls, [30] * n, 172, 15360, 0.2, [0.0] * n, extends, itls, 0.2
    )


def test_a_stall_is_within_its_bound_only_up_to_rtt_plus_extend_plus_one_itl(handoff):
    case = _case(handoff, "one-shot", [0.25, 0.26, 0.30], [0.03, 0.03, None], [0.02, 0.02, 0.02])
    assert case.bounds_s() == [pytest.approx(0.25), pytest.approx(0.25), None]
    assert case.within() == 1  # 0.25 <= 0.25; 0.26 is over; no extend reported: not within
    lines = handoff.verdicts([case, _case(handoff, "catch-up", [0.2], [0.01], [0.01])])
    assert lines[0].startswith("one-shot: 1 of 3 stalls within") and "missed" in lines[0]
    assert "worst 10.0 ms over" in lines[0]
    assert lines[1] == "catch-up: 1 of 1 stalls within RTT + extend + 1 ITL (met)"
    assert "wait ms" in handoff.HEADER and "/3" in case.row()
