"""Decode throughput with and without KV transfers in flight, from SGLang's own log lines.

SGLang's decode servers log a ``Decode batch`` line every 40 steps with ``#transfer-req`` (KV
transfers in flight) and ``gen throughput (token/s)``. For every server log in a testbed run's
log folder (``benchmark/testbed.py`` prints it), this prints the median throughput over the
lines with transfers in flight and over those without, per server (e.g. PDD's Main-Decode
``main``, cross-DC PD's decode server ``cross-dc-decode``):

    python benchmark/decode_logs.py /tmp/sglang-pdd-testbed-XXXX/logs-8mbps
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

_LINE = re.compile(
    r"Decode batch.*?#running-req: (\d+).*?#transfer-req: (\d+).*?gen throughput \(token/s\): "
    r"([\d.]+)"
)


def summarize(text: str) -> dict[str, tuple[int, float | None, float | None]] | None:
    """(lines, median tok/s with transfers in flight, without) over one log's decode lines;
    None without any."""
    rows = [(int(r), int(t), float(g)) for r, t, g in _LINE.findall(text)]
    if not rows:
        return None
    busy = [g for _, t, g in rows if t > 0]
    idle = [g for _, t, g in rows if t == 0]
    return {
        "lines": (len(rows), None, None),
        "transfers in flight": (len(busy), statistics.median(busy) if busy else None, None),
        "none in flight": (len(idle), statistics.median(idle) if idle else None, None),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log_dir", help="a testbed run's log folder")
    args = ap.parse_args(argv)
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
