"""The testbed's summaries: E2E and ITL percentiles, PDD's phases per pipeline, the ratios
table and the phase plot, from made-up results (no servers)."""

from __future__ import annotations

import pytest

from sglang_pdd.router.pipeline.record import PddRecord
from sglang_pdd.testbed.replay import RequestResult
from sglang_pdd.testbed.report import (
    contender_order,
    goal_for,
    mean_phases,
    phase_plot,
    ratios,
    repeats_summary,
    summaries_from_json,
    summarize,
    sweep_plot,
    sweep_ratios,
    table,
)


def _result(e2e: float, ttft: float, gaps: list[float], record: PddRecord | None = None):
    return RequestResult(
        sid=0,
        turn=0,
        kind="turn",
        prompt_tokens=10,
        at_s=0.0,
        late_s=0.0,
        status=200,
        ttft_s=ttft,
        e2e_s=e2e,
        gaps_s=gaps,
        output_ids=[1] * (len(gaps) + 1),
        record=None if record is None else record.as_dict(),
    )


def _handed_off(e2e: float) -> PddRecord:
    return PddRecord(
        pipeline="P-RLD-MD",
        relay_tokens=3,
        main_tokens=5,
        first_token_s=0.2,
        relay_last_s=0.5,
        main_first_s=0.8,
        e2e_s=e2e,
        handoff_gaps_s=[0.3],
    )


def test_pdd_summary_carries_phases_per_pipeline_and_ratios_name_every_metric():
    pdd = summarize("pdd", [_result(2.0, 0.2, [0.1, 0.3]), _result(3.0, 0.2, [0.1])])
    assert pdd.e2e_p50 == pytest.approx(2.5) and pdd.itl_p90 is not None
    records = [_handed_off(2.0), _handed_off(4.0)]
    with_records = summarize("pdd", [_result(r.e2e_s, 0.2, [0.1], r) for r in records])
    phases = with_records.phases["P-RLD-MD"]
    assert phases["requests"] == 2
    assert phases["to_first_token"] + phases["relay"] + phases["handoff_gap"] + phases[
        "main"
    ] == pytest.approx(3.0)
    assert with_records.handoff_gap_p99 == pytest.approx(0.3)
    cross = summarize("cross-dc", [_result(4.0, 1.0, [0.1, 0.1]), _result(5.0, 1.0, [0.1])])
    text = ratios(pdd, cross)
    assert "TTFT p50/p90/p99 0.20x" in text and "E2E p50/p90/p99 0.56x" in text, text
    assert "pdd / cross-dc" in table([cross, with_records, pdd], baseline="cross-dc")
    assert mean_phases([]) == {}


def test_the_phase_plot_is_written(tmp_path):
    path = tmp_path / "phases.png"
    phase_plot(mean_phases([_handed_off(2.0).as_dict()]), {"cross-dc": 3.0}, str(path), "t")
    assert path.stat().st_size > 1000


def _point(mbps: float, sessions: int, pdd_e2e: float, pdd_ttft: float) -> dict:
    cross = summarize("cross-dc", [_result(4.0, 1.0, [0.1])])
    pdd = summarize("pdd", [_result(pdd_e2e, pdd_ttft, [0.1])])
    return {"wan_mbps": mbps, "sessions": sessions, "summaries": [cross, pdd]}


