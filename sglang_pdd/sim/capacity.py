"""SLA-effective throughput: the highest offered load a fixed cluster serves within its SLA."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sglang_pdd.sim.config import ClusterSpec, SimConfig
from sglang_pdd.sim.metrics import ContenderResult, meets_sla
from sglang_pdd.sim.runner import run_contender
from sglang_pdd.sim.workload import Request


@dataclass
class CapacityResult:
    """The highest load found feasible, its goodput (requests/s) and BCR at that load."""

    load: float
    result: ContenderResult | None

    @property
    def goodput_rps(self) -> float:
        """SLA-meeting requests per second at the highest feasible load."""
        return self.result.summary["goodput_rps"] if self.result else 0.0

    @property
    def bcr(self) -> float:
        """BCR at the highest feasible load."""
        return self.result.summary["bcr"] if self.result else 0.0


def max_sustainable_load(
    spec: ClusterSpec,
    config: SimConfig,
    workload_at: Callable[[float], list[Request]],
    low: float,
    high: float,
    min_attainment: float = 0.9,
    iterations: int = 6,
) -> CapacityResult:
    """Bisect the load parameter (e.g. sessions/s) for the largest feasible one (``meets_sla``).

    Assumes attainment falls as load rises. Returns load 0 and no result if even ``low`` fails.
    """
    best = CapacityResult(0.0, None)
    res, _ = run_contender(spec, config, workload_at(low))
    if not meets_sla(res.summary, config.sla, min_attainment):
        return best
    best = CapacityResult(low, res)
    lo, hi = low, high
    for _ in range(iterations):
        mid = (lo + hi) / 2
        res, _ = run_contender(spec, config, workload_at(mid))
        if meets_sla(res.summary, config.sla, min_attainment):
            lo, best = mid, CapacityResult(mid, res)
        else:
            hi = mid
    return best
