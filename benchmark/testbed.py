"""PDD against SGLang's own PD, side by side, under concurrent multi-turn load, on emulated chips.

One local cluster of real SGLang servers whose forwards take the time of the brief's chips
(``--pdd-emulate-chip``: datacenter A's P, RLD and same-DC PD's decode server on chip A,
datacenter B's MD and cross-DC PD's decode server on the decode-strong chip B), KV charged at the
emulated model's size (50 KB per token, ``--token-scale`` model tokens per testbed token) on a
10 Gbit/s, 15 ms line and an intra-datacenter RDMA-class link; PDD's router, SGLang's
cross-datacenter PD and same-datacenter PD (both behind SGLang's gateway ``smg``) get the same
agentic sessions at the same arrival times, one after the other, caches flushed in between.
Prints TTFT/ITL/E2E percentiles, RLD's share of output tokens, WAN bytes, duplicate transfers,
ratios, each goal beside the brief's figure, and the emulation's overruns (a run over 1% is
marked: it measured this host, not the chips). ``--no-emulation`` runs at the CPU's own speed
(behaviour only). ``--sweep`` repeats over loads and link speeds.

    bash scripts/with-env.sh python benchmark/testbed.py
    bash scripts/with-env.sh python benchmark/testbed.py --repeats 3 --sessions 6
    bash scripts/with-env.sh python benchmark/testbed.py --no-emulation --wan-mbps 8
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import requests
import shared_flags  # benchmark/shared_flags.py (this script's folder)
from tqdm import tqdm

from sglang_pdd.testbed.client import generate, wait_router_settled
from sglang_pdd.testbed.cluster import (
    DATACENTER_B_HOST,
    PddCluster,
    PddClusterConfig,
    start_cluster,
    start_router,
    start_wan_proxy,
)
from sglang_pdd.testbed.emulated_chips import ChipEmulation
from sglang_pdd.testbed.emulation_report import (
    Overruns,
    counters,
    dilate_sessions,
    sla_goodput,
    undilate_result,
)
from sglang_pdd.testbed.gateway import start_smg
from sglang_pdd.testbed.launcher import ServerGroup, ServerSpec, exit_on_sigterm
from sglang_pdd.testbed.replay import run_workload
from sglang_pdd.testbed.report import (
    contender_order,
    identical_outputs,
    phase_plot,
    ratios,
    repeats_summary,
    summarize,
    sweep_plot,
    table,
    ttft_cdf_plot,
)
from sglang_pdd.testbed.sim_prediction import print_prediction
from sglang_pdd.testbed.workload import (
    TOKEN_RANGE,
    AgenticConfig,
    TraceConfig,
    agentic_sessions,
    ideal_prefix_hit,
    trace_sessions,
)
from sglang_pdd.transfer.wan_engine import engine_split, read_engine_bytes
from sglang_pdd.transfer.wan_link import WanLinkConfig

CONTENDERS = (
    "same-dc",
    "cross-dc",
    "pdd",
    "pdd-overlap",
    "pdd-after-relay",
    "pdd-no-yield",
    "pdd-yield-window",
    "pdd-relay-all",
)
WARMUP_NEW_TOKENS = 128  # greedy ids per warm-up request: enough for PDD to hand off
# The emulated model's bytes (the real bytes without an emulated chip) of each WAN-bound write.
_KV_LINE = re.compile(r"kv-transfer to=(\S+) bytes=\d+ total=\d+ model_bytes=(\d+) wan=True")


@dataclass
class Testbed:
    cluster: PddCluster
    cross_dc_decode: str  # SGLang PD's decode server in datacenter B, through the WAN proxy
    cross_dc_direct: str  # the same server without the proxy (for cache flushes)
    routers: dict  # contender name -> router URL
    gateways: dict  # baseline name -> SGLang's gateway (smg) URL in front of its PD
    server_logs: list  # every SGLang server's log (the emulated chips' counters)
    dilation: float = 1.0  # the emulated chips' time dilation


def start_testbed(group: ServerGroup, model: str, link: WanLinkConfig, args) -> Testbed:
    cpus = ("", "")
    if args.pin_datacenters and (os.cpu_count() or 1) >= 2:
        half = (os.cpu_count() or 2) // 2
        cpus = (f"0-{half - 1}" if half > 1 else "0", f"{half}-{2 * half - 1}" if half > 1 else "1")
    cfg = PddClusterConfig(
        model_path=model,
        wan=link,
        ttft_slo_s=args.ttft_slo_s,
        handoff_mode=args.handoff_mode,
        mains=args.mains,
        max_total_tokens=args.max_total_tokens,
        datacenter_cpus=cpus,
        incremental_streams=True,
        kv_events=args.main_kv_events,
        wan_engine=True,
        emulation=args.emulation,
    )
    cluster = start_cluster(group, cfg)
    if args.relay_nice:
        threads = cluster.relay.set_nice(args.relay_nice)
        print(f"Relay-Decode: nice {args.relay_nice} on its {threads} threads", flush=True)
    decode = _start_cross_dc_decode(group, model, cfg, cpus[1])
    via_wan = start_wan_proxy(group, "cross-dc-wan-http", decode.port, cfg.proxy_wan)
    p = cluster.prefill
    # SGLang PD as operators run it: behind SGLang's gateway. Same-DC: RLD's server as the
    # decode server beside P; cross-DC: the decode server in datacenter B, across the WAN.
    gateways = {
        "same-dc": start_smg(
            group, "smg-same-dc", p.url, p.bootstrap_port, cluster.relay.url, cpus=cpus[0]
        ).url,
        "cross-dc": start_smg(
            group, "smg-cross-dc", p.url, p.bootstrap_port, via_wan, cpus=cpus[0]
        ).url,
    }
    routers = {"pdd": cluster.router_url, **_variant_routers(group, cluster, args.contenders)}
    logs = [p.log_path, cluster.relay.log_path, decode.log_path]
    logs += [site.server.log_path for site in cluster.mains]
    dilation = args.emulation.time_dilation if args.emulation else 1.0
    return Testbed(cluster, via_wan, decode.url, routers, gateways, logs, dilation)


def _start_cross_dc_decode(group: ServerGroup, model: str, cfg: PddClusterConfig, cpus: str):
    """SGLang PD's decode server in datacenter B (cross-DC PD's), on B's cores."""
    (decode,) = group.start(
        ServerSpec(
            "cross-dc-decode",
            model_path=model,
            role="decode",
            dtype=cfg.dtype,
            chunked_prefill_size=cfg.chunked_prefill_size,
            max_total_tokens=cfg.max_total_tokens,
            env=(("SGLANG_HOST_IP", DATACENTER_B_HOST),),
            cpus=cpus,
            extra_args=(
                "--disaggregation-decode-enable-radix-cache",
                "--incremental-streaming-output",
                *cfg.chip_args("B"),
            ),
        )
    )
    return decode


