"""What one SGLang CPU server's start costs, with its subprocesses spawned (SGLang's way),
forked (``--pdd-fork-subprocesses``), and the server itself forked from a warm launcher that
imported SGLang once (``sglang_pdd/testbed/warm_start.py``, the test session's way), side by side.

The test suite and the testbed start dozens of CPU servers, and most of a spawned start is each
subprocess importing SGLang, torch and transformers again. The script starts one co-located
server per mode, ``--rounds`` times, alternating the modes (so a host that speeds up or slows
down during the run affects both alike); for each start it records the seconds until ``/health``
answers and the CPU seconds of the server's process tree at that moment (psutil), then sends one
greedy request and checks every mode answers it with the same ids. It prints the median of
each mode and the ratios to spawn. A warm start's CPU is its own process tree's: the launcher's
one import (waited for before the first round) is shared by every start of a session.

    bash scripts/with-env.sh python benchmark/server_start.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from tqdm import tqdm

from sglang_pdd.testbed.launcher import ServerGroup, ServerSpec, post_json
from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model
from sglang_pdd.testbed.warm_start import WarmProcess

# label -> (ServerSpec.fork_subprocesses, started from the warm launcher)
MODES = {"spawn": (False, False), "fork": (True, False), "warm": (True, True)}
PROBE = {
    "input_ids": list(range(10, 60)),
    "sampling_params": {"temperature": 0.0, "max_new_tokens": 16, "ignore_eos": True},
}


def _start_once(group: ServerGroup, model: Path, name: str, fork: bool) -> dict:
    """Start one server in ``group`` (warm if the group's launcher can fork it)."""
    spec = ServerSpec(name, model_path=str(model), dtype="float32", fork_subprocesses=fork)
    start = time.monotonic()
    (server,) = group.start(spec)
    ready_s = time.monotonic() - start
    root = psutil.Process(server.proc.pid)
    cpu_s = sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])
    status, body = post_json(f"{server.url}/generate", PROBE)
    if status != 200:
        raise RuntimeError(f"{name}: /generate answered {status}: {body}")
    group.stop_named(name)
    return {"ready_s": ready_s, "cpu_s": cpu_s, "output_ids": body["output_ids"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="starts per mode")
    args = parser.parse_args()
    if args.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {args.rounds}")
    work = Path(tempfile.mkdtemp(prefix="server-start-"))
    model = write_tiny_model(work / "model", TinyModelConfig(seed=0))
    runs: dict[str, list[dict]] = {label: [] for label in MODES}
    plan = [(r, label) for r in range(args.rounds) for label in MODES]
    with (
        ServerGroup(log_dir=work / "logs") as cold,
        ServerGroup(log_dir=work / "warm-logs", warm_start=True) as warm,
    ):
        warm.wait_warm()
        for r, label in tqdm(plan, desc="server starts", unit="start"):
            fork, from_warm = MODES[label]
            group = warm if from_warm else cold
            runs[label].append(_start_once(group, model, f"{label}-{r}", fork))
        if not all(isinstance(s.proc, WarmProcess) for s in warm.servers):
            raise RuntimeError("a 'warm' start did not fork from the warm launcher")
    outputs = {tuple(run["output_ids"]) for mode in runs.values() for run in mode}
    print(f"one co-located CPU server, {args.rounds} starts per mode (median)")
    print(f"{'mode':8} {'ready':>8} {'CPU':>8}")
    med = {
        label: (
            statistics.median(r["ready_s"] for r in rs),
            statistics.median(r["cpu_s"] for r in rs),
        )
        for label, rs in runs.items()
    }
    for label, (ready, cpu) in med.items():
        print(f"{label:8} {ready:7.1f}s {cpu:7.1f}s")
    s_ready, s_cpu = med["spawn"]
    for label in ("fork", "warm"):
        ready, cpu = med[label]
        print(f"{label} / spawn: ready {ready / s_ready:.2f}x, CPU {cpu / s_cpu:.2f}x")
    print(f"same answer from every start: {len(outputs) == 1}")


if __name__ == "__main__":
    main()
