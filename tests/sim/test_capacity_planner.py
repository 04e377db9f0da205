"""The planner finds the known optimum of small hand-solvable cases."""

import pytest

from sglang_pdd.sim.capacity_planner import PlanBounds, Planner, plan_best, same_dc_templates
from sglang_pdd.sim.chips import ChipProfile
from sglang_pdd.sim.config import SlaConfig

from .helpers import CHIP, config, req, spec

# Four requests arrive together; each prefill takes 0.02 s on one instance and there is no
# batching gain (efficiency is flat), so with k prefill instances the i-th request (1-based)
# waits ceil(i / k) prefills, then ~0.1 ms of transfer and one 0.1 s decode step (10 GB of
# weights at 100 GB/s). With a TTFT SLA of 0.13 s a request meets it only if it is among the
# first k: the share meeting the SLA is min(k, 4) / 4.
BURST = [req(i, 0.0, 1000, 2, [10 * i]) for i in range(4)]
SLA = SlaConfig(ttft_s=0.13, itl_s=1.0)


@pytest.mark.parametrize("attainment, prefill", [(1.0, 4), (0.75, 3), (0.5, 2), (0.25, 1)])
def test_smallest_prefill_count_meeting_the_sla(attainment, prefill):
    s = spec("same-dc")
    planner = Planner(config(s, sla=SLA), BURST, attainment, PlanBounds(8, 4, 1))
    assert planner.smallest_feasible(s, "prefill", 1, 8).prefill.count == prefill


def test_search_maximizes_bcr():
    # Each chip costs 1; with k prefill instances and one decoder, min(k, 4) requests meet the
    # SLA, so BCR is proportional to min(k, 4) / (k + 1): largest at k = 4, not at the smallest
    # feasible k = 2.
    s = spec("same-dc")
    planner = Planner(config(s, sla=SLA), BURST, 0.5, PlanBounds(8, 4, 1))
    best = planner.search(s, [1.0])
    assert (best.spec.prefill.count, best.spec.decode.count) == (4, 1)
    k4 = best.result.summary["bcr"]
    k2 = planner.evaluate(spec("same-dc", prefill=2)).summary["bcr"]
    assert k4 / k2 == pytest.approx((4 / 5) / (2 / 3))


def test_cheaper_chip_of_equal_speed_wins():
    dear = ChipProfile(
        "Y",
        CHIP.peak_tflops,
        CHIP.memory_gb,
        CHIP.memory_bw_gbs,
        CHIP.interconnect_gbs,
        cost_per_hour=3.0,
    )
    s = spec("same-dc")
    cfg = config(s, sla=SLA, chips={"X": CHIP, "Y": dear})
    planner = Planner(cfg, BURST, 1.0, PlanBounds(8, 4, 1))
    best = plan_best(planner, same_dc_templates(s, ["Y", "X"]), [1.0])
    assert best.spec.prefill.chip == "X"
    assert best.result.summary["cost_per_hour"] == pytest.approx(5.0)


def test_tail_bound_makes_a_plan_infeasible():
    # With 2 prefill instances half the burst meets the per-request SLA, but the last request
    # waits two prefills: a P99 bound below its TTFT rules the plan out.
    s = spec("same-dc", prefill=2)
    loose = Planner(config(s, sla=SLA), BURST, 0.5, PlanBounds(8, 4, 1))
    assert loose.feasible(s)
    tight_sla = SlaConfig(ttft_s=0.13, itl_s=1.0, p99_ttft_s=0.13)
    tight = Planner(config(s, sla=tight_sla), BURST, 0.5, PlanBounds(8, 4, 1))
    assert not tight.feasible(s)
    assert tight.smallest_feasible(s, "prefill", 1, 8).prefill.count == 4


def test_infeasible_bounds_report_no_plan():
    s = spec("same-dc")
    planner = Planner(config(s, sla=SLA), BURST, 1.0, PlanBounds(2, 2, 1))
    best = planner.search(s, [1.0])
    assert best.spec is None and "no feasible plan" in best.describe()