def _variant_routers(group: ServerGroup, cluster: PddCluster, contenders) -> dict:
    """The PDD variants' routers beside the default one (contender name -> URL)."""
    routers = {}
    if "pdd-overlap" in contenders:  # --handoff-switch overlap, beside the default hold
        routers["pdd-overlap"] = start_router(
            group, cluster, name="router-overlap", handoff_switch="overlap"
        ).url
    if "pdd-after-relay" in contenders:
        routers["pdd-after-relay"] = start_router(
            group, cluster, name="router-after-relay", main_transfer_start="after-relay"
        ).url
    if "pdd-no-yield" in contenders:  # RLD does not yield to P's queue (the rule off)
        routers["pdd-no-yield"] = start_router(
            group, cluster, name="router-no-yield", prefill_backlog_limit_s=1e9
        ).url
    if "pdd-yield-window" in contenders:  # yields only to a queue that stood for 2 s
        routers["pdd-yield-window"] = start_router(
            group, cluster, name="router-yield-window", prefill_backlog_window_s=2.0
        ).url
    if "pdd-relay-all" in contenders:  # --ttft-slo-s 0: every request streams from RLD
        routers["pdd-relay-all"] = start_router(
            group, cluster, name="router-relay-all", ttft_slo_s=0.0
        ).url
    return routers


def sender(tb: Testbed, name: str):
    url = tb.gateways.get(name) or tb.routers[name]
    return lambda body: generate(url, body, stream=True, incremental=True)


def settle_and_flush(tb: Testbed, timeout: float = 300) -> None:
    """Wait for background work to end, then empty every radix cache (P, RLD, MDs, baseline)."""
    for url in tb.routers.values():
        wait_router_settled(url, timeout)
    urls = [
        tb.cluster.prefill.url,
        tb.cluster.relay.url,
        tb.cross_dc_direct,
        *(site.server.url for site in tb.cluster.mains),
    ]
    deadline = time.monotonic() + timeout
    for url in urls:
        while requests.post(f"{url}/flush_cache", timeout=30).status_code != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} never became idle enough to flush its cache")
            time.sleep(0.5)


