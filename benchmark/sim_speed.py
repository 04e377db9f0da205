"""Simulator speed: one hour of the Mooncake conversation trace (12,031 requests) per contender.

    python3 benchmark/run.py sim-speed [--trace PATH] [--contender NAME ...]

Prints wall-clock seconds per contender (single process, one core) and the target: under a
minute for the hour. A benchmark, not a test: it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pdd.sim.defaults import default_sim_config  # noqa: E402
from sglang_pdd.sim.runner import run_contender  # noqa: E402
from sglang_pdd.sim.workload import load_mooncake  # noqa: E402

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2] / "shared/traces/mooncake_conversation_trace.jsonl"
)


def main(argv: list[str] | None = None) -> int:
    """Time each contender on the trace."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trace", default=str(DEFAULT_TRACE), help="Mooncake trace")
    p.add_argument("--contender", action="append", help="only this contender (repeatable)")
    args = p.parse_args(argv)
    t = time.perf_counter()
    requests = load_mooncake(args.trace)
    load_s = time.perf_counter() - t
    span = requests[-1].arrival_s - requests[0].arrival_s
    print(f"trace: {len(requests)} requests over {span / 3600:.2f} h (loaded in {load_s:.1f} s)")
    cfg = default_sim_config()
    total = 0.0
    specs = [s for s in cfg.contenders if not args.contender or s.name in args.contender]
    for spec in tqdm(specs, desc="contenders", unit="run"):
        t = time.perf_counter()
        result, records = run_contender(spec, cfg, requests)
        wall = time.perf_counter() - t
        total += wall
        done = sum(r.completions for r in records)
        tqdm.write(
            f"{spec.name:<12} {wall:6.1f} s wall  ({len(requests) / wall:,.0f} requests/s, "
            f"{done} completed, TTFT p99 {result.summary['ttft_s']['p99']:.2f} s)"
        )
    print(f"total {total:.1f} s; target: one contender-hour in under 60 s on one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
