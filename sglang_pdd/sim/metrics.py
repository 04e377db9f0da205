"""Summaries of a simulated run: latency percentiles, SLA goodput, RLD share, link use, BCR."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sglang_pdd.sim.cluster import ClusterSim, RequestRecord
from sglang_pdd.sim.config import ClusterSpec, SimConfig

PCTS = (50, 90, 99)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (0 for an empty list)."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(pct / 100 * len(s)) - 1))
    return s[k]


def weighted_percentile(hist: dict[float, float], pct: float) -> float:
    """Percentile of a {value: weight} histogram."""
    total = sum(hist.values())
    if total <= 0:
        return 0.0
    acc = 0.0
    for value in sorted(hist):
        acc += hist[value]
        if acc >= pct / 100 * total:
            return value
    return max(hist)


def meets_sla(summary: dict, sla, min_attainment: float) -> bool:
    """Whether a run is feasible: enough requests meet the SLA and the TTFT tail bound holds."""
    if summary["sla_attainment"] < min_attainment:
        return False
    return not (sla.p99_ttft_s > 0 and summary["ttft_s"]["p99"] > sla.p99_ttft_s)


def _pcts(values: list[float]) -> dict[str, float]:
    return {f"p{p}": round(percentile(values, p), 4) for p in PCTS}


@dataclass
class ContenderResult:
    """Numbers for one contender (all JSON-ready)."""

    name: str
    summary: dict

    def row(self) -> list[str]:
        """Cells for the printed table."""
        s = self.summary
        t = s["ttft_s"]
        return [
            self.name,
            f"{t['p50']:.2f}",
            f"{t['p90']:.2f}",
            f"{t['p99']:.2f}",
            f"{s['itl_s']['p90'] * 1000:.0f}",
            f"{s['sla_attainment'] * 100:.1f}",
            f"{s['goodput_rps']:.2f}",
            f"{s['relay_token_share'] * 100:.1f}",
            f"{s['wan_utilization'] * 100:.0f}",
            f"{s['cost_per_hour']:.1f}",
            f"{s['bcr']:.2f}",
        ]


TABLE_HEADER = [
    "contender",
    "TTFT p50",
    "p90",
    "p99",
    "ITL p90 ms",
    "SLA %",
    "goodput rps",
    "RLD tok %",
    "WAN util %",
    "cost/h",
    "BCR",
]


def _arrival_span(measured: list[RequestRecord]) -> float:
    """Seconds from the first measured arrival to the last (a burst at one instant: 1 s)."""
    if not measured:
        return 1.0
    span = max(r.arrival_s for r in measured) - min(r.arrival_s for r in measured)
    return span if span > 0 else 1.0


def _step_times(sim: ClusterSim) -> dict[float, float]:
    """Every decoding instance's step-time histogram, summed."""
    hist: dict[float, float] = {}
    for inst in sim.decode + sim.relay:
        for k, v in inst.itl_hist.items():
            hist[k] = hist.get(k, 0.0) + v
    return hist


def summarize(
    sim: ClusterSim, spec: ClusterSpec, config: SimConfig, records: list[RequestRecord]
) -> ContenderResult:
    """Reduce one run's records to its summary (only requests arriving after measure_from_s)."""
    measured = [r for r in records if r.arrival_s >= config.measure_from_s]
    sla = config.sla
    ttft, itl, e2e, gaps = [], [], [], []
    good = 0
    relay_tokens = main_tokens = 0
    pipelines: dict[str, int] = {}
    for r in measured:
        t = r.first_token_s - r.arrival_s
        mean_itl = (
            (r.done_s - r.first_token_s) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
        )
        ttft.append(t)
        itl.append(mean_itl)
        e2e.append(r.done_s - r.arrival_s)
        if r.handoff_gap_s > 0:
            gaps.append(r.handoff_gap_s)
        good += t <= sla.ttft_s and mean_itl <= sla.itl_s
        relay_tokens += r.relay_tokens
        main_tokens += r.main_tokens
        pipelines[r.pipeline] = pipelines.get(r.pipeline, 0) + 1
    span = _arrival_span(measured)
    end = max((r.done_s for r in records), default=0.0)
    cost = config.cost_per_hour(spec)
    goodput = good / span if measured else 0.0
    step_hist = _step_times(sim)
    tokens = relay_tokens + main_tokens
    n = len(measured)
    summary = {
        "kind": spec.kind,
        "requests": n,
        "ttft_s": _pcts(ttft),
        "itl_s": _pcts(itl),
        "step_time_s": {f"p{p}": weighted_percentile(step_hist, p) for p in PCTS},
        "e2e_s": _pcts(e2e),
        "handoff_gap_s": _pcts(gaps),
        "sla": {"ttft_s": sla.ttft_s, "itl_s": sla.itl_s, "p99_ttft_s": sla.p99_ttft_s},
        "sla_attainment": good / n if n else 0.0,
        "goodput_rps": goodput,
        "offered_rps": n / span if n else 0.0,
        "relay_token_share": relay_tokens / tokens if tokens else 0.0,
        "pipelines": pipelines,
        "mean_prefill_hit": sum(r.prefill_hit_tokens / r.input_tokens for r in measured) / n
        if n
        else 0.0,
        "mean_decode_hit": sum(r.decode_hit_tokens / r.input_tokens for r in measured) / n
        if n
        else 0.0,
        "wan_gb": (sim.wan.bytes_sent / 1e9) if sim.wan else 0.0,
        "wan_utilization": sim.wan.utilization(end) if sim.wan else 0.0,
        "intra_utilization": sim.intra.utilization(end),
        "chips": {role: {"chip": p.chip, "chips": p.total_chips} for role, p in spec.pools()},
        "cost_per_hour": cost,
        # SLA-meeting requests per hour per unit of hourly hardware cost.
        "bcr": goodput * 3600 / cost if cost > 0 else 0.0,
    }
    return ContenderResult(spec.name, summary)


def format_table(results: list[ContenderResult]) -> str:
    """A fixed-width table of the contenders."""
    rows = [TABLE_HEADER] + [r.row() for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEADER))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