def wan_bytes_since(log_path: Path, offset: int) -> tuple[int, int]:
    """KV bytes P sent across the WAN since ``offset`` in its log; and the new offset."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
        end = f.tell()
    return sum(int(m.group(2)) for m in _KV_LINE.finditer(text)), end


def duplicate_transfers(router_url: str) -> int:
    info = requests.get(f"{router_url}/get_server_info", timeout=30).json()["pdd_router"]
    return sum(m["duplicate_transfers"] for m in info["mains"].values())


def warm_up(tb: Testbed, name: str, requests_n: int, prompt_tokens: int, seed: int) -> None:
    """``requests_n`` untimed requests through contender ``name`` (fresh prompts,
    ``WARMUP_NEW_TOKENS`` greedy ids: long enough that PDD hands off), as
    ``sglang.bench_serving`` warms up by default and
    as SGLang's own start-up warm-up would (the CPU testbed starts servers with
    ``--skip-server-warmup``): no contender's first timed request pays its servers' first
    forward passes (for PDD: MD's first extend)."""
    rng = random.Random(seed)
    send = sender(tb, name)
    for _ in range(requests_n):
        prompt = [rng.randrange(*TOKEN_RANGE) for _ in range(prompt_tokens)]
        result = send(
            {
                "input_ids": prompt,
                "sampling_params": {
                    "temperature": 0.0,
                    "max_new_tokens": WARMUP_NEW_TOKENS,
                    "ignore_eos": True,
                },
            }
        )
        if result.status != 200:
            raise RuntimeError(f"{name}: warm-up request failed: {result.status} {result.body}")


def run_point(
    tb: Testbed, sessions, names, label: str, log=print, warmup_requests: int = 0
) -> dict:
    """Every contender on the same workload (each after ``warmup_requests`` untimed ones, then
    with every cache flushed); returns summaries and raw results."""
    runs, summaries, overruns, engines = {}, [], {}, {}
    log_path = tb.cluster.prefill.log_path
    prompt_tokens = max(len(s.turns[0].new_ids) for s in sessions) if sessions else 0
    for name in names:
        if warmup_requests:
            settle_and_flush(tb)
            warm_up(tb, name, warmup_requests, prompt_tokens, seed=len(name))
        settle_and_flush(tb)
        dup0 = duplicate_transfers(tb.routers[name]) if name in tb.routers else None
        _, offset = wan_bytes_since(log_path, 0)
        log(f"[{label}] {name}: {sum(len(s.turns) for s in sessions)} requests ...")
        started = time.monotonic()
        total = sum(len(s.turns) for s in sessions)
        before = counters(tb.server_logs)
        engines_before = read_engine_bytes(tb.cluster.prefill.url)
        with tqdm(total=total, desc=f"{label} {name}", unit="req", leave=False) as bar:
            results = run_workload(
                dilate_sessions(sessions, tb.dilation),
                sender(tb, name),
                on_result=lambda _: bar.update(),
            )
        results = [undilate_result(r, tb.dilation) for r in results]
        if name in tb.routers:
            wait_router_settled(tb.routers[name], 300)  # late (cache-warming) transfers count
        wan, _ = wan_bytes_since(log_path, offset)
        dup = duplicate_transfers(tb.routers[name]) - dup0 if dup0 is not None else None
        runs[name] = results
        summaries.append(summarize(name, results, wan, dup))
        overruns[name] = counters(tb.server_logs) - before
        engines[name] = _engine_split(tb, engines_before)
        log(
            f"[{label}] {name}: done in {time.monotonic() - started:.0f}s; "
            f"{overruns[name].describe()}"
        )
    reference = runs.get("same-dc")
    same = {
        n: identical_outputs(r, reference)
        for n, r in runs.items()
        if reference is not None and n != "same-dc"
    }
    return {
        "label": label,
        "summaries": summaries,
        "runs": runs,
        "identical": same,
        "overruns": overruns,
        "engines": engines,
    }


def _engine_split(tb: Testbed, before: dict):
    """P's KV bytes by Mooncake engine since ``before`` (``read_engine_bytes``)."""
    after = read_engine_bytes(tb.cluster.prefill.url)
    delta = {
        engine: {peer: n - before.get(engine, {}).get(peer, 0) for peer, n in peers.items()}
        for engine, peers in after.items()
    }
    return engine_split(delta, [DATACENTER_B_HOST])


def run_bench_serving(group: ServerGroup, tb: Testbed, model: str, args, workdir: Path) -> dict:
    """Unmodified ``python -m sglang.bench_serving --backend sglang`` against the PDD router and
    against SGLang's cross-DC PD (behind SGLang's gateway, ``smg``); returns each one's metrics."""
    import subprocess

    targets = {"pdd": tb.routers["pdd"], "cross-dc": tb.gateways["cross-dc"]}
    out = {}
    for name, url in targets.items():
        settle_and_flush(tb)
        result_file = workdir / f"bench_serving_{name}.jsonl"
        cmd = _bench_serving_command(url, model, args, result_file)
        print(f"[bench_serving] {name}: {' '.join(cmd[1:])}", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0 or not result_file.exists():
            print(proc.stdout[-2000:], proc.stderr[-2000:])
            out[name] = {"error": f"bench_serving exited {proc.returncode}"}
            continue
        row = json.loads(result_file.read_text().strip().splitlines()[-1])
        out[name] = {k: row.get(k) for k in BENCH_SERVING_METRICS}
    return out


BENCH_SERVING_METRICS = (
    "completed",
    "median_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2e_latency_ms",
    "output_throughput",
)


def _bench_serving_command(url: str, model: str, args, result_file: Path) -> list[str]:
    """``sglang.bench_serving`` against ``url``: 16 generated shared-prefix prompts."""
    host, port_s = url.split("://", 1)[1].rsplit(":", 1)
    return [
        sys.executable,
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--host",
        host,
        "--port",
        port_s,
        "--model",
        model,
        "--tokenizer",
        model,
        "--dataset-name",
        "generated-shared-prefix",
        "--gsp-num-groups",
        "4",
        "--gsp-prompts-per-group",
        "4",
        "--gsp-system-prompt-len",
        "1500",
        "--gsp-question-len",
        "64",
        "--gsp-output-len",
        "200",
        "--num-prompts",
        "16",
        "--request-rate",
        str(args.bench_serving_rate),
        "--seed",
        str(args.seed),
        "--output-file",
        str(result_file),
        "--disable-tqdm",
    ]


def print_bench_serving(results: dict) -> None:
    print("\nsglang.bench_serving --backend sglang (generated-shared-prefix), unmodified:")
    for name, r in results.items():
        if "error" in r:
            print(f"  {name:<9} {r['error']}")
            continue
        print(
            f"  {name:<9} completed {r['completed']}, TTFT median "
            f"{r['median_ttft_ms']:.0f} ms, p90 {r['p90_ttft_ms']:.0f} ms, p99 "
            f"{r['p99_ttft_ms']:.0f} ms, ITL median {r['median_itl_ms']:.1f} ms, output "
            f"{r['output_throughput']:.1f} tok/s"
        )
    a, b = results.get("pdd", {}), results.get("cross-dc", {})
    if a.get("p90_ttft_ms") and b.get("p90_ttft_ms"):
        print(
            f"  PDD / cross-DC PD: TTFT median {a['median_ttft_ms'] / b['median_ttft_ms']:.2f}x,"
            f" p90 {a['p90_ttft_ms'] / b['p90_ttft_ms']:.2f}x"
        )


def build_sessions(args, sessions: int | None = None):
    if args.workload == "trace":
        return trace_sessions(
            TraceConfig(
                args.trace,
                args.trace_requests,
                args.trace_block_tokens,
                args.trace_speed,
                args.max_new_tokens,
            )
        )
    cfg = AgenticConfig(
        sessions=sessions or args.sessions,
        turns=args.turns,
        context_tokens=args.context_tokens,
        output_tokens=args.max_new_tokens,
        turn_interval_s=args.turn_interval_s,
        seed=args.seed,
    )
    return agentic_sessions(cfg)


def print_point(point: dict, out=print) -> None:
    out(table(point["summaries"], baseline="cross-dc"))
    for name, split in point.get("engines", {}).items():
        out(
            f"{name}: P's KV by Mooncake engine: WAN engine {split.wan_engine_bytes / 1e6:.2f} MB, "
            f"local engine {split.local_engine_bytes / 1e6:.2f} MB, misrouted "
            f"{split.misrouted_bytes} bytes (real bytes of the CPU model)"
        )
    for name, (eq, n) in point["identical"].items():
        out(
            f"{name}: output identical to same-DC PD (bit-identical to a co-located server) "
            f"for {eq}/{n} requests"
        )


# The brief's published figures beside each goal (../shared/design/pdd-brief.md, section 4).
BRIEF = {
    "ttft_p90": "0.535x (9.8 s vs 18.3 s)",
    "ttft_p99": "0.485x (14.4 s vs 29.7 s)",
    "relay_share": "6.2%",
}


def headline(point: dict, rtt_s: float) -> list[str]:
    """The goal figures for one point, each marked met or missed, the brief's beside."""
    s = {x.name: x for x in point["summaries"]}
    pdd, cross, same = s.get("pdd"), s.get("cross-dc"), s.get("same-dc")
    if not (pdd and cross) or None in (cross.ttft_p90, cross.e2e_p50, pdd.e2e_p50):
        return []
    lines = _latency_lines(pdd, cross, same, rtt_s)
    if pdd.handoff_gap_p99 is not None and point.get("emulation") is not None:
        lines.append(_handoff_line(point, pdd, rtt_s))
    return lines + _mechanism_lines(point, pdd) + _instrument_lines(point, cross, same)


def goal(text: str, met: bool, brief: str = "") -> str:
    """One goal's line, marked met or missed, the brief's figure beside."""
    return f"[{'met' if met else 'MISSED'}] {text}" + (f"; the brief: {brief}" if brief else "")


def _latency_lines(pdd, cross, same, rtt_s: float) -> list[str]:
    """TTFT, E2E and ITL against cross-DC and same-DC PD."""
    lines = []
    for q in ("p90", "p99"):
        r = getattr(pdd, f"ttft_{q}") / getattr(cross, f"ttft_{q}")
        lines.append(
            goal(
                f"PDD {q.upper()} TTFT {getattr(pdd, f'ttft_{q}'):.2f}s = {r:.2f}x cross-DC PD's "
                f"{getattr(cross, f'ttft_{q}'):.2f}s (goal <= 0.45x)",
                r <= 0.45,
                BRIEF[f"ttft_{q}"],
            )
        )
    if same is not None and same.ttft_p90:
        r = pdd.ttft_p90 / same.ttft_p90
        lines.append(goal(f"PDD P90 TTFT = {r:.2f}x same-DC PD's (goal <= 1.2x)", r <= 1.2))
    for q in ("p50", "p90"):
        mine, theirs = getattr(pdd, f"e2e_{q}"), getattr(cross, f"e2e_{q}")
        lines.append(
            goal(
                f"PDD E2E {q.upper()} {mine:.2f}s = {mine / theirs:.2f}x cross-DC PD's "
                f"{theirs:.2f}s (goal <= 0.9x)",
                mine / theirs <= 0.9,
            )
        )
        if same is not None and getattr(same, f"e2e_{q}"):
            r = mine / getattr(same, f"e2e_{q}")
            lines.append(
                goal(f"PDD E2E {q.upper()} = {r:.2f}x same-DC PD's (goal <= 1.0x)", r <= 1)
            )
    itl_bound = cross.itl_p99 + rtt_s
    lines.append(
        goal(
            f"PDD ITL P99 {1000 * pdd.itl_p99:.0f} ms vs cross-DC PD's "
            f"{1000 * cross.itl_p99:.0f} ms + one RTT = {1000 * itl_bound:.0f} ms",
            pdd.itl_p99 <= itl_bound,
        )
    )
    return lines


def _mechanism_lines(point: dict, pdd) -> list[str]:
    """RLD's share of the tokens, duplicate transfers, outputs identical to same-DC PD's."""
    lines = []
    share = pdd.relay_share or 0.0
    lines.append(
        goal(
            f"RLD made {100 * share:.1f}% of PDD's output tokens (goal <= 10%)",
            share <= 0.1,
            BRIEF["relay_share"],
        )
    )
    lines.append(
        goal(
            f"duplicate transfers: {pdd.duplicate_transfers} (goal 0)", pdd.duplicate_transfers == 0
        )
    )
    if "pdd" in point["identical"]:
        eq, n = point["identical"]["pdd"]
        lines.append(goal(f"PDD output identical to same-DC PD for {eq}/{n} requests", eq == n > 0))
    else:
        lines.append("[not checked] PDD output identity: same-dc was not among the contenders")
    return lines


def _instrument_lines(point: dict, cross, same) -> list[str]:
    """The testbed's own checks: the baselines' order, BCR, the WAN engines, the overruns."""
    lines = []
    if same is not None:
        sane = all(
            getattr(same, f"ttft_{q}") < getattr(cross, f"ttft_{q}") for q in ("p50", "p90", "p99")
        )
        lines.append(
            goal(
                "instrument: same-DC PD's TTFT P50/P90/P99 "
                f"{same.ttft_p50:.2f}/{same.ttft_p90:.2f}/{same.ttft_p99:.2f}s below cross-DC's "
                f"{cross.ttft_p50:.2f}/{cross.ttft_p90:.2f}/{cross.ttft_p99:.2f}s",
                sane,
            )
        )
    if same is not None and point.get("chip_costs"):
        lines.append(_bcr_line(point))
    if point.get("engines"):
        misrouted = sum(e.misrouted_bytes for e in point["engines"].values())
        lines.append(
            goal(
                f"every byte to datacenter B left through P's WAN engine, every other byte "
                f"through its local one: {misrouted} bytes misrouted (goal 0)",
                misrouted == 0,
            )
        )
    total = sum(point.get("overruns", {}).values(), Overruns())
    lines.append(goal(f"instrument: {total.describe()}", total.acceptable))
    if not total.acceptable:  # the host, not the chips, set some forwards' times
        lines.append(
            "NOT A RESULT: over 1% of forwards ran slower on this host than on the emulated "
            "chips; the goals above are not judged. Rerun on a quieter host or with a larger "
            "--time-dilation"
        )
    return lines


def overruns_acceptable(point: dict) -> bool:
    """Whether a point's forwards kept to the emulated chips' times (within the 1% bound)."""
    return sum(point.get("overruns", {}).values(), Overruns()).acceptable


def _handoff_line(point: dict, pdd, rtt_s: float) -> str:
    """One-Shot's client gap at final handoffs against one RTT, MD's extend of the largest
    handoff (on MD's emulated chip, over its prompt) and one of PDD's inter-token gaps."""
    from sglang_pdd.emulation.forward import ForwardPacer, ForwardShape

    emu = point["emulation"]
    md = ForwardPacer(emu.config("B"), on_decode_server=True)
    handed = [
        (r.record["handoff_tokens"], r.prompt_tokens)
        for r in point["runs"]["pdd"]
        if r.record and r.record.get("handoff_tokens")
    ]
    if not handed:
        return "[not checked] One-Shot handoff gap: no request was handed off"
    tokens, prompt = max(handed)
    extend = md.duration(ForwardShape(extends=((tokens, prompt),))) / emu.time_dilation
    bound = rtt_s + extend + pdd.itl_p50
    met = pdd.handoff_gap_p99 <= bound
    return (
        f"[{'met' if met else 'MISSED'}] PDD's client gap at final handoffs P99 "
        f"{1000 * pdd.handoff_gap_p99:.0f} ms vs RTT + MD's extend of {tokens} ids + 1 ITL = "
        f"{1000 * bound:.0f} ms"
    )


def _bcr_line(point: dict) -> str:
    """SLA goodput per hardware cost (the simulator's SLA and chip costs) of PDD over same-DC
    PD, at this run's offered load: each contender's instances are the testbed's (same-DC: P
    and a decoder on chip A; PDD: P and RLD on A, MD on B)."""
    from sglang_pdd.sim.defaults import DEFAULT_SLA

    a, b = point["chip_costs"]
    cost = {"same-dc": 2 * a, "pdd": 2 * a + b}
    bcr = {
        name: sla_goodput(point["runs"][name], DEFAULT_SLA.ttft_s, DEFAULT_SLA.itl_s) / cost[name]
        for name in cost
    }
    gain = bcr["pdd"] / bcr["same-dc"] - 1 if bcr["same-dc"] else float("nan")
    return (
        f"[{'met' if gain >= 0.375 else 'MISSED'}] BCR (SLA goodput per hardware cost, SLA "
        f"TTFT <= {DEFAULT_SLA.ttft_s:g}s and mean ITL <= {1000 * DEFAULT_SLA.itl_s:g} ms) of "
        f"PDD over same-DC PD at this load: {100 * gain:+.1f}% (goal >= +37.5%); the brief: "
        "up to +37.5%"
    )


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    exit_on_sigterm()  # a SIGTERM stops every process started below, as Ctrl-C does
    _settle_args(ap, args)
    workdir = Path(tempfile.mkdtemp(prefix="sglang-pdd-testbed-"))
    model = args.model_path
    if model is None:
        from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

        model = str(write_tiny_model(workdir / "tiny-model", TinyModelConfig(seed=args.seed)))
    points = _run_links(args, model, workdir)
    _write(points, args)
    ok = all(
        p["summaries"] and not any(s.errors for s in p["summaries"]) and overruns_acceptable(p)
        for p in points
    )
    return 0 if ok else 1


def _parser() -> argparse.ArgumentParser:
    ap = shared_flags.parser(__doc__)
    for flags in (_workload_flags, _emulation_flags, _cluster_flags, _run_flags):
        flags(ap)
    return ap


def _workload_flags(ap: argparse.ArgumentParser) -> None:
    """The flags of the workload: agentic sessions or the Mooncake trace."""
    shared_flags.model_path(ap)
    ap.add_argument("--workload", choices=("agentic", "trace"), default="agentic")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument(
        "--context-tokens",
        type=int,
        default=2048,
        help="each session's own context, in testbed tokens (x --token-scale model tokens: "
        "64K by default, the brief's)",
    )
    ap.add_argument(
        "--max-new-tokens",
        type=int,
        default=300,
        help="mean output length (each turn draws within +-25%%)",
    )
    ap.add_argument("--turn-interval-s", type=float, default=10.0)
    ap.add_argument(
        "--trace",
        default=str(
            Path(__file__).resolve().parents[2]
            / "shared"
            / "traces"
            / "mooncake_conversation_trace.jsonl"
        ),
    )
    ap.add_argument("--trace-requests", type=int, default=40)
    ap.add_argument("--trace-block-tokens", type=int, default=32)
    ap.add_argument("--trace-speed", type=float, default=1.0)


def _emulation_flags(ap: argparse.ArgumentParser) -> None:
    """The flags of the WAN and the emulated chips."""
    ap.add_argument(
        "--wan-mbps",
        type=float,
        default=None,
        help="the WAN's bandwidth (emulated chips: the emulated model's KV crosses it; default "
        "10000, a 10 Gbit/s line; --no-emulation: 8)",
    )
    ap.add_argument(
        "--wan-delay-ms",
        type=float,
        default=None,
        help="one-way WAN delay (default 15, a city pair; --no-emulation: 100)",
    )
    ap.add_argument(
        "--no-emulation",
        dest="emulate",
        action="store_false",
        help="run the servers at the CPU's own speed (behaviour, not performance)",
    )
    ap.add_argument("--chip-a", default="A", help="datacenter A's chip (P, RLD, same-DC decode)")
    ap.add_argument("--chip-b", default="B", help="datacenter B's chip (MD, cross-DC decode)")
    ap.add_argument("--chips-per-instance", type=int, default=8)
    ap.add_argument(
        "--token-scale",
        type=int,
        default=32,
        help="model tokens per testbed token, in compute and KV bytes (docs/testbed.md)",
    )
    ap.add_argument(
        "--time-dilation",
        type=float,
        default=3.0,
        help="every emulated duration, link and arrival time x this; reported times / this",
    )
    ap.add_argument(
        "--emulate-model",
        default="",
        help="a simulator config whose model: and engine: describe the emulated model",
    )


def _cluster_flags(ap: argparse.ArgumentParser) -> None:
    """The flags of the servers and the router."""
    ap.add_argument(
        "--ttft-slo-s",
        type=float,
        default=None,
        help="the PDD router's --ttft-slo-s (default: the router's own default)",
    )
    ap.add_argument("--handoff-mode", default="one-shot", choices=("one-shot", "catch-up", "auto"))
    ap.add_argument("--mains", type=int, default=1)
    ap.add_argument(
        "--no-pin-datacenters",
        dest="pin_datacenters",
        action="store_false",
        help="do not pin datacenter A (P, RLD) and B (MD, cross-DC decode) to "
        "separate halves of the cores",
    )
    ap.add_argument(
        "--no-main-kv-events",
        dest="main_kv_events",
        action="store_false",
        help="MD publishes no KV events (the router's cache view then follows its own "
        "transfers only): to measure what publishing costs MD's decoding",
    )
    ap.add_argument(
        "--relay-nice",
        type=int,
        default=0,
        help="nice value (0-19) for the Relay-Decode server, which shares datacenter A's cores "
        "with P (and is same-DC PD's decode server): the kernel then gives P's prefills the "
        "cores first, as RLD on chips of its own would leave them (default 0: equal shares)",
    )
    ap.add_argument("--max-total-tokens", type=int, default=65536)
    ap.add_argument(
        "--contenders",
        default="same-dc,cross-dc,pdd",
        help=f"comma-separated, from {', '.join(CONTENDERS)}",
    )


def _run_flags(ap: argparse.ArgumentParser) -> None:
    """The flags of sweeps, repeats and where the results go."""
    ap.add_argument(
        "--sweep", action="store_true", help="repeat over --sweep-sessions x --sweep-wan-mbps"
    )
    ap.add_argument("--sweep-sessions", default="3,5,7")
    ap.add_argument("--sweep-wan-mbps", default="8,32")
    ap.add_argument(
        "--bench-serving",
        action="store_true",
        help="also run python -m sglang.bench_serving against PDD and cross-DC PD",
    )
    ap.add_argument("--bench-serving-rate", type=float, default=1.0)
    shared_flags.json_out(ap, "out/testbed.json")
    ap.add_argument("--plot", default="out/testbed_ttft_cdf.png")
    ap.add_argument(
        "--phase-plot",
        default="out/testbed_phases.png",
        help="where PDD's E2E goes, per pipeline, beside the baselines' mean E2E",
    )
    ap.add_argument(
        "--sweep-plot",
        default="out/testbed_sweep.png",
        help="with --sweep: each contender's TTFT P90 and E2E P50/P90 over cross-DC PD's, "
        "per load and link speed, with the goals",
    )
    shared_flags.seed(ap)
    shared_flags.repeats(
        ap,
        1,
        "run each load and link this many times, each repeat starting with the next "
        "contender; prints every repeat's PDD / cross-DC ratios and their median, judged "
        "against the goals (one run's ratio moves with the host by up to +-0.4x: "
        "docs/testbed.md); the sweep plot draws the medians",
    )
    ap.add_argument(
        "--warmup-requests",
        type=int,
        default=1,
        help="untimed requests through each contender before its timed run (caches flushed "
        "after), as sglang.bench_serving's --warmup-requests (default 1); 0: cold servers",
    )


def _settle_args(ap: argparse.ArgumentParser, args) -> None:
    """Defaults that depend on other flags, the emulation, and the checks argparse cannot do."""
    if args.wan_mbps is None:
        args.wan_mbps = 10_000.0 if args.emulate else 8.0
    if args.wan_delay_ms is None:
        args.wan_delay_ms = 15.0 if args.emulate else 100.0
    try:
        args.emulation = (
            ChipEmulation(
                chip_a=args.chip_a,
                chip_b=args.chip_b,
                chips=args.chips_per_instance,
                token_scale=args.token_scale,
                time_dilation=args.time_dilation,
                model_file=args.emulate_model,
            )
            if args.emulate
            else None
        )
    except ValueError as exc:
        ap.error(str(exc))
    args.chip_costs = None
    if args.emulation:  # cost of one instance (its chips) in datacenter A and in B
        from sglang_pdd.emulation.config import resolve_chip

        args.chip_costs = tuple(
            args.chips_per_instance * resolve_chip(c).cost_per_hour
            for c in (args.chip_a, args.chip_b)
        )
    if args.emulation and args.ttft_slo_s is not None:
        args.ttft_slo_s *= args.time_dilation  # the router's clock runs dilated
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    if not 0 <= args.relay_nice <= 19:
        ap.error(f"--relay-nice must be between 0 and 19, got {args.relay_nice}")
    if bad := [c for c in args.contenders if c not in CONTENDERS]:
        ap.error(f"--contenders: unknown {bad}; accepted: {', '.join(CONTENDERS)}")


def _run_links(args, model: str, workdir: Path) -> list[dict]:
    """Every link speed (one, or the sweep's): a fresh testbed each, every load through it."""
    links = [float(x) for x in args.sweep_wan_mbps.split(",")] if args.sweep else [args.wan_mbps]
    loads = [int(x) for x in args.sweep_sessions.split(",")] if args.sweep else [None]
    points = []
    for mbps in links:
        link = WanLinkConfig(mbps, args.wan_delay_ms)
        with ServerGroup(log_dir=workdir / f"logs-{mbps:g}mbps") as group:
            print(
                f"starting the testbed ({mbps:g} Mbit/s, {args.wan_delay_ms:g} ms one way; "
                f"logs: {group.log_dir}) ...",
                flush=True,
            )
            tb = start_testbed(group, model, link, args)
            for load in loads:
                points.extend(_run_load(tb, args, mbps, load))
            if args.bench_serving and mbps == links[0]:
                serving = run_bench_serving(group, tb, model, args, workdir)
                print_bench_serving(serving)
                points[0]["bench_serving"] = serving
    return points


def _run_load(tb: Testbed, args, mbps: float, load: int | None) -> list[dict]:
    """One load on one link, ``--repeats`` times; the repeats' summary when more than one."""
    sessions = build_sessions(args, load)
    prompts_hit = _ideal_hit(sessions)
    label = (
        f"{args.workload} {len(sessions)} sessions, {mbps:g} Mbit/s, "
        f"ideal prefix hit {100 * prompts_hit:.0f}%"
    )
    repeats = [_run_repeat(tb, args, sessions, label, mbps, r) for r in range(args.repeats)]
    if args.repeats > 1:
        print(f"== {label}: {args.repeats} repeats, contender order rotated")
        for name in (c for c in args.contenders if c.startswith("pdd")):
            for line in repeats_summary(repeats, name):
                print(line)
        print(flush=True)
    return repeats


def _run_repeat(tb: Testbed, args, sessions, label: str, mbps: float, repeat: int) -> dict:
    """One repeat of one point: every contender on the same sessions, then its report."""
    # Each repeat starts with the next contender, so that a host slowing or speeding up during
    # the run does not always favour the same one.
    names = contender_order(args.contenders, repeat)
    tag = label if args.repeats == 1 else f"{label}, repeat {repeat + 1}"
    point = run_point(
        tb,
        sessions,
        names,
        tag,
        log=lambda m: print(m, flush=True),
        warmup_requests=args.warmup_requests,
    )
    point.update(
        wan_mbps=mbps,
        sessions=len(sessions),
        repeat=repeat,
        chip_costs=args.chip_costs,
        emulation=args.emulation,
    )
    print(f"\n== {tag}")
    print_point(point)
    print_prediction(point, args)  # the simulator on the same requests
    for line in headline(point, 2 * args.wan_delay_ms / 1000):
        print(line)
    print(flush=True)
    return point


def _ideal_hit(sessions) -> float:
    # Prompts as the client would send them, with outputs unknown: the shared prefixes come from
    # history, so count each turn's new ids against the session's earlier ones.
    prompts = []
    for s in sessions:
        history: list[int] = []
        for t in s.turns:
            prompts.append(history + list(t.new_ids))
            if t.kind != "side":
                history = prompts[-1] + [1] * t.max_new_tokens
    return ideal_prefix_hit(prompts)


def _row(result) -> dict:
    row = asdict(result)
    row["prompt_tokens"] = len(row.pop("prompt_ids"))
    return row


def _write(points: list[dict], args) -> None:
    for path in (args.json, args.plot, args.phase_plot, args.sweep_plot):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    if args.json:
        data = [
            {
                "label": p["label"],
                "wan_mbps": p["wan_mbps"],
                "sessions": p["sessions"],
                "repeat": p.get("repeat", 0),
                "identical": p["identical"],
                "overruns": {n: dataclasses.asdict(o) for n, o in p.get("overruns", {}).items()},
                "engines": {n: dataclasses.asdict(e) for n, e in p.get("engines", {}).items()},
                "bench_serving": p.get("bench_serving"),
                "summaries": [s.as_dict() for s in p["summaries"]],
                "requests": {n: [_row(r) for r in rs] for n, rs in p["runs"].items()},
            }
            for p in points
        ]
        emulation = dataclasses.asdict(args.emulation) if args.emulation else None
        doc = {"args": {**vars(args), "emulation": emulation}, "points": data}
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    if args.plot and points:
        ttft_cdf_plot(points[0]["runs"], args.plot, points[0]["label"])
        print(f"wrote {args.plot}")
    first = {x.name: x for x in points[0]["summaries"]} if points else {}
    if args.phase_plot and first.get("pdd") is not None and first["pdd"].phases:
        baselines = {
            name: _mean([r.e2e_s for r in points[0]["runs"][name] if r.status == 200])
            for name in ("cross-dc", "same-dc")
            if name in points[0]["runs"]
        }
        phase_plot(first["pdd"].phases, baselines, args.phase_plot, points[0]["label"])
        print(f"wrote {args.phase_plot}")
    if args.sweep_plot and len(points) > 1:
        sweep_plot(points, args.sweep_plot)
        print(f"wrote {args.sweep_plot}")
    if len(points) > 1:
        print("\nsweep (seconds; ratios to cross-DC PD):")
        for p in points:
            s = {x.name: x for x in p["summaries"]}
            cross = s.get("cross-dc")
            for name, x in s.items():
                ratio = ""
                if cross is not None and x is not cross and cross.ttft_p90:
                    ratio = "  " + ratios(x, cross)
                run = f" r{p['repeat'] + 1}" if args.repeats > 1 else ""
                print(
                    f"  {p['sessions']:>2} sessions {p['wan_mbps']:>4g} Mbit/s{run} {name:<9} TTFT "
                    f"{x.ttft_p50:.2f}/{x.ttft_p90:.2f}/{x.ttft_p99:.2f} E2E "
                    f"{x.e2e_p50:.2f}/{x.e2e_p90:.2f}/{x.e2e_p99:.2f}{ratio}"
                )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


if __name__ == "__main__":
    sys.exit(main())
