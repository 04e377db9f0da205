"""Faults at random under steady load: no token lost or duplicated.

A local cluster on the CPU: P, two Relay-Decodes and two Main-Decodes (each MD behind WAN links
of its own), a router over all of them, and a co-located server for reference. Greedy requests
arrive at a steady rate, streamed. Meanwhile, every ``--fault-every-s`` seconds, one fault
picked at random: ``kill -9`` of an RLD or an MD (restarted on the same ports
``--restart-after-s`` later, as an operator's supervisor would), or a stall of an MD's HTTP or
control link for ``--stall-s`` seconds. One fault at a time.

At the end it prints: requests completed with the co-located server's output, failed cleanly
(an error status or an error chunk: the client knows), lost or duplicated tokens (a request
answered as complete whose output differs from the reference: must be 0), KV left allocated on
every instance once the router has settled (must be 0), the faults injected, and the latency
migrated requests added (their end-to-end time over what an unmigrated request of their
length took: P50/P99).

    bash scripts/with-env.sh python benchmark/run.py soak --requests 500 --rate 1.5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
import shared_flags  # benchmark/shared_flags.py (this script's folder)
from tqdm import tqdm

from sglang_pdd.testbed.client import generate, wait_router_settled
from sglang_pdd.testbed.cluster import PddClusterConfig, start_cluster, start_router
from sglang_pdd.testbed.launcher import ServerGroup, ServerSpec

FAULTS = ("kill-relay", "kill-main", "stall-main-http", "stall-main-control")


class FaultInjector(threading.Thread):
    """Injects one fault at a time until ``stop`` is set; ``log`` lists what it did."""

    def __init__(self, group: ServerGroup, relays: list, mains: list, args) -> None:
        super().__init__(daemon=True)
        self.group, self.relays, self.mains, self.args = group, relays, mains, args
        self.rng = random.Random(args.seed + 1)
        self.stop = threading.Event()
        self.log: list[dict] = []
        self.error: BaseException | None = None
        self.started = time.monotonic()  # reset by start(): fault times count from the load's

    def _link(self, main_name: str, which: str):
        # start_cluster names MD i "main{i}" ("main" for 0) and its links "wan-http{i}" ...
        name = f"wan-{which}{main_name.removeprefix('main')}"
        return next(s for s in self.group.servers if s.name == name)

    def start(self) -> None:
        self.started = time.monotonic()
        super().start()

    def run(self) -> None:
        try:
            while not self.stop.wait(self.rng.uniform(0.5, 1.5) * self.args.fault_every_s):
                self._one(self.rng.choice(FAULTS))
        except BaseException as exc:  # reported by main(): a broken injector voids the run
            self.error = exc

    def _one(self, fault: str) -> None:
        t0 = time.monotonic()
        at_s = round(t0 - self.started, 1)
        if fault.startswith("kill"):
            pool = self.relays if fault == "kill-relay" else self.mains
            i = self.rng.randrange(len(pool))
            victim = pool[i]
            os.killpg(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait(timeout=60)
            time.sleep(self.args.restart_after_s)
            pool[i] = self.group.restart(victim)
            name = victim.name
        else:
            name = self.rng.choice(self.mains).name
            link = self._link(name, "http" if fault == "stall-main-http" else "control")
            link.link("stall")
            time.sleep(self.args.stall_s)
            link.link("restore")
        self.log.append(
            {"fault": fault, "instance": name, "at_s": at_s, "s": round(time.monotonic() - t0, 1)}
        )
        tqdm.write(f"  fault: {fault} {name} at {at_s} s ({self.log[-1]['s']} s)")


def _bodies(args) -> list[dict]:
    rng = random.Random(args.seed)
    lo, hi = args.prompt_tokens
    olo, ohi = args.max_new_tokens
    return [
        {
            "rid": f"soak-{i}",
            "input_ids": [rng.randrange(10, 250) for _ in range(rng.randint(lo, hi))],
            "sampling_params": {
                "temperature": 0.0,
                "ignore_eos": True,
                "max_new_tokens": rng.randint(olo, ohi),
            },
        }
        for i in range(args.requests)
    ]


def _kv_left(servers: list) -> dict[str, int]:
    """KV tokens each instance still holds once its cache is flushed (0 for every one)."""
    left = {}
    for server in servers:
        deadline = time.monotonic() + 120
        while requests.post(f"{server.url}/flush_cache", timeout=30).status_code != 200:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        loads = requests.get(f"{server.url}/v1/loads", timeout=30).json()
        entry = loads["loads"][0] if isinstance(loads, dict) and "loads" in loads else loads
        left[server.name] = int(entry.get("num_used_tokens", 0))
    return left


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _report(refs, results, faults, kv_left) -> dict:
    completed = failed = wrong = 0
    wrong_tokens = 0
    per_token, migrated = [], []
    outcomes = []  # per request, in sending order: what happened and how long it took
    for ref, res in zip(refs, results, strict=True):
        error = res.status != 200 or "error" in (res.body or {})
        pdd = {} if error else res.body.get("meta_info", {}).get("pdd", {})
        outcome = (
            "failed cleanly"
            if error
            else "lost or duplicated"
            if res.output_ids != ref
            else "migrated"
            if pdd.get("migrations")
            else "identical"
        )
        outcomes.append({"outcome": outcome, "e2e_s": res.latency_s})
        if error:
            failed += 1
            continue
        if res.output_ids != ref:
            wrong += 1
            same = next(
                (i for i, (a, b) in enumerate(zip(res.output_ids, ref, strict=False)) if a != b),
                min(len(ref), len(res.output_ids)),
            )
            wrong_tokens += max(len(ref), len(res.output_ids)) - same
            continue
        completed += 1
        (migrated if pdd.get("migrations") else per_token).append((res.latency_s, len(ref)))
    base = statistics.median(t / n for t, n in per_token) if per_token else float("nan")
    added = [t - base * n for t, n in migrated]
    return {
        "requests": len(results),
        "completed_identical": completed,
        "failed_cleanly": failed,
        "lost_or_duplicated_requests": wrong,
        "lost_or_duplicated_tokens": wrong_tokens,
        "migrated": len(migrated),
        "migrated_added_s_p50": _pct(added, 0.5),
        "migrated_added_s_p99": _pct(added, 0.99),
        "faults": faults,
        "kv_left_tokens": kv_left,
        "outcomes": outcomes,
    }


def soak_plot(report: dict, rate: float, path: str) -> None:
    """Write a PNG: every request's end-to-end time at the time it was sent, coloured by what
    happened to it, with each fault's span shaded and named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    colours = {
        "identical": "C0",
        "migrated": "C2",
        "failed cleanly": "C1",
        "lost or duplicated": "red",
    }
    for outcome, colour in colours.items():
        points = [(i / rate, o["e2e_s"]) for i, o in enumerate(report["outcomes"])]
        points = [
            p for p, o in zip(points, report["outcomes"], strict=True) if o["outcome"] == outcome
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(xs, ys, s=8, color=colour, label=f"{outcome} ({len(points)})")
    for fault in report["faults"]:
        ax.axvspan(fault["at_s"], fault["at_s"] + fault["s"], color="grey", alpha=0.2)
        ax.annotate(
            f"{fault['fault']} {fault['instance']}",
            (fault["at_s"], 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            fontsize=6,
        )
    ax.set_xlabel("sent at (s since the load began)")
    ax.set_ylabel("end-to-end time (s)")
    ax.set_title("soak: faults (shaded) under steady load")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _range(text: str, flag: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag}: give LOW,HIGH, got {text!r}") from None
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"{flag}: need 1 <= LOW <= HIGH, got {text!r}")
    return lo, hi


def parse_args(argv: list[str] | None):
    """The flags, checked."""
    ap = shared_flags.parser(__doc__)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--rate", type=float, default=1.5, help="arrivals per second (steady)")
    ap.add_argument(
        "--prompt-tokens",
        type=lambda t: _range(t, "--prompt-tokens"),
        default=(200, 800),
        help="LOW,HIGH",
    )
    ap.add_argument(
        "--max-new-tokens",
        type=lambda t: _range(t, "--max-new-tokens"),
        default=(32, 300),
        help="LOW,HIGH",
    )
    ap.add_argument("--fault-every-s", type=float, default=20.0)
    ap.add_argument("--restart-after-s", type=float, default=5.0)
    ap.add_argument("--stall-s", type=float, default=3.0)
    shared_flags.json_out(ap, "out/soak.json")
    ap.add_argument(
        "--plot", default="out/soak.png", help="every request's E2E over time, faults shaded"
    )
    shared_flags.seed(ap)
    args = ap.parse_args(argv)
    if args.requests < 1 or args.rate <= 0 or args.fault_every_s <= 0:
        ap.error("--requests must be >= 1, --rate and --fault-every-s > 0")
    return args


def start_soak_servers(group: ServerGroup, model: str):
    """P, two RLDs, two MDs, a router over both RLDs, and a co-located reference server:
    (the cluster, the second RLD, the reference, the router)."""
    print(
        f"starting P, 2 RLDs, 2 MDs, a router and a reference (logs: {group.log_dir})",
        flush=True,
    )
    cluster = start_cluster(
        group,
        PddClusterConfig(model_path=model, mains=2, incremental_streams=True, log_transfers=False),
    )
    common = {"model_path": model, "dtype": "float32", "chunked_prefill_size": 512}
    relay2, colocated = group.start(
        ServerSpec(
            "relay2",
            role="decode",
            extra_args=("--pdd-role", "relay", "--incremental-streaming-output"),
            **common,
        ),
        ServerSpec("colocated", **common),
    )
    router = start_router(
        group, cluster, name="router-soak", relays=[cluster.relay.url, relay2.url]
    )
    return cluster, relay2, colocated, router


def reference_outputs(colocated, bodies: list[dict]) -> list:
    """Each request's output ids from the co-located server (no faults), without its rid."""
    print(f"{len(bodies)} references from the co-located server ...", flush=True)
    with ThreadPoolExecutor(4) as pool:
        return list(
            pool.map(
                lambda b: (
                    generate(colocated.url, {k: v for k, v in b.items() if k != "rid"}).output_ids
                ),
                bodies,
            )
        )


def send_at_rate(router_url: str, bodies: list[dict], rate: float, start: float) -> list:
    """Every request streamed through the router, the i-th at ``start + i / rate``; the
    results in order, errors counted on the progress bar."""
    errors, errors_lock = 0, threading.Lock()
    with (
        ThreadPoolExecutor(256) as pool,
        tqdm(total=len(bodies), desc="soak", unit="req") as bar,
    ):

        def send(i_body):
            nonlocal errors
            i, body = i_body
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
            result = generate(router_url, body, stream=True, incremental=True)
            with errors_lock:
                errors += result.status != 200 or "error" in (result.body or {})
                bar.set_postfix(errors=errors, refresh=False)
            bar.update()
            return result

        return list(pool.map(send, enumerate(bodies)))


def print_report(report: dict, kv_left: dict) -> bool:
    """The report's counts; whether no token was lost or duplicated and no KV left."""
    keys = (
        "requests",
        "completed_identical",
        "failed_cleanly",
        "lost_or_duplicated_requests",
        "lost_or_duplicated_tokens",
        "migrated",
    )
    for key in keys:
        print(f"{key:>30}: {report[key]}")
    print(
        f"{'migrated, added s p50/p99':>30}: {report['migrated_added_s_p50']:.2f} / "
        f"{report['migrated_added_s_p99']:.2f}"
    )
    counts = {f: sum(1 for x in report["faults"] if x["fault"] == f) for f in FAULTS}
    print(f"{'faults':>30}: {counts}")
    print(f"{'KV left (tokens)':>30}: {report['kv_left_tokens']}")
    ok = report["lost_or_duplicated_tokens"] == 0 and not any(kv_left.values())
    print(f"no token lost or duplicated, no KV left: {'yes' if ok else 'NO'}")
    return ok


def write_outputs(args, report: dict) -> None:
    """The JSON (the flags and the report) and, with ``--plot``, the plot."""
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"args": {k: v for k, v in vars(args).items()}, **report}, indent=1, default=str)
    )
    print(f"wrote {out}")
    if args.plot:
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        soak_plot(report, args.rate, args.plot)
        print(f"wrote {args.plot}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

    workdir = Path(tempfile.mkdtemp(prefix="sglang-pdd-soak-"))
    model = str(write_tiny_model(workdir / "tiny-model", TinyModelConfig(seed=args.seed)))
    bodies = _bodies(args)
    with ServerGroup(log_dir=workdir / "logs") as group:
        cluster, relay2, colocated, router = start_soak_servers(group, model)
        refs = reference_outputs(colocated, bodies)
        relays = [cluster.relay, relay2]
        mains = [site.server for site in cluster.mains]
        injector = FaultInjector(group, relays, mains, args)
        print(f"{len(bodies)} requests at {args.rate}/s with faults ...", flush=True)
        start = time.monotonic()
        injector.start()
        results = send_at_rate(router.url, bodies, args.rate, start)
        injector.stop.set()
        injector.join()
        if injector.error is not None:
            raise SystemExit(f"the fault injector failed: {injector.error!r}")
        wait_router_settled(router.url)
        kv_left = _kv_left([cluster.prefill, *injector.relays, *injector.mains])
    report = _report(refs, results, injector.log, kv_left)
    ok = print_report(report, kv_left)
    write_outputs(args, report)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
