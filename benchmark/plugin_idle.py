"""What sglang-pdd costs a server that does not use it (issue 10, item 3).

Two co-located SGLang servers on the same model, up side by side: one with the plugin (its
hooks installed in every process, role ``none``: none of them acts) and one without it
(``SGLANG_PLUGINS`` names no installed plugin, so SGLang's loader skips sglang-pdd; on a machine
whose ``sgl_kernel`` cannot load, the pure-PyTorch stand-in goes on ``PYTHONPATH`` by hand, as
the plugin would put it). The same workload, requests streamed at fixed arrival times, goes to
each in alternating rounds. It prints output throughput, TTFT P50/P90 and E2E P50 per server and
the ratios with/without the plugin. Goal: within 1%.

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
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:  # fmt: skip
        t0 = time.perf_counter() + 0.2
        began = time.perf_counter()
        sends = [_one(session, url, b, t0 + a) for b, a in zip(bodies, arrivals, strict=True)]
        results = await asyncio.gather(*sends)
        wall = time.perf_counter() - began
    return {"ttft": [r[0] for r in results], "e2e": [r[1] for r in results],
            "tokens": sum(r[2] for r in results), "wall_s": wall}  # fmt: skip


def _summary(rounds: list[dict]) -> dict:
    ttft = [t for r in rounds for t in r["ttft"]]
    return {"tokens_per_s": sum(r["tokens"] for r in rounds) / sum(r["wall_s"] for r in rounds),
            "ttft_p50_s": _pct(ttft, 0.5), "ttft_p90_s": _pct(ttft, 0.9),
            "e2e_p50_s": statistics.median(e for r in rounds for e in r["e2e"])}  # fmt: skip


def _servers(model: str, args) -> list[ServerSpec]:
    from sglang_pdd.cpu.activation import SHIM_DIR, should_activate

    common = {"model_path": model, "dtype": "float32", "max_total_tokens": args.max_total_tokens,
              "cpu": args.device == "cpu"}  # fmt: skip
    without = [("SGLANG_PLUGINS", NO_PLUGIN)]
    if args.device == "cpu" and should_activate():
        without.append(("PYTHONPATH", SHIM_DIR))
    return [ServerSpec("with-plugin", extra_args=("--pdd-role", "none"), **common),
            ServerSpec("without-plugin", env=tuple(without), **common)]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--model-path", default=None, help="default: a generated 2-layer model")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds per server")
    ap.add_argument("--requests", type=int, default=32, help="requests per round")
    ap.add_argument("--rate", type=float, default=8.0, help="arrivals per second (Poisson)")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-total-tokens", type=int, default=65536)
    ap.add_argument("--json", default="out/plugin_idle.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.requests < 1 or args.rate <= 0:
        ap.error("--rounds and --requests must be >= 1 and --rate > 0")
    workdir = Path(tempfile.mkdtemp(prefix="sglang-pdd-plugin-idle-"))
    model = args.model_path
    if model is None:
        from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

        model = str(write_tiny_model(workdir / "tiny-model", TinyModelConfig(seed=args.seed)))
    rng = random.Random(args.seed)
    per_server: dict[str, list[dict]] = {"with-plugin": [], "without-plugin": []}
    with ServerGroup(log_dir=workdir / "logs") as group:
        print(f"starting both servers (logs: {group.log_dir}) ...", flush=True)
        servers = dict(zip(per_server, group.start(*_servers(model, args)), strict=True))
        for r in range(args.rounds):
            # The same prompts and arrival times for both servers in a round; fresh prompts
            # each round, so neither meets the other's radix cache hits.
            bodies = [{"input_ids": [rng.randrange(10, 250) for _ in range(args.prompt_tokens)],
                       "sampling_params": {"temperature": 0.0, "ignore_eos": True,
                                           "max_new_tokens": args.max_new_tokens}}
                      for _ in range(args.requests)]  # fmt: skip
            gaps = [rng.expovariate(args.rate) for _ in bodies]
            arrivals = [sum(gaps[: i + 1]) for i in range(len(gaps))]
            order = list(per_server) if r % 2 == 0 else list(reversed(per_server))
            for name in order:
                print(f"round {r + 1}/{args.rounds}: {name} ...", flush=True)
                per_server[name].append(asyncio.run(_round(servers[name].url, bodies, arrivals)))
    rows = {name: _summary(rounds) for name, rounds in per_server.items()}
    w, wo = rows["with-plugin"], rows["without-plugin"]
    ratios = {"throughput": w["tokens_per_s"] / wo["tokens_per_s"],
              "ttft_p50": w["ttft_p50_s"] / wo["ttft_p50_s"],
              "ttft_p90": w["ttft_p90_s"] / wo["ttft_p90_s"],
              "e2e_p50": w["e2e_p50_s"] / wo["e2e_p50_s"]}  # fmt: skip
    print(f"{'server':<15} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p90':>9} {'E2E p50':>8}")
    for name, row in rows.items():
        print(f"{name:<15} {row['tokens_per_s']:>8.1f} {row['ttft_p50_s'] * 1e3:>7.1f}ms "
              f"{row['ttft_p90_s'] * 1e3:>7.1f}ms {row['e2e_p50_s']:>7.3f}s")  # fmt: skip
    print("with/without: " + ", ".join(f"{k} {v:.3f}x" for k, v in ratios.items()))
    met = abs(ratios["throughput"] - 1) <= 0.01 and abs(ratios["ttft_p50"] - 1) <= 0.01
    print(f"goal (throughput and TTFT P50 within 1%): {'met' if met else 'MISSED'}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows, "ratios": ratios}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
