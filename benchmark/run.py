"""Every measurement and analysis under benchmark/, behind one command:

    python benchmark/run.py MEASUREMENT [flags]
    python benchmark/run.py MEASUREMENT --help

Those that start servers need this project's environment (``bash scripts/with-env.sh python
benchmark/run.py ...``). ``python benchmark/testbed.py`` is ``run.py testbed``. The flags the
measurements share (``--model-path``, ``--json``, ``--seed``, ``--repeats``, ``--rounds``,
``--device``, ``--out``, ``LOG_DIR``) are defined once, in ``benchmark/shared_flags.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent

# name -> (module under benchmark/, what it does)
MEASUREMENTS = {
    "testbed": ("testbed", "the emulated-chip testbed: PDD beside SGLang PD (docs/testbed.md)"),
    "handoff": ("handoff", "the handoff's stall and bytes; --extend-only: the extend on a GPU"),
    "router-overhead": ("router_overhead", "the router's CPU and latency per streamed token"),
    "soak": ("soak", "faults at random under load (docs/faults.md)"),
    "sim-reproduce": ("sim_reproduce", "the simulator's reproduction of the brief's figures"),
    "sim-speed": ("sim_speed", "the simulator's speed on an hour of the Mooncake trace"),
    "sim-vs-testbed": ("sim_vs_testbed", "the simulator against a testbed run's JSON"),
    "decode-logs": ("decode_logs", "decode throughput and step times from a testbed's logs"),
    "e2e-vs-cross-dc": ("e2e_vs_cross_dc", "where PDD's answers gain or lose time (testbed JSON)"),
    "gpu-check": ("gpu_check", "the checks a lent GPU is wanted for (docs/deploy.md)"),
    "cpu-by-role": ("cpu_by_process", "CPU per server role while a testbed runs beside it"),
}


def usage() -> str:
    width = max(map(len, MEASUREMENTS))
    rows = [f"  {name:<{width}}  {what}" for name, (_, what) in MEASUREMENTS.items()]
    return __doc__ + "\nMEASUREMENT:\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in MEASUREMENTS:
        print(f"unknown measurement {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = load(MEASUREMENTS[name][0])
    argv0, sys.argv[0] = sys.argv[0], f"run.py {name}"  # argparse's prog: "usage: run.py NAME"
    try:
        return module.main(rest) or 0
    finally:
        sys.argv[0] = argv0


def load(module: str) -> ModuleType:
    """``benchmark/MODULE.py``, by its path (a name such as ``testbed`` may be taken by
    another module), its folder on ``sys.path`` (the measurements import their neighbours)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location(f"benchmark_{module}", HERE / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up
    spec.loader.exec_module(loaded)
    return loaded


if __name__ == "__main__":
    raise SystemExit(main())
