"""CPU per server role while something else runs: where a shared core's time goes.

Every ``--interval-s`` it reads each process's CPU ticks (``/proc/PID/stat``) and names its role
from its command line (P, RLD, MD, the cross-DC decode server, router, smg, WAN links, the
benchmark client; a forked or spawned child counts as its parent's role). On Ctrl-C (or after
``--duration-s``) it prints each role's share of one core per interval. Run it beside a testbed
run, e.g.::

    python benchmark/run.py cpu-by-role --duration-s 600 > out/cpu.txt &
    bash scripts/with-env.sh python benchmark/testbed.py --sessions 7 --wan-mbps 32 \\
        --contenders cross-dc,pdd
"""

from __future__ import annotations

import os
import time
from collections import Counter

import shared_flags  # benchmark/shared_flags.py (the script's folder)

ROLES = (
    ("--pdd-role relay", "RLD"),
    ("--pdd-role main", "MD"),
    ("--disaggregation-mode prefill", "P"),
    ("--disaggregation-mode decode", "xdc-decode"),
    ("cli router", "router"),
    ("wan-link", "wan-link"),
    ("smg", "smg"),
    ("testbed.py", "client"),
    ("run.py testbed", "client"),
)


def _role(cmd: str) -> str | None:
    return next((name for key, name in ROLES if key in cmd), None)


def snapshot(roles: dict) -> dict:
    """pid -> (ppid, CPU ticks); ``roles`` caches each pid's own role (None: look at its parent)."""
    snap = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            fields = stat[stat.rfind(")") + 2 :].split()
            if pid not in roles:
                with open(f"/proc/{pid}/cmdline") as f:
                    roles[pid] = _role(f.read().replace("\0", " "))
            snap[pid] = (fields[1], int(fields[11]) + int(fields[12]))
        except (OSError, ValueError, IndexError):
            continue  # the process ended between the listing and the read
    return snap


def role_of(pid: str, snap: dict, roles: dict) -> str:
    for _ in range(6):
        if roles.get(pid):
            return roles[pid]
        if pid not in snap:
            break
        pid = snap[pid][0]
    return "other"


def main(argv: list[str] | None = None) -> int:
    ap = shared_flags.parser(__doc__.splitlines()[0], raw=False)
    ap.add_argument("--interval-s", type=float, default=2.0)
    ap.add_argument("--duration-s", type=float, default=600.0)
    args = ap.parse_args(argv)
    hz = os.sysconf("SC_CLK_TCK")
    names = [name for _, name in ROLES] + ["other"]
    print("t_s  " + " ".join(f"{n[:9]:>9}" for n in names) + "   (% of one core)", flush=True)
    roles: dict = {}
    start = last_t = time.monotonic()
    last = snapshot(roles)
    try:
        while time.monotonic() - start < args.duration_s:
            time.sleep(args.interval_s)
            now_t, now = time.monotonic(), snapshot(roles)
            per = Counter()
            for pid, (_, ticks) in now.items():
                if pid in last and ticks > last[pid][1]:
                    per[role_of(pid, now, roles)] += (ticks - last[pid][1]) / hz
            dt = now_t - last_t
            row = " ".join(f"{100 * per[n] / dt:9.0f}" for n in names)
            print(f"{now_t - start:5.0f} {row}", flush=True)
            last, last_t = now, now_t
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
