"""What sglang-pdd costs a server that does not use it.

Two co-located SGLang servers on the same model, up side by side: one with the plugin (its
hooks installed in every process, role ``none``: none of them acts) and one without it
(``SGLANG_PLUGINS`` names no installed plugin, so SGLang's loader skips sglang-pdd; on a machine
whose ``sgl_kernel`` cannot load, the pure-PyTorch stand-in goes on ``PYTHONPATH`` by hand, as
the plugin would put it). The same workload, requests streamed at fixed arrival times, goes to
each in alternating rounds, at each arrival rate (0: all at once, throughput at saturation). It
prints output throughput, TTFT P50/P90 and E2E P50 per server, and the with/without ratio of
each round (median and range: on a shared CPU the range is the noise). Goal: within 1%.

    bash scripts/with-env.sh python benchmark/plugin_idle.py --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from tqdm import tqdm

from sglang_pdd.testbed.launcher import ServerGroup, ServerSpec

NO_PLUGIN = "sglang-pdd-benchmark-no-plugin"  # a name no installed plugin has


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _one(session, url: str, body: dict, start_at: float) -> tuple[float, float, int]:
    """Send ``body`` streamed at ``start_at``; return (TTFT, E2E, output tokens)."""
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    sent = time.perf_counter()
    first, tokens = None, 0
    async with session.post(f"{url}/generate", json={**body, "stream": True}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {(await resp.text())[:200]}")
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            ids = json.loads(line[5:]).get("output_ids") or []
            if ids and first is None:
                first = time.perf_counter() - sent
            tokens = max(tokens, len(ids))
    return first or float("nan"), time.perf_counter() - sent, tokens


async def _round(url: str, bodies: list[dict], arrivals: list[float]) -> dict:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as session:
        t0 = time.perf_counter() + 0.2
        began = time.perf_counter()
        sends = [_one(session, url, b, t0 + a) for b, a in zip(bodies, arrivals, strict=True)]
        results = await asyncio.gather(*sends)
        wall = time.perf_counter() - began
    return {
        "ttft": [r[0] for r in results],
        "e2e": [r[1] for r in results],
        "tokens": sum(r[2] for r in results),
        "wall_s": wall,
    }


def _summary(rounds: list[dict]) -> dict:
    ttft = [t for r in rounds for t in r["ttft"]]
    return {
        "tokens_per_s": sum(r["tokens"] for r in rounds) / sum(r["wall_s"] for r in rounds),
        "ttft_p50_s": _pct(ttft, 0.5),
        "ttft_p90_s": _pct(ttft, 0.9),
        "e2e_p50_s": statistics.median(e for r in rounds for e in r["e2e"]),
    }


def _paired_ratios(with_rounds: list[dict], without_rounds: list[dict]) -> dict:
    """With/without ratios of each round (the same prompts and arrival times, run one after
    the other): their median, and their range (the machine's noise shows there)."""
    out = {}
    for key in ("tokens_per_s", "ttft_p50_s", "e2e_p50_s"):
        ratios = sorted(
            _summary([w])[key] / _summary([wo])[key]
            for w, wo in zip(with_rounds, without_rounds, strict=True)
        )
        out[key] = {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}
    return out


def hook_costs_us(calls: int = 20000) -> dict[str, float]:
    """Microseconds each hook on a co-located server's per-iteration path adds per call (role
    ``none``): the hook called as SGLang's wrapper calls it, around a no-op, on stand-in
    objects, less the no-op called directly. These are the hooks such a server runs each
    scheduler iteration (the first two) or each new batch (the last two)."""
    import timeit
    from types import SimpleNamespace

    from sglang_pdd.patches import (
        main_control_ingest,
        penalizer_order,
        prefill_twin_hold,
        seeded_sampling,
    )
    from sglang_pdd.patches.scheduler_init import SchedulerRecord

    def noop(*_args, **_kwargs):
        return []

    class A: ...

    class B: ...

    scheduler = SimpleNamespace(waiting_queue=[SimpleNamespace(rid="r")], _pdd=SchedulerRecord())
    orchestrator = SimpleNamespace(penalizers={B: 0, A: 0})
    info = SimpleNamespace(sampling_seed=None)
    batch = SimpleNamespace(reqs=[], device="cpu")
    cases = {
        "prefill_twin_hold (each iteration)": lambda: prefill_twin_hold.hook(noop, scheduler),
        "main_control_ingest (each iteration)": lambda: main_control_ingest.hook(noop, scheduler),
        "seeded_sampling (each new batch)": lambda: seeded_sampling.hook(info, None, batch),
        "penalizer_order (each new batch)": lambda: penalizer_order.hook(None, orchestrator),
    }
    base = min(timeit.repeat(lambda: noop(scheduler), number=calls, repeat=5)) / calls
    return {
        name: 1e6 * (min(timeit.repeat(fn, number=calls, repeat=5)) / calls - base)
        for name, fn in cases.items()
    }


def _servers(model: str, args) -> list[ServerSpec]:
    from sglang_pdd.cpu.activation import SHIM_DIR, real_sgl_kernel_loads

    common = {
        "model_path": model,
        "dtype": "float32",
        "max_total_tokens": args.max_total_tokens,
        "cpu": args.device == "cpu",
        # Both start as SGLang does (spawn): the server without the plugin has no
        # --pdd-fork-subprocesses flag, and the comparison is of serving, not of starting.
        "fork_subprocesses": False,
    }
    without = [("SGLANG_PLUGINS", NO_PLUGIN)]
    if args.device == "cpu" and not real_sgl_kernel_loads():
        without.append(("PYTHONPATH", SHIM_DIR))
    return [
        ServerSpec("with-plugin", extra_args=("--pdd-role", "none"), **common),
        ServerSpec("without-plugin", env=tuple(without), **common),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model-path", default=None, help="default: a generated 2-layer model")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds per server")
    ap.add_argument("--requests", type=int, default=32, help="requests per round")
    ap.add_argument(
        "--rates",
        default="8,0",
        help="comma-separated arrival rates per second (Poisson); 0: all at once, "
        "which measures throughput at saturation",
    )
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-total-tokens", type=int, default=65536)
    ap.add_argument("--json", default="out/plugin_idle.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        rates = [float(x) for x in args.rates.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--rates: comma-separated numbers, got {args.rates!r}")
    if args.rounds < 1 or args.requests < 1 or not rates or min(rates) < 0:
        ap.error("--rounds and --requests must be >= 1 and --rates numbers >= 0")
    workdir = Path(tempfile.mkdtemp(prefix="sglang-pdd-plugin-idle-"))
    model = args.model_path
    if model is None:
        from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

        model = str(write_tiny_model(workdir / "tiny-model", TinyModelConfig(seed=args.seed)))
    rng = random.Random(args.seed)
    names = ("with-plugin", "without-plugin")
    results = []
    with ServerGroup(log_dir=workdir / "logs") as group:
        print(f"starting both servers (logs: {group.log_dir}) ...", flush=True)
        servers = dict(zip(names, group.start(*_servers(model, args)), strict=True))
        bar = tqdm(total=len(rates) * args.rounds * len(names), desc="rounds", unit="round")
        for rate in rates:
            per_server: dict[str, list[dict]] = {name: [] for name in names}
            for r in range(args.rounds):
                # The same prompts and arrival times for both servers in a round; fresh
                # prompts each round, so neither meets radix cache hits.
                bodies = [
                    {
                        "input_ids": [rng.randrange(10, 250) for _ in range(args.prompt_tokens)],
                        "sampling_params": {
                            "temperature": 0.0,
                            "ignore_eos": True,
                            "max_new_tokens": args.max_new_tokens,
                        },
                    }
                    for _ in range(args.requests)
                ]
                gaps = [rng.expovariate(rate) if rate else 0.0 for _ in bodies]
                arrivals = [sum(gaps[: i + 1]) for i in range(len(gaps))]
                for name in names if r % 2 == 0 else reversed(names):
                    tqdm.write(f"rate {rate:g}/s, round {r + 1}/{args.rounds}: {name} ...")
                    url = servers[name].url
                    per_server[name].append(asyncio.run(_round(url, bodies, arrivals)))
                    bar.update()
            results.append(
                {
                    "rate": rate,
                    "rows": {name: _summary(rs) for name, rs in per_server.items()},
                    "ratios": _paired_ratios(*per_server.values()),
                }
            )
        bar.close()
    print(
        f"{'rate/s':>6} {'server':<15} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p90':>9} {'E2E p50':>8}"
    )
    for result in results:
        for name, row in result["rows"].items():
            print(
                f"{result['rate']:>6g} {name:<15} {row['tokens_per_s']:>8.1f} "
                f"{row['ttft_p50_s'] * 1e3:>7.1f}ms {row['ttft_p90_s'] * 1e3:>7.1f}ms "
                f"{row['e2e_p50_s']:>7.3f}s"
            )
    print("with/without, per round (median [min, max]):")
    met = True
    for result in results:
        parts = []
        for key, label in (
            ("tokens_per_s", "throughput"),
            ("ttft_p50_s", "TTFT p50"),
            ("e2e_p50_s", "E2E p50"),
        ):
            q = result["ratios"][key]
            parts.append(f"{label} {q['median']:.3f}x [{q['min']:.3f}, {q['max']:.3f}]")
            if key != "e2e_p50_s":
                met = met and abs(q["median"] - 1) <= 0.01
        print(f"  rate {result['rate']:g}/s: " + ", ".join(parts))
    print(f"goal (median throughput and TTFT P50 ratios within 1%): {'met' if met else 'MISSED'}")
    costs = hook_costs_us()
    per_iteration = sum(v for k, v in costs.items() if "iteration" in k)
    # A decode step of the measured light load, from its median E2E over the tokens made.
    step_us = 1e6 * results[0]["rows"]["without-plugin"]["e2e_p50_s"] / args.max_new_tokens
    print(
        "hooks on a co-located server's hot path, per call (role none): "
        + ", ".join(f"{k} {v:.2f} us" for k, v in costs.items())
    )
    print(
        f"per scheduler iteration: {per_iteration:.2f} us = {100 * per_iteration / step_us:.3f}%"
        f" of this server's {step_us / 1e3:.2f} ms per token at {rates[0]:g}/s"
    )
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"args": vars(args), "results": results, "hook_costs_us": costs}, indent=1)
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
