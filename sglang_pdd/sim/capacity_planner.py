"""Capacity planner: instance counts per role and chip type, and WAN capacity, maximizing BCR.

BCR = SLA goodput (requests/s meeting the SLA) per unit of hourly hardware cost. A plan is
feasible when at least ``min_attainment`` of its requests meet the SLA (and its TTFT P99 is
within the SLA's optional tail bound). The search assumes
feasibility is monotone in each count (more instances never hurt): for each chip assignment and
link option it binary-searches the smallest feasible count of each role in turn, then hill-climbs
on BCR over +-1 steps. Every simulation is cached by plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sglang_pdd.sim.config import ClusterSpec, PoolSpec, SimConfig
from sglang_pdd.sim.link import LinkConfig
from sglang_pdd.sim.metrics import ContenderResult, meets_sla
from sglang_pdd.sim.runner import run_contender
from sglang_pdd.sim.workload import Request


@dataclass(frozen=True)
class PlanBounds:
    """Largest instance counts the search may use per role (RLD has a minimum of 1 in PDD)."""

    max_prefill: int = 12
    max_decode: int = 12
    max_relay: int = 3

    def __post_init__(self) -> None:
        for f in ("max_prefill", "max_decode", "max_relay"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{f} must be an integer >= 1, got {v!r}")


@dataclass
class PlanResult:
    """The best plan found, its numbers, and how many simulations the search ran."""

    spec: ClusterSpec | None
    result: ContenderResult | None
    evaluated: int
    tried: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-ready description."""
        if self.spec is None or self.result is None:
            return {"feasible": False, "evaluated": self.evaluated}
        s = self.result.summary
        return {
            "feasible": True,
            "contender": self.spec.name,
            "kind": self.spec.kind,
            "pools": {
                role: {"chip": p.chip, "instances": p.count, "chips": p.total_chips}
                for role, p in self.spec.pools()
            },
            "wan_gbps": self.spec.wan.bandwidth_gbps if self.spec.cross_dc else 0.0,
            "cost_per_hour": s["cost_per_hour"],
            "bcr": s["bcr"],
            "sla_attainment": s["sla_attainment"],
            "goodput_rps": s["goodput_rps"],
            "ttft_s": s["ttft_s"],
            "relay_token_share": s["relay_token_share"],
            "evaluated": self.evaluated,
        }

    def describe(self) -> str:
        """One line such as '5x8 A (P) + 1x4 A (RLD) + 4x8 B (MD) + 80 Gbps'."""
        if self.spec is None:
            return "no feasible plan within the bounds"
        parts = [f"{p.count}x{p.chips} {p.chip} ({role})" for role, p in self.spec.pools()]
        chips: dict[str, int] = {}
        for _, p in self.spec.pools():
            chips[p.chip] = chips.get(p.chip, 0) + p.total_chips
        total = " + ".join(f"{n} {c}" for c, n in sorted(chips.items()))
        link = f" + {self.spec.wan.bandwidth_gbps:g} Gbps WAN" if self.spec.cross_dc else ""
        return " + ".join(parts) + link + f"  [= {total}]"


