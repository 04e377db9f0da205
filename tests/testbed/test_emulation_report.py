"""Reading the emulated chips' counters and undoing time dilation (pure logic)."""

from __future__ import annotations

from sglang_pdd.testbed.emulation_report import (
    Overruns,
    counters,
    dilate_sessions,
    last_counters,
    undilate_result,
)
from sglang_pdd.testbed.replay import RequestResult
from sglang_pdd.testbed.workload import Session, Turn

LINE = (
    "[t] sglang-pdd: emulation forwards={f} overruns={o} emulated_s=1.0 real_s=0.5 "
    "overrun_s=0.0 cpu_between_forwards_ms=0.1\n"
)


def test_the_last_line_of_each_log_is_summed(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(LINE.format(f=10, o=0) + "other\n" + LINE.format(f=250, o=2))
    b.write_text("no emulation here\n")
    assert last_counters(a.read_text()) == Overruns(250, 2)
    assert counters([a, b]) == Overruns(250, 2)
    assert (Overruns(250, 2) - Overruns(50, 0)).fraction == 0.01


def test_more_than_one_percent_overruns_is_not_acceptable():
    assert Overruns(1000, 10).acceptable
    assert not Overruns(1000, 11).acceptable
    assert "OVER" in Overruns(10, 5).describe()
    assert Overruns(0, 0).acceptable


def test_dilation_stretches_arrivals_and_results_come_back_in_chip_time():
    sessions = (Session(0, (Turn(1.5, (1, 2), 8), Turn(4.0, (3,), 8))),)
    assert [t.at_s for t in dilate_sessions(sessions, 2.0)[0].turns] == [3.0, 8.0]
    record = {
        "handoff_stall_s": 0.4,
        "handoff_gaps_s": [0.3, 0.6],
        "relay_tokens": 8,
        "phases": {"relay": 1.0},
        "main": "u",
    }
    r = RequestResult(0, 0, "user", 2, 3.0, 0.2, 200, 1.0, 4.0, gaps_s=[0.1, 0.3], record=record)
    u = undilate_result(r, 2.0)
    assert (u.at_s, u.late_s, u.ttft_s, u.e2e_s, u.gaps_s) == (1.5, 0.1, 0.5, 2.0, [0.05, 0.15])
    assert u.record == {
        "handoff_stall_s": 0.2,
        "handoff_gaps_s": [0.15, 0.3],
        "relay_tokens": 8,
        "phases": {"relay": 0.5},
        "main": "u",
    }
    assert undilate_result(r, 1) is r


def test_sla_goodput_counts_requests_within_both_bounds_over_the_span():
    from sglang_pdd.testbed.emulation_report import sla_goodput

    ok = RequestResult(0, 0, "user", 2, 0.0, 0.0, 200, 1.0, 3.0, gaps_s=[0.05, 0.05])
    slow_start = RequestResult(1, 0, "user", 2, 1.0, 0.0, 200, 11.0, 4.0, gaps_s=[0.05])
    slow_tokens = RequestResult(2, 0, "user", 2, 2.0, 0.0, 200, 1.0, 8.0, gaps_s=[0.2, 0.2])
    failed = RequestResult(3, 0, "user", 2, 3.0, 0.0, 502, None, 1.0)
    # one of three good answers, over 0 s (first arrival) to 10 s (last end)
    assert sla_goodput([ok, slow_start, slow_tokens, failed], 10.0, 0.1) == 0.1
