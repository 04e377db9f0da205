"""Torch threads per unpinned CPU server: the CPU a decode costs and how long it takes.

The testbed and the test suite run several SGLang CPU servers on one host. An unpinned server's
torch uses one thread per core, and those threads spin at each op's barrier while the other
servers' work needs the cores. One server per setting (torch's default, one thread per core;
``OMP_NUM_THREADS=1``, the launcher's choice; the default with ``OMP_WAIT_POLICY=PASSIVE``)
serves the same requests, ``--concurrency`` at once and then one alone, and the script prints
the wall time and the CPU seconds of the server's processes (psutil, an SGLang dependency),
with each setting's ratio to the default.

    bash scripts/with-env.sh python benchmark/cpu_threads.py
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
from tqdm import tqdm

from sglang_pdd.testbed.launcher import ServerGroup, ServerSpec, post_json
from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

CORES = str(len(os.sched_getaffinity(0)))  # torch's default thread count
SETTINGS = {
    f"torch's default ({CORES} threads)": {"OMP_NUM_THREADS": CORES},
    "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
    f"{CORES} threads, OMP_WAIT_POLICY=PASSIVE": {
        "OMP_NUM_THREADS": CORES,
        "OMP_WAIT_POLICY": "PASSIVE",
    },
}


def _cpu_seconds(procs: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def _measure(group, model: Path, name: str, env: dict, args) -> dict:
    """Start one server with ``env``, time the workload on it, stop it."""
    spec = ServerSpec(name, model_path=str(model), dtype="float32", env=tuple(env.items()))
    (server,) = group.start(spec)
    root = psutil.Process(server.proc.pid)
    procs = [root, *root.children(recursive=True)]
    rng = random.Random(args.seed)

    def body() -> dict:
        return {
            "input_ids": [rng.randrange(10, 250) for _ in range(args.prompt)],
            "sampling_params": {
                "temperature": 0.0,
                "max_new_tokens": args.new,
                "ignore_eos": True,
            },
        }

    post_json(f"{server.url}/generate", body())  # warm-up
    figures = {}
    for label, count in (("concurrent", args.concurrency), ("alone", 1)):
        bodies = [body() for _ in range(count)]
        cpu, start = _cpu_seconds(procs), time.monotonic()
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(lambda b: post_json(f"{server.url}/generate", b), bodies))
        figures[label] = (time.monotonic() - start, _cpu_seconds(procs) - cpu)
    group.stop_named(name)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=400, help="prompt length in ids")
    parser.add_argument("--new", type=int, default=400, help="ids generated per request")
    parser.add_argument("--concurrency", type=int, default=4, help="requests at once")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cpu-threads-"))
    model = write_tiny_model(work / "model", TinyModelConfig(seed=0))
    results = {}
    with ServerGroup(log_dir=work / "logs") as group:
        for i, (label, env) in enumerate(tqdm(SETTINGS.items(), desc="settings", unit="server")):
            results[label] = _measure(group, model, f"threads-{i}", env, args)
    print(f"{args.concurrency} requests at once, then one ({args.prompt} + {args.new} ids each)")
    print(f"{'setting':34} {'wall':>8} {'CPU':>8} {'ratio':>12}   {'alone':>8} {'CPU':>8}")
    base = results[next(iter(SETTINGS))]
    for label, figures in results.items():
        (wall, cpu), (wall1, cpu1) = figures["concurrent"], figures["alone"]
        ratio = f"{wall / base['concurrent'][0]:.2f}x/{cpu / base['concurrent'][1]:.2f}x"
        print(f"{label:34} {wall:7.2f}s {cpu:7.2f}s {ratio:>12}   {wall1:7.2f}s {cpu1:7.2f}s")


if __name__ == "__main__":
    main()
