"""Decode throughput with and without KV transfers in flight, from SGLang's own log lines.

SGLang's decode servers log a ``Decode batch`` line every 40 steps with ``#transfer-req`` (KV
transfers in flight) and ``gen throughput (token/s)``. For every server log in a testbed run's
log folder (``benchmark/testbed.py`` prints it), this prints the median throughput over the
lines with transfers in flight and over those without, per server (e.g. PDD's Main-Decode
``main``, cross-DC PD's decode server ``cross-dc-decode``):

    python benchmark/run.py decode-logs /tmp/sglang-pdd-testbed-XXXX/logs-8mbps

``--step-times`` prints instead, per server and per stretch of decoding (a contender's run: lines
with no gap over ``--gap-s`` between them), the median time of one decode step at each batch
size (``#running-req`` over ``gen throughput``): the same server's speed over a run, and two
servers' at equal batch sizes (docs/testbed.md).
"""

from __future__ import annotations

import datetime
import re
import statistics
from collections import defaultdict
from pathlib import Path

import shared_flags  # benchmark/shared_flags.py (this script's folder)

# One ``Decode batch`` line of SGLang's scheduler log: its time stamp (SGLang may add a rank, as
# in ``[... TP0]``), the running requests, the KV transfers in flight (decode servers of a PD
# pair log it) and the batch's tokens per second.
_DECODE_LINE = re.compile(
    r"^(?:\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]\n]*\] )?Decode batch.*?#running-req: (\d+)"
    r"(?:.*?#transfer-req: (\d+))?.*?gen throughput \(token/s\): ([\d.]+)",
    re.MULTILINE,
)


def summarize(text: str) -> dict[str, tuple[int, float | None, float | None]] | None:
    """(lines, median tok/s with transfers in flight, without) over one log's decode lines;
    None without any."""
    rows = [(int(r), int(t), float(g)) for _, r, t, g in _DECODE_LINE.findall(text) if t]
    if not rows:
        return None
    busy = [g for _, t, g in rows if t > 0]
    idle = [g for _, t, g in rows if t == 0]
    return {
        "lines": (len(rows), None, None),
        "transfers in flight": (len(busy), statistics.median(busy) if busy else None, None),
        "none in flight": (len(idle), statistics.median(idle) if idle else None, None),
    }


def step_times(text: str, gap_s: float = 25.0, min_lines: int = 4) -> list:
    """[(first line's time, {batch size: (lines, median ms per decode step)})], one entry per
    stretch of decode lines with no silence over ``gap_s`` between them; batch sizes with fewer
    than ``min_lines`` lines are left out (as are lines of zero throughput: an idle start)."""
    stretches: list = []
    last = None
    for stamp, running, _, tok_s in _DECODE_LINE.findall(text):
        if not stamp:
            continue  # a line without its time cannot be placed in a stretch
        at = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
        if float(tok_s) <= 0:
            continue
        if last is None or (at - last).total_seconds() > gap_s:
            stretches.append((stamp, defaultdict(list)))
        last = at
        n = int(running)
        stretches[-1][1][n].append(1000 * n / float(tok_s))
    return [
        (
            stamp,
            {
                n: (len(ms), statistics.median(ms))
                for n, ms in sorted(by_size.items())
                if len(ms) >= min_lines
            },
        )
        for stamp, by_size in stretches
    ]


def print_step_times(log_dir: Path, gap_s: float) -> None:
    print(f"{'server':<20} {'from':<19}  ms per decode step at batch size (lines)")
    for log in sorted(log_dir.glob("*.log")):
        for stamp, sizes in step_times(log.read_text(errors="replace"), gap_s):
            if sizes:
                cells = "  ".join(f"{n}: {ms:5.2f} ({k})" for n, (k, ms) in sizes.items())
                print(f"{log.stem:<20} {stamp:<19}  {cells}")


def main(argv: list[str] | None = None) -> int:
    ap = shared_flags.parser(__doc__.splitlines()[0], raw=False)
    shared_flags.log_dir(ap)
    ap.add_argument(
        "--step-times",
        action="store_true",
        help="per server and stretch of decoding, the median ms per decode step by batch size",
    )
    ap.add_argument(
        "--gap-s",
        type=float,
        default=25.0,
        help="with --step-times: silence that ends a stretch (testbed contenders run apart)",
    )
    args = ap.parse_args(argv)
    if args.step_times:
        print_step_times(Path(args.log_dir), args.gap_s)
        return 0
    print(
        f"{'server':<20} {'lines':>5} {'in flight: n':>12} {'tok/s p50':>9} "
        f"{'none: n':>7} {'tok/s p50':>9}"
    )
    for log in sorted(Path(args.log_dir).glob("*.log")):
        s = summarize(log.read_text(errors="replace"))
        if s is None:
            continue
        n_busy, busy, _ = s["transfers in flight"]
        n_idle, idle, _ = s["none in flight"]

        def f(v):
            return "-" if v is None else f"{v:.0f}"

        print(
            f"{log.stem:<20} {s['lines'][0]:>5} {n_busy:>12} {f(busy):>9} {n_idle:>7} {f(idle):>9}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