class Planner:
    """Searches plans for one contender template on one workload."""

    def __init__(
        self,
        config: SimConfig,
        requests: Sequence[Request],
        min_attainment: float = 0.9,
        bounds: PlanBounds | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if not 0 < min_attainment <= 1:
            raise ValueError(f"min_attainment must be in (0, 1], got {min_attainment!r}")
        self.config = config
        self.requests = list(requests)
        self.min_attainment = min_attainment
        self.bounds = bounds or PlanBounds()
        self.progress = progress
        self._cache: dict[tuple, ContenderResult] = {}

    def evaluate(self, spec: ClusterSpec) -> ContenderResult:
        """Simulate one plan (cached)."""
        key = (
            spec.kind,
            spec.prefill,
            spec.decode,
            spec.relay,
            spec.wan.bandwidth_gbps if spec.cross_dc else 0.0,
        )
        if key not in self._cache:
            result, _ = run_contender(spec, self.config, self.requests)
            self._cache[key] = result
            if self.progress:
                s = result.summary
                self.progress(
                    f"  {spec.kind:<8} {_counts(spec):<32} SLA {s['sla_attainment'] * 100:5.1f}% "
                    f"BCR {s['bcr']:8.2f}"
                )
        return self._cache[key]

    @property
    def evaluated(self) -> int:
        """Simulations run so far."""
        return len(self._cache)

    def feasible(self, spec: ClusterSpec) -> bool:
        """Whether the plan meets the SLA for enough requests."""
        return meets_sla(self.evaluate(spec).summary, self.config.sla, self.min_attainment)

    def smallest_feasible(
        self, spec: ClusterSpec, role: str, low: int, high: int
    ) -> ClusterSpec | None:
        """Binary search the smallest feasible count of one role (others fixed)."""
        top = _with_count(spec, role, high)
        if not self.feasible(top):
            return None
        lo, hi = low, high
        while lo < hi:
            mid = (lo + hi) // 2
            if self.feasible(_with_count(spec, role, mid)):
                hi = mid
            else:
                lo = mid + 1
        return _with_count(spec, role, lo)

    def search(self, template: ClusterSpec, links: Sequence[float]) -> PlanResult:
        """Best plan for a template's chip assignment over the link options."""
        b = self.bounds
        roles = [("prefill", 1, b.max_prefill), ("decode", 1, b.max_decode)]
        if template.kind == "pdd":
            roles.append(("relay", 1, b.max_relay))
        best: tuple[float, ClusterSpec] | None = None
        for gbps in links if template.cross_dc else [template.wan.bandwidth_gbps]:
            spec = dataclasses.replace(template, wan=_link(template.wan, gbps))
            for role, _, high in roles:
                spec = _with_count(spec, role, high)
            # Two passes of per-role minimization: after others shrink, a role may need more.
            for _ in range(2):
                for role, low, high in roles:
                    found = self.smallest_feasible(spec, role, low, high)
                    if found is None:
                        spec = None
                        break
                    spec = found
                if spec is None:
                    break
            if spec is None:
                continue
            spec = self._climb(spec, roles)
            bcr = self.evaluate(spec).summary["bcr"]
            if best is None or bcr > best[0]:
                best = (bcr, spec)
        if best is None:
            return PlanResult(None, None, self.evaluated)
        return PlanResult(best[1], self.evaluate(best[1]), self.evaluated)

    def _climb(self, spec: ClusterSpec, roles) -> ClusterSpec:
        """Hill-climb on BCR over +-1 instance per role among feasible plans."""
        current = spec
        score = self.evaluate(current).summary["bcr"]
        improved = True
        while improved:
            improved = False
            for role, low, high in roles:
                count = getattr(current, role).count
                for step in (-1, 1):
                    n = count + step
                    if not low <= n <= high:
                        continue
                    cand = _with_count(current, role, n)
                    res = self.evaluate(cand).summary
                    ok = meets_sla(res, self.config.sla, self.min_attainment)
                    if ok and res["bcr"] > score + 1e-9:
                        current, score, improved = cand, res["bcr"], True
        return current


def _with_count(spec: ClusterSpec, role: str, n: int) -> ClusterSpec:
    pool: PoolSpec = getattr(spec, role)
    return dataclasses.replace(spec, **{role: dataclasses.replace(pool, count=n)})


def _link(base: LinkConfig, gbps: float) -> LinkConfig:
    return dataclasses.replace(base, bandwidth_gbps=float(gbps))


def _counts(spec: ClusterSpec) -> str:
    s = " ".join(f"{role}={p.count}x{p.chip}" for role, p in spec.pools())
    return s + (f" wan={spec.wan.bandwidth_gbps:g}" if spec.cross_dc else "")


def plan_best(
    planner: Planner,
    templates: Sequence[ClusterSpec],
    links: Sequence[float],
) -> PlanResult:
    """Best plan over several templates (e.g. one per chip assignment)."""
    best: PlanResult | None = None
    for template in templates:
        res = planner.search(template, links)
        if res.spec is not None and (
            best is None
            or best.spec is None
            or res.result.summary["bcr"] > best.result.summary["bcr"]
        ):
            best = res
    if best is None:
        return PlanResult(None, None, planner.evaluated)
    best.evaluated = planner.evaluated
    return best


def pdd_templates(
    base: ClusterSpec, prefill_chips: Sequence[str], decode_chips: Sequence[str]
) -> list[ClusterSpec]:
    """PDD templates: P and RLD on each datacenter-A chip, MD on each datacenter-B chip."""
    out = []
    for pc in prefill_chips:
        for dc in decode_chips:
            out.append(
                dataclasses.replace(
                    base,
                    name=f"pdd[{pc}/{dc}]",
                    prefill=dataclasses.replace(base.prefill, chip=pc),
                    relay=dataclasses.replace(base.relay, chip=pc),
                    decode=dataclasses.replace(base.decode, chip=dc),
                )
            )
    return out


def same_dc_templates(base: ClusterSpec, chips: Sequence[str]) -> list[ClusterSpec]:
    """Homogeneous same-datacenter PD templates, one per chip type."""
    return [
        dataclasses.replace(
            base,
            name=f"same-dc-pd[{c}]",
            prefill=dataclasses.replace(base.prefill, chip=c),
            decode=dataclasses.replace(base.decode, chip=c),
        )
        for c in chips
    ]
