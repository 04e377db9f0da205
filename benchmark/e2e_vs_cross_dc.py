"""Where PDD's answers gain or lose time against the same turns through cross-DC PD.

    python benchmark/run.py e2e-vs-cross-dc out/testbed.json

reads a ``benchmark/testbed.py`` JSON (with the ``pdd`` and ``cross-dc`` contenders) and prints,
per load point and PDD pipeline, how many PDD answers finished before their cross-DC twin and
why: for handoffs, MD's later start, RLD's head start and MD's slower pace
(``sglang_pdd/testbed/e2e_diff.py`` defines the split); and which of PDD's requests came later
than the TTFT goal (P90 <= 0.5x cross-DC's at 8 Mbit/s, 0.7x faster), by pipeline and the
policy's rule; then, for points run more than once (``--repeats``), each goal judged on the
median of the repeats beside same-DC PD's own median ratio to cross-DC PD (a decode server
beside P: what datacenter A reaches on the same hardware with no WAN at all).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglang_pdd.testbed.e2e_diff import pair_turns, summary_lines, ttft_goal_lines
from sglang_pdd.testbed.report import goal_for, repeats_summary, summaries_from_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="a benchmark/testbed.py --json file")
    ap.add_argument("--pdd", default="pdd", help="the PDD contender's name (default: pdd)")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.json).read_text())
    for point in data["points"]:
        runs = point["requests"]
        if args.pdd not in runs or "cross-dc" not in runs:
            print(f"== {point['label']}: needs the {args.pdd} and cross-dc contenders")
            continue
        diffs = pair_turns(runs[args.pdd], runs["cross-dc"])
        print(f"== {point['label']}: {args.pdd} vs cross-dc, {len(diffs)} paired turns")
        for line in summary_lines(diffs):
            print(line)
        goal = goal_for("ttft_p90", point["wan_mbps"])
        for line in ttft_goal_lines(runs[args.pdd], runs["cross-dc"], goal):
            print(line)
    # Points run more than once (--repeats): the goals judged on medians, beside same-DC PD's.
    summary = repeats_summary([summaries_from_json(p) for p in data["points"]], args.pdd)
    if summary:
        print(
            f"== the goals on medians of repeats, with same-DC PD's own ratio beside {args.pdd}'s"
        )
        for line in summary:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
