"""``sglang-pdd sim`` and ``sglang-pdd plan``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from sglang_pdd.sim.capacity_planner import (
    PlanBounds,
    Planner,
    PlanResult,
    pdd_templates,
    plan_best,
    same_dc_templates,
)
from sglang_pdd.sim.config import SimConfig, SlaConfig, load_chips, load_sim_config
from sglang_pdd.sim.defaults import default_sim_config
from sglang_pdd.sim.metrics import format_table
from sglang_pdd.sim.runner import run_contender
from sglang_pdd.sim.workload import (
    AgenticWorkloadConfig,
    Request,
    generate_agentic,
    load_mooncake,
    workload_stats,
)


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help="Mooncake-format trace (JSON lines)")
    src.add_argument(
        "--agentic",
        action="store_true",
        help="generate agentic sessions instead of reading a trace",
    )
    p.add_argument("--duration", type=float, help="seconds of workload to use")
    p.add_argument("--rate-scale", type=float, default=1.0, help="replay a trace this much faster")
    p.add_argument("--sessions-per-s", type=float, default=1.5, help="agentic session arrival rate")
    p.add_argument("--seed", type=int, default=0, help="workload and jitter seed")
    p.add_argument("--warmup", type=float, help="exclude requests arriving in the first S seconds")
    p.add_argument("--config", help="YAML config on top of the built-in defaults")


def _workload(args) -> list[Request]:
    if args.trace:
        return load_mooncake(args.trace, duration_s=args.duration, rate_scale=args.rate_scale)
    cfg = AgenticWorkloadConfig(
        duration_s=args.duration or 600.0, sessions_per_s=args.sessions_per_s
    )
    return generate_agentic(cfg, seed=args.seed)


def _config(args) -> SimConfig:
    base = default_sim_config()
    cfg = load_sim_config(args.config, base) if args.config else base
    cfg = dataclasses.replace(cfg, seed=args.seed)
    if args.warmup is not None:
        cfg = dataclasses.replace(cfg, measure_from_s=args.warmup)
    return cfg


def _print_workload(requests: list[Request]) -> dict:
    st = workload_stats(requests).as_dict()
    print(
        f"workload: {st['requests']} requests over {st['duration_s']:.0f} s, mean input "
        f"{st['mean_input']:.0f}, mean output {st['mean_output']:.0f}, mean prefix hit "
        f"{st['mean_hit'] * 100:.1f}% (unbounded cache), {st['frac_hit_over_95'] * 100:.1f}% "
        f"of requests hit > 95%"
    )
    return st


def sim_main(argv: list[str]) -> int:
    """Run every contender of one configuration on a workload and report them."""
    p = argparse.ArgumentParser(prog="sglang-pdd sim", description=sim_main.__doc__)
    _add_workload_args(p)
    p.add_argument("--json", help="write the numbers to this JSON file")
    p.add_argument("--plots", help="write PNG plots into this directory")
    p.add_argument("--contender", action="append", help="run only this contender (repeatable)")
    args = p.parse_args(argv)
    try:
        cfg = _config(args)
        requests = _workload(args)
    except (ValueError, OSError) as exc:
        print(f"sglang-pdd sim: {exc}", file=sys.stderr)
        return 2
    specs = [c for c in cfg.contenders if not args.contender or c.name in args.contender]
    if not specs:
        print(f"sglang-pdd sim: no contender named {args.contender}", file=sys.stderr)
        return 2
    stats = _print_workload(requests)
    results, records = [], {}
    t0 = time.perf_counter()
    for spec in specs:
        res, recs = run_contender(spec, cfg, requests)
        results.append(res)
        records[spec.name] = recs
    wall = time.perf_counter() - t0
    print(f"SLA: TTFT <= {cfg.sla.ttft_s} s and mean ITL <= {cfg.sla.itl_s * 1000:.0f} ms")
    print(format_table(results))
    print(f"({len(specs)} contenders simulated in {wall:.1f} s)")
    if args.json:
        out = {
            "workload": stats,
            "sla": dataclasses.asdict(cfg.sla),
            "contenders": {r.name: r.summary for r in results},
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
    if args.plots:
        from sglang_pdd.sim.plots import write_plots

        for path in write_plots(args.plots, results, records, cfg.measure_from_s):
            print(f"wrote {path}")
    return 0


def parse_sla(text: str) -> SlaConfig:
    """'ttft=10,itl=0.06,p99=30' (seconds) or just '10' (TTFT only, default ITL, no P99 bound)."""
    fields = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        if not value:
            key, value = "ttft", key
        key = {"ttft": "ttft_s", "itl": "itl_s", "p99": "p99_ttft_s"}.get(key.strip())
        if key is None:
            raise ValueError(f"--sla: keys are ttft, itl and p99 (seconds), got {part!r}")
        try:
            fields[key] = float(value)
        except ValueError:
            raise ValueError(f"--sla: {part!r} is not a number") from None
    return SlaConfig(**fields)


def _parse_links(text: str) -> list[float]:
    try:
        links = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--link must be comma-separated Gbps values, got {text!r}") from None
    if not links or min(links) <= 0:
        raise ValueError(f"--link values must be > 0 Gbps, got {text!r}")
    return links


def _print_plan(title: str, plan: PlanResult) -> None:
    print(f"{title}: {plan.describe()}")
    if plan.result is not None:
        s = plan.result.summary
        t = s["ttft_s"]
        print(
            f"    cost/h {s['cost_per_hour']:.1f}  BCR {s['bcr']:.2f}  SLA "
            f"{s['sla_attainment'] * 100:.1f}%  TTFT p50/p90/p99 {t['p50']:.2f}/{t['p90']:.2f}/"
            f"{t['p99']:.2f} s  RLD tokens {s['relay_token_share'] * 100:.1f}%"
        )


def _plan_parser() -> argparse.ArgumentParser:
    """``sglang-pdd plan``'s flags: the workload's, the SLA, the chips and the search bounds."""
    p = argparse.ArgumentParser(prog="sglang-pdd plan", description=plan_main.__doc__)
    _add_workload_args(p)
    p.add_argument(
        "--sla",
        default="ttft=10,itl=0.1",
        help="per-request TTFT/mean-ITL bounds and optional TTFT P99 bound: ttft=10,itl=0.1,p99=30",
    )
    p.add_argument("--chips", help="chips YAML (default: built-in chips A and B)")
    p.add_argument("--link", default="25,50,100", help="WAN capacities to try, Gbps, e.g. 25,50")
    p.add_argument("--prefill-chips", help="chip types allowed for P and RLD (datacenter A)")
    p.add_argument("--decode-chips", help="chip types allowed for MD (datacenter B)")
    p.add_argument("--attainment", type=float, default=0.9, help="share of requests in SLA")
    p.add_argument("--max-prefill", type=int, default=10, help="most P instances")
    p.add_argument("--max-decode", type=int, default=10, help="most decode instances")
    p.add_argument("--max-relay", type=int, default=3, help="most RLD instances")
    p.add_argument("--json", help="write both plans to this JSON file")
    p.add_argument("--verbose", action="store_true", help="print every simulated plan")
    return p


def plan_main(argv: list[str]) -> int:
    """Search instance counts per chip type and WAN capacity maximizing BCR under an SLA."""
    args = _plan_parser().parse_args(argv)
    try:
        cfg = _config(args)
        if args.chips:
            cfg = dataclasses.replace(cfg, chips=load_chips(args.chips))
        cfg = dataclasses.replace(cfg, sla=parse_sla(args.sla))
        links = _parse_links(args.link)
        chips = sorted(cfg.chips)
        p_chips = args.prefill_chips.split(",") if args.prefill_chips else chips
        d_chips = args.decode_chips.split(",") if args.decode_chips else chips
        for c in p_chips + d_chips:
            cfg.chip(c)
        bounds = PlanBounds(args.max_prefill, args.max_decode, args.max_relay)
        requests = _workload(args)
    except (ValueError, OSError) as exc:
        print(f"sglang-pdd plan: {exc}", file=sys.stderr)
        return 2
    by_kind = {c.kind: c for c in cfg.contenders}
    if "pdd" not in by_kind or "same-dc" not in by_kind:
        print("sglang-pdd plan: the config needs a pdd and a same-dc contender", file=sys.stderr)
        return 2
    stats = _print_workload(requests)
    tail = f", TTFT P99 <= {cfg.sla.p99_ttft_s} s" if cfg.sla.p99_ttft_s > 0 else ""
    print(
        f"SLA: TTFT <= {cfg.sla.ttft_s} s, mean ITL <= {cfg.sla.itl_s * 1000:.0f} ms for >= "
        f"{args.attainment * 100:.0f}% of requests{tail}; links {links} Gbps"
    )
    progress = print if args.verbose else None
    planner = Planner(cfg, requests, args.attainment, bounds, progress)
    t0 = time.perf_counter()
    pdd = plan_best(planner, pdd_templates(by_kind["pdd"], p_chips, d_chips), links)
    same = plan_best(planner, same_dc_templates(by_kind["same-dc"], chips), links)
    print(f"({planner.evaluated} plans simulated in {time.perf_counter() - t0:.0f} s)")
    _print_plan("best PDD plan         ", pdd)
    _print_plan("best same-DC PD plan  ", same)
    if pdd.result is not None and same.result is not None:
        a, b = pdd.result.summary, same.result.summary
        print(
            f"PDD vs same-DC: cost {100 * (a['cost_per_hour'] / b['cost_per_hour'] - 1):+.1f}%, "
            f"BCR {100 * (a['bcr'] / b['bcr'] - 1):+.1f}%"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "workload": stats,
                    "sla": dataclasses.asdict(cfg.sla),
                    "pdd": pdd.as_dict(),
                    "same_dc": same.as_dict(),
                },
                f,
                indent=2,
            )
    return 0 if pdd.spec is not None and same.spec is not None else 1
