"""The split of a PDD answer's E2E difference against its cross-DC twin (pure)."""

from __future__ import annotations

import pytest

from sglang_pdd.testbed.e2e_diff import pair_turns, summary_lines, ttft_goal_lines


def _row(sid, turn, e2e, ttft, ids, record=None, status=200):
    return {
        "sid": sid,
        "turn": turn,
        "status": status,
        "e2e_s": e2e,
        "ttft_s": ttft,
        "output_ids": list(range(ids)),
        "record": record,
    }


# A handoff: RLD made 30 ids; MD's first id at 2.3 s (router clock = client clock), then 69 ids
# at 25 ms: end at 2.3 + 1.725 = 4.025 s. Its cross-DC twin: first token at 2.0 s, then 99 ids
# at 20 ms = 3.98 s.
HANDOFF = {
    "pipeline": "P-RLD-MD",
    "finished_on": "main",
    "relay_tokens": 30,
    "main_tokens": 70,
    "main_first_s": 2.3,
    "e2e_s": 4.025,
}


def _cross_twin() -> list[dict]:
    return [_row(0, 0, 3.98, 2.0, 100)]


def test_a_handoff_splits_into_start_head_start_and_slowdown():
    [d] = pair_turns([_row(0, 0, 4.025, 0.5, 100, HANDOFF)], _cross_twin())
    assert d.e2e_diff_s == pytest.approx(0.045)
    assert d.start_s == pytest.approx(0.3)
    assert d.head_start_s == pytest.approx(30 * 0.02)
    assert d.slowdown_s == pytest.approx(69 * 0.005)  # MD's remaining ids, 5 ms slower each
    assert d.e2e_diff_s == pytest.approx(d.start_s + d.slowdown_s - d.head_start_s)
    assert d.main_pace_s == pytest.approx(0.025) and d.cross_pace_s == pytest.approx(0.02)


def test_the_router_clock_is_shifted_onto_the_clients_by_the_requests_end():
    # The router received the request 10 ms after the client sent it.
    record = {**HANDOFF, "main_first_s": 2.29, "e2e_s": 4.015}
    [d] = pair_turns([_row(0, 0, 4.025, 0.5, 100, record)], _cross_twin())
    assert d.start_s == pytest.approx(0.3)


def test_turns_without_a_matching_twin_are_left_out_and_others_split_by_ttft():
    cross = [
        _row(0, 0, 3.0, 1.0, 10),
        _row(0, 1, 3.0, 1.0, 10),
        _row(0, 2, 3.0, 1.0, 10, status=500),
    ]
    pdd = [
        _row(0, 0, 2.5, 0.6, 10, {"pipeline": "P-MD", "finished_on": "main", "main_tokens": 10}),
        {**_row(0, 1, 2.0, 0.5, 10), "output_ids": [9] * 10},  # different output: no twin
        _row(0, 2, 2.0, 0.5, 10),  # the twin failed
        _row(1, 0, 2.0, 0.5, 10),  # no twin at all
    ]
    [d] = pair_turns(pdd, cross)
    assert (d.sid, d.turn, d.pipeline) == (0, 0, "P-MD") and d.start_s is None
    assert d.e2e_diff_s == pytest.approx(-0.5) and d.ttft_diff_s == pytest.approx(-0.4)
    lines = summary_lines([d])
    assert len(lines) == 1 and "earlier than cross-DC: 1" in lines[0], lines


def test_the_summary_names_each_part_of_a_handoffs_difference():
    lines = summary_lines(pair_turns([_row(0, 0, 4.025, 0.5, 100, HANDOFF)], _cross_twin()))
    assert lines[0].startswith("P-RLD-MD handed off") and "earlier than cross-DC: 0" in lines[0]
    assert "start +0.30s - head start 0.60s (30 RLD ids) + slowdown +0.35s" in lines[1], lines
    assert "MD 25.0 ms/id vs cross-DC 20.0 ms/id" in lines[1]


def test_the_ttft_goal_lines_name_the_requests_later_than_the_target_by_pipeline_and_rule():
    # Cross-DC's ten first tokens: 1.0 .. 1.9 s (P90 1.81 s); the goal 0.5x: target 0.905 s.
    cross = [_row(0, t, 5.0, 1.0 + t / 10, 10) for t in range(10)]
    within = {"pipeline": "P-MD", "rule": "within_slo", "prefill_s": 0.8}
    relayed = {"pipeline": "P-RLD-MD", "rule": "over_slo", "prefill_s": 1.2}
    pdd = [_row(0, t, 5.0, 0.3, 10, relayed) for t in range(6)]  # early: not listed
    pdd += [_row(0, 6, 5.0, 1.0, 10, within), _row(0, 7, 5.0, 1.2, 10, within)]
    pdd += [_row(0, 8, 5.0, 0.95, 10, relayed), _row(0, 9, 5.0, None, 10, within, status=500)]
    head, first, second = ttft_goal_lines(pdd, cross, 0.5)
    assert head.startswith("TTFT target 0.91s (0.5x cross-DC's P90): 3 of 9 PDD requests later")
    assert first.split()[:3] == ["P-MD", "within_slo", "n=2"]
    assert "TTFT mean 1.10s, P answered 0.80s, cross-DC twin 1.65s" in first
    assert second.split()[:3] == ["P-RLD-MD", "over_slo", "n=1"]
    assert "cross-DC twin 1.80s" in second
    assert ttft_goal_lines([], cross, 0.5) == []