def test_the_sweep_is_ratios_to_cross_dc_per_link_and_load_and_its_plot_is_written(tmp_path):
    points = [_point(32.0, 5, 3.0, 0.6), _point(8.0, 5, 2.0, 0.4), _point(8.0, 3, 4.4, 0.5)]
    points.append({"wan_mbps": 8.0, "sessions": 7, "summaries": points[0]["summaries"][1:]})
    data = sweep_ratios(points)
    assert data[("pdd", "e2e_p50")][8.0] == [(3, pytest.approx(1.1)), (5, pytest.approx(0.5))]
    assert data[("pdd", "ttft_p90")][32.0] == [(5, pytest.approx(0.6))]
    assert ("cross-dc", "e2e_p50") not in data  # the baseline is not its own contender
    path = tmp_path / "sweep.png"
    sweep_plot(points, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_repeats_are_judged_on_the_median_of_their_ratios_and_the_sweep_draws_the_median(
    tmp_path,
):
    # Three repeats of one point (E2E 0.8x, 1.3x, 0.85x of cross-DC's), one run of another.
    points = [_point(8.0, 5, e2e, 0.4) for e2e in (3.2, 5.2, 3.4)] + [_point(8.0, 3, 4.4, 0.5)]
    data = sweep_ratios(points)
    assert data[("pdd", "e2e_p50")][8.0] == [(3, pytest.approx(1.1)), (5, pytest.approx(0.85))]
    lines = repeats_summary(points)
    # Only the repeated point is summarized: one line per goal metric.
    assert len(lines) == 3 and all("5 sessions, 8 Mbit/s, 3 repeats" in x for x in lines)
    [e2e] = [x for x in lines if "E2E P50" in x]
    assert e2e.startswith("[met]") and "0.80x 1.30x 0.85x; median 0.85x (goal <= 0.9x)" in e2e
    [ttft] = [x for x in lines if "TTFT P90" in x]
    assert ttft.startswith("[met]") and "median 0.40x (goal <= 0.5x)" in ttft
    slow = repeats_summary([_point(32.0, 5, e2e, 0.8) for e2e in (3.2, 4.0)])
    [ttft32] = [x for x in slow if "TTFT P90" in x]
    assert ttft32.startswith("[MISSED]") and "(goal <= 0.7x)" in ttft32
    [e2e32] = [x for x in slow if "E2E P50" in x]
    assert e2e32.startswith("[met]") and "median 0.90x" in e2e32  # mean of the middle two
    sweep_plot(points, str(tmp_path / "sweep.png"))


def test_each_goal_line_names_same_dc_pds_own_median_ratio_where_the_run_has_it():
    points = []
    for pdd_e2e, same_e2e in ((3.2, 2.8), (5.2, 3.6), (3.4, 4.4)):
        point = _point(8.0, 5, pdd_e2e, 0.4)
        point["summaries"].append(summarize("same-dc", [_result(same_e2e, 0.6, [0.1])]))
        points.append(point)
    lines = repeats_summary(points)
    [e2e] = [x for x in lines if "E2E P50" in x]
    # same-DC's ratios 0.7x, 0.9x, 1.1x: their median beside PDD's.
    assert e2e.endswith("median 0.85x (goal <= 0.9x); same-dc itself 0.90x")
    [ttft] = [x for x in lines if "TTFT P90" in x]
    assert ttft.endswith("; same-dc itself 0.60x")
    # A run without same-DC PD says nothing of it; same-DC is not judged as a contender.
    assert not any("same-dc" in x for x in repeats_summary([_point(8.0, 5, 3, 1)] * 2))
    assert not any(x.split()[1] == "same-dc" for x in lines)


def test_a_json_point_gives_back_the_summaries_it_was_written_from():
    point = _point(8.0, 5, 3.2, 0.4)
    written = {
        "wan_mbps": 8.0,
        "sessions": 5,
        "summaries": [s.as_dict() for s in point["summaries"]],
    }
    assert summaries_from_json(written) == point


def test_the_ttft_goal_is_the_one_of_the_slowest_listed_link_at_least_as_fast():
    assert [goal_for("ttft_p90", mbps) for mbps in (1, 8, 8.5, 32, 100, 10_000, 40_000)] == [
        0.5,
        0.5,
        0.7,
        0.7,
        0.45,
        0.45,
        0.45,
    ]
    assert goal_for("e2e_p50", 8) == goal_for("e2e_p90", 100) == 0.9
    with pytest.raises(KeyError):
        goal_for("itl_p50", 8)


def test_each_repeat_starts_with_the_next_contender():
    names = ["same-dc", "cross-dc", "pdd"]
    assert contender_order(names, 0) == names
    assert contender_order(names, 1) == ["cross-dc", "pdd", "same-dc"]
    assert contender_order(names, 2) == ["pdd", "same-dc", "cross-dc"]
    assert contender_order(names, 3) == names
    assert contender_order([], 4) == []
