"""The simulator predicts the testbed: replay a testbed run's requests, compare the figures.

Reads a JSON written by ``benchmark/testbed.py --json`` (no server is started). A run on
emulated chips (the default) is simulated on the same chips, model, links and topology
(``sglang_pdd.testbed.sim_prediction``): TTFT P50/P90/P99, ITL P50/P99 and E2E P50/P90 per
contender, measured vs simulated, each goal figure marked within or over 10%. A
``--no-emulation`` run is predicted as follows:

1. calibrates the simulator's chip, model and engine on this machine's measurements in it: the
   decode step from same-datacenter PD's inter-token gaps (against the batch's KV tokens), the
   prefill from its TTFTs (against uncached and cached prompt tokens on P's radix cache); the WAN
   is the emulated link's settings (the JSON's ``--wan-mbps``, ``--wan-delay-ms``);
2. rebuilds the replayed workload exactly (the testbed's sessions from the JSON's flags plus the
   recorded outputs) as simulator requests, arriving when each was sent;
3. simulates the three contenders as the testbed ran them (1 P and 1 decoder; cross-DC with a
   decode radix cache; PDD with 1 RLD, 1 MD and the run's ``--ttft-slo-s``);
4. prints measured vs predicted TTFT P50/P90 per contender against the goal (within 20%), and
   what the measurements say about the gaps.

    python benchmark/run.py sim-vs-testbed --testbed-json out/testbed.json \
        --json out/sim_vs_testbed.json
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import shared_flags  # benchmark/shared_flags.py (this script's folder)

from sglang_pdd.policy import HandoffPolicyConfig
from sglang_pdd.sim import calibrate as cal
from sglang_pdd.sim.runner import run_contender
from sglang_pdd.testbed import sim_prediction as sp
from sglang_pdd.testbed.cluster import PddClusterConfig
from sglang_pdd.testbed.tiny_model import TinyModelConfig
from sglang_pdd.testbed.workload import AgenticConfig, TraceConfig, agentic_sessions, trace_sessions

SIMULATED = ("same-dc", "cross-dc", "pdd")
GOAL = 0.20  # relative TTFT error the prediction aims to stay within
DTYPE_BYTES = 4  # the testbed serves float32


def _cluster_default(name: str):
    return next(f.default for f in fields(PddClusterConfig) if f.name == name)


def tiny_model_weight_bytes(cfg: TinyModelConfig, dtype_bytes: int = DTYPE_BYTES) -> int:
    """Bytes of the generated Llama's weights (untied embeddings, no biases)."""
    kv_dim = cfg.kv_heads * cfg.head_dim
    per_layer = (
        2 * cfg.hidden * cfg.hidden
        + 2 * cfg.hidden * kv_dim
        + 3 * cfg.hidden * cfg.intermediate
        + 2 * cfg.hidden
    )
    params = 2 * cfg.vocab * cfg.hidden + cfg.layers * per_layer + cfg.hidden
    return params * dtype_bytes


def load_point(path: str, index: int) -> tuple[dict, dict]:
    """The testbed's flags and one point of its JSON."""
    if not Path(path).is_file():
        raise ValueError(f"--testbed-json {path!r} is not a file (run benchmark/testbed.py)")
    data = json.loads(Path(path).read_text())
    points = data.get("points") or []
    if not 0 <= index < len(points):
        raise ValueError(f"--point {index}: the JSON has points 0..{len(points) - 1}")
    return data["args"], points[index]


def testbed_sessions(args: dict, point: dict):
    """The sessions the testbed replayed at this point (its generator, its flags)."""
    if args["workload"] == "trace":
        return trace_sessions(
            TraceConfig(
                args["trace"],
                args["trace_requests"],
                args["trace_block_tokens"],
                args["trace_speed"],
                args["max_new_tokens"],
            )
        )
    return agentic_sessions(
        AgenticConfig(
            sessions=point["sessions"],
            turns=args["turns"],
            context_tokens=args["context_tokens"],
            output_tokens=args["max_new_tokens"],
            turn_interval_s=args["turn_interval_s"],
            seed=args["seed"],
        )
    )


def rebuild(rows: list[dict], sessions) -> list[tuple[dict, list[int]]]:
    """(row, prompt ids) of each successful request, in send order; checks prompt lengths."""
    prompts = cal.testbed_prompts(sessions, {(r["sid"], r["turn"]): r["output_ids"] for r in rows})
    if missing := sorted({(r["sid"], r["turn"]) for r in rows} - set(prompts)):
        raise ValueError(
            f"--testbed-json: (session, turn) {missing[:3]} not in the workload its "
            "flags generate now (was it written by another version?)"
        )
    out = []
    for r in rows:
        prompt = prompts[(r["sid"], r["turn"])]
        if len(prompt) != r["prompt_tokens"]:
            raise ValueError(
                f"session {r['sid']} turn {r['turn']}: rebuilt prompt has "
                f"{len(prompt)} tokens, the JSON {r['prompt_tokens']}: not the "
                "workload these flags generate"
            )
        if r["status"] == 200 and r["ttft_s"] is not None and r["output_ids"]:
            out.append((r, prompt))
    return sorted(out, key=lambda x: x[0]["at_s"] + x[0]["late_s"])


def sent(r: dict) -> float:
    return r["at_s"] + r["late_s"]


def calibrate_on(same_dc: list[tuple[dict, list[int]]], hw: cal.KnownHardware) -> cal.Calibration:
    """Decode from same-DC PD's gaps, then prefill from its TTFTs."""
    spans, gaps = [], []
    for r, prompt in same_dc:
        out = len(r["output_ids"])
        spans.append((sent(r) + r["ttft_s"], sent(r) + r["e2e_s"], len(prompt), out))
        gaps.append(sum(r["gaps_s"]) / (out - 1) if out > 1 and r["gaps_s"] else math.nan)
    contexts = cal.mean_batch_context(spans)
    keep = [i for i, g in enumerate(gaps) if math.isfinite(g)]
    decode = cal.fit_decode([gaps[i] for i in keep], [contexts[i] for i in keep])
    hits = cal.prefix_hits([p for _, p in same_dc])
    prefill = cal.fit_prefill(
        [len(p) - h for (_, p), h in zip(same_dc, hits, strict=True)],
        hits,
        [r["ttft_s"] for r, _ in same_dc],
        decode,
        hw,
    )
    return cal.Calibration(hw, decode, prefill)


def link_from_records(pdd: list[tuple[dict, list[int]]]) -> dict | None:
    """PDD's records: MD's KV landing after RLD's first token, against its WAN bytes."""
    xs, ys = [], []
    for r, _ in pdd:
        rec = r.get("record") or {}
        if rec.get("main_ready_s") is not None and rec.get("first_token_s") is not None:
            if rec.get("wan_bytes"):
                xs.append(float(rec["wan_bytes"]))
                ys.append(rec["main_ready_s"] - rec["first_token_s"])
    if len(xs) < 3 or len(set(xs)) < 2:
        return None
    f = cal.fit_nonnegative({"overhead": [1.0] * len(xs), "per_byte": xs}, ys)
    mbps = 8 / f["per_byte"] / 1e6 if f["per_byte"] > 0 else math.inf
    return {"overhead_s": f["overhead"], "mbps": mbps, "rmse_s": f.rmse, "transfers": f.samples}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def compare(name: str, rows, config) -> dict:
    """Simulate one contender on its own rebuilt requests; measured vs predicted per request."""
    spec = next(c for c in config.contenders if c.name == name)
    reqs = cal.testbed_requests(
        [(sent(r), p, len(r["output_ids"])) for r, p in rows], config.block_tokens
    )
    _, records = run_contender(spec, config, reqs)
    # testbed_requests orders by arrival, as rows already are: record i is row i.
    pairs = [(r, rec) for (r, _), rec in zip(rows, records, strict=True)]
    measured = [r["ttft_s"] for r, _ in pairs]
    predicted = [rec.first_token_s - rec.arrival_s for _, rec in pairs]
    res = {"name": name, "requests": len(pairs)}
    for q in (50, 90):
        m, p = pct(measured, q), pct(predicted, q)
        res[f"p{q}"] = {"measured_s": m, "predicted_s": p, "error": (p - m) / m}
    res["median_gap_s"] = pct([m - p for m, p in zip(measured, predicted, strict=True)], 50)
    res["wan_bytes_predicted"] = sum(rec.wan_bytes for _, rec in pairs)
    res["pipelines_predicted"] = _count(rec.pipeline for _, rec in pairs)
    decoding = [(sent(r) + r["ttft_s"], sent(r) + r["e2e_s"]) for r, _ in pairs]
    res["per_request"] = [
        {
            "sid": r["sid"],
            "turn": r["turn"],
            "kind": r["kind"],
            "prompt_tokens": rec.input_tokens,
            "measured_s": m,
            "predicted_s": p,
            "pipeline_predicted": rec.pipeline,
            "pipeline_measured": (r.get("record") or {}).get("pipeline"),
            "others_decoding": _others_decoding(sent(r), sent(r) + m, decoding),
        }
        for (r, rec), m, p in zip(pairs, measured, predicted, strict=True)
    ]
    if name == "pdd":
        recs = [(r["record"], rec) for r, rec in pairs if r.get("record")]
        res["pipelines_measured"] = _count(x["pipeline"] for x, _ in recs)
        crossed = [(x, rec) for x, rec in recs if x.get("main_cached_tokens") is not None]
        prompt = sum(rec.input_tokens for _, rec in crossed) or 1
        res["decode_hit_measured"] = sum(x["main_cached_tokens"] for x, _ in crossed) / prompt
        res["decode_hit_predicted"] = sum(rec.decode_hit_tokens for _, rec in crossed) / prompt
        res["decode_hit_requests"] = len(crossed)
    return res


def _others_decoding(t0: float, t1: float, spans: list[tuple[float, float]]) -> float:
    """Mean number of requests decoding during [t0, t1] (the request's own wait for a token)."""
    if t1 <= t0:
        return 0.0
    return sum(max(0.0, min(t1, e) - max(t0, s)) for s, e in spans) / (t1 - t0)


def _count(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def _meets(r: dict) -> bool:
    return max(abs(r["p50"]["error"]), abs(r["p90"]["error"])) <= GOAL


def print_table(results: list[dict]) -> None:
    """Measured vs predicted TTFT P50/P90 per contender."""
    head = (
        f"{'contender':<10} {'TTFT P50 meas':>13} {'pred':>6} {'err':>6}   "
        f"{'P90 meas':>8} {'pred':>6} {'err':>6}   {'within 20%':>10}"
    )
    print(head + "\n" + "-" * len(head))
    for r in results:
        a, b = r["p50"], r["p90"]
        print(
            f"{r['name']:<10} {a['measured_s']:>13.3f} {a['predicted_s']:>6.3f} "
            f"{100 * a['error']:>+5.0f}%   {b['measured_s']:>8.3f} {b['predicted_s']:>6.3f} "
            f"{100 * b['error']:>+5.0f}%   {'yes' if _meets(r) else 'no':>10}"
        )


def report(point: dict, calib: cal.Calibration, wan, slo_s: float, measured_link, results) -> None:
    """Print the calibration, the table and the diagnostics."""
    print_calibration(point, calib, wan, slo_s, results)
    print_table(results)
    met = [r["name"] for r in results if _meets(r)]
    print(
        f"\ngoal: predicted TTFT P50 and P90 within {100 * GOAL:.0f}% of measured; "
        f"met by: {', '.join(met) or 'none'}"
    )
    print("\nwhere the gaps come from:")
    print_gaps(point, results)
    print_link_and_pdd(measured_link, wan, results)


def print_calibration(point: dict, calib: cal.Calibration, wan, slo_s: float, results) -> None:
    """The run, the constants fitted on same-dc, and the WAN the simulator was given."""
    d, p = calib.decode, calib.prefill
    print(f"testbed: {point['label']}; {sum(r['requests'] for r in results)} requests simulated")
    print(
        f"calibrated on same-dc ({d.samples} requests): decode step {1e3 * d.step_s:.2f} ms + "
        f"{1e9 * d.per_context_token_s:.1f} ns per batch KV token (rmse {1e3 * d.rmse_s:.2f} ms);"
        f" prefill {1e3 * p.fixed_s:.0f} ms + {1e6 * p.per_token_s:.1f} us/token + "
        f"{1e9 * p.per_token_context_s:.2f} ns per (token x context token) "
        f"(rmse {1e3 * p.rmse_s:.0f} ms)"
    )
    print(
        f"WAN (the emulated link's settings): {wan.bandwidth_gbps * 1e3:g} Mbit/s, "
        f"RTT {wan.rtt_s * 1e3:g} ms; PDD's TTFT SLO {slo_s:g} s\n"
    )


def print_gaps(point: dict, results) -> None:
    """Per contender: the median per-request gap, the WAN bytes, and the three largest misses."""
    summaries = {s["name"]: s for s in point.get("summaries", [])}
    for r in results:
        wan_m = (summaries.get(r["name"]) or {}).get("wan_bytes")
        wan_s = ""
        if r["name"] != "same-dc" and wan_m is not None:
            wan_s = (
                f"; WAN KV bytes measured {wan_m / 1e6:.2f} MB, "
                f"predicted {r['wan_bytes_predicted'] / 1e6:.2f} MB"
            )
        print(
            f"  {r['name']}: median per-request TTFT measured - predicted "
            f"{1e3 * r['median_gap_s']:+.0f} ms{wan_s}"
        )
        worst = sorted(r["per_request"], key=lambda x: -abs(x["measured_s"] - x["predicted_s"]))
        for x in worst[:3]:
            pipe = ""
            if x["pipeline_measured"]:
                pipe = f", pipeline {x['pipeline_measured']} -> {x['pipeline_predicted']}"
            print(
                f"    largest miss: session {x['sid']} turn {x['turn']} ({x['kind']}, "
                f"{x['prompt_tokens']} tokens): {x['measured_s']:.3f} s measured, "
                f"{x['predicted_s']:.3f} s predicted, {x['others_decoding']:.1f} requests "
                f"decoding meanwhile{pipe}"
            )


def print_link_and_pdd(measured_link, wan, results) -> None:
    """The WAN transfer PDD's records show against the simulator's, and PDD's pipelines and
    decode-side cache hit, measured and predicted."""
    if measured_link is not None:
        print(
            f"  WAN KV transfer in PDD's records (MD's KV ready after RLD's first token, "
            f"{measured_link['transfers']} transfers): {1e3 * measured_link['overhead_s']:.0f} ms"
            f" + bytes at {measured_link['mbps']:.1f} Mbit/s; simulator: RTT "
            f"{1e3 * wan.rtt_s:g} ms + bytes at {wan.bandwidth_gbps * 1e3:g} Mbit/s"
        )
    pdd = next((r for r in results if r["name"] == "pdd"), None)
    if pdd is not None and "pipelines_measured" in pdd:
        print(
            f"  pdd pipelines: measured {pdd['pipelines_measured']}, predicted "
            f"{pdd['pipelines_predicted']}"
        )
        print(
            f"  pdd decode-side cache hit on the {pdd['decode_hit_requests']} requests whose KV "
            f"crossed: measured {100 * pdd['decode_hit_measured']:.1f}% of prompt tokens, "
            f"predicted {100 * pdd['decode_hit_predicted']:.1f}%"
        )


def calibrated(opts, args: dict, point: dict) -> int:
    """The CPU testbed's run (``--no-emulation``): calibrate, replay, compare TTFT."""
    try:
        runs, calib, wan, config = calibrated_config(opts, args, point)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = [compare(n, runs[n], config) for n in SIMULATED if n in runs]
    failed = sum(len(rows) for rows in point["requests"].values()) - sum(map(len, runs.values()))
    if failed:
        print(f"({failed} failed requests left out of both sides)")
    if others := sorted(set(runs) - set(SIMULATED)):
        print(f"(not simulated: {', '.join(others)})")
    measured_link = link_from_records(runs["pdd"]) if "pdd" in runs else None
    report(point, calib, wan, args["ttft_slo_s"], measured_link, results)
    what_if = None
    if measured_link is not None and "pdd" in runs:
        what_if = what_if_measured_startup(runs, wan, config, measured_link)
    _write_json(
        opts,
        {
            "label": point["label"],
            "goal_relative_error": GOAL,
            "calibration": asdict(calib),
            "wan": asdict(wan),
            "measured_wan": measured_link,
            "contenders": results,
            "what_if_measured_wan_startup": what_if,
        },
    )
    return 0


def calibrated_config(opts, args: dict, point: dict):
    """(the requests of each contender rebuilt, the calibration on same-dc's, the WAN, the
    simulator's config); ``ValueError`` when the run cannot be calibrated."""
    if args.get("model_path"):
        raise ValueError(
            f"--testbed-json was run with --model-path {args['model_path']}; this script "
            "knows the shape (KV bytes, weights) of the generated tiny model only"
        )
    sessions = testbed_sessions(args, point)
    runs = {n: rebuild(rows, sessions) for n, rows in point["requests"].items()}
    if "same-dc" not in runs or len(runs["same-dc"]) < 3:
        raise ValueError("--testbed-json: calibration needs the same-dc contender's requests")
    model = TinyModelConfig(seed=args["seed"])
    hw = cal.KnownHardware(
        kv_bytes_per_token=model.kv_bytes_per_token(DTYPE_BYTES),
        weight_bytes=float(tiny_model_weight_bytes(model)),
        kv_capacity_tokens=int(
            args.get("max_total_tokens") or _cluster_default("max_total_tokens")
        ),
        chunk_tokens=_cluster_default("chunked_prefill_size"),
        intra_gbs=opts.intra_gbs,
    )
    calib = calibrate_on(runs["same-dc"], hw)
    wan = cal.testbed_wan(point.get("wan_mbps", args["wan_mbps"]), args["wan_delay_ms"])
    handoff = HandoffPolicyConfig(mode=args.get("handoff_mode", "one-shot"))
    config = cal.testbed_sim_config(calib, wan, args["ttft_slo_s"], handoff, opts.block_tokens)
    return runs, calib, wan, config


def what_if_measured_startup(runs: dict, wan, config, measured_link) -> list[dict]:
    """Not the prediction: the same replay with the transfer start-up PDD's records show
    instead of one RTT; its table printed, its rows returned."""
    slow = dataclasses.replace(wan, rtt_s=measured_link["overhead_s"])
    config2 = dataclasses.replace(
        config, contenders=tuple(dataclasses.replace(c, wan=slow) for c in config.contenders)
    )
    what_if = [compare(n, runs[n], config2) for n in SIMULATED if n in runs and n != "same-dc"]
    print(
        f"\nwhat-if (not the prediction): the WAN's start-up as measured "
        f"({1e3 * slow.rtt_s:.0f} ms) instead of one RTT\n"
    )
    print_table(what_if)
    pdd2 = next(r for r in what_if if r["name"] == "pdd")
    print(f"  pdd pipelines then: {pdd2['pipelines_predicted']}")
    return what_if


def emulated(opts, args: dict, point: dict) -> int:
    """A run on emulated chips: the simulator on the same chips, links and requests; every
    figure of every contender, measured vs simulated, against the 10% fidelity goal."""
    try:
        scenario = sp.EmulatedScenario.from_args(args, point.get("wan_mbps"))
        sessions = testbed_sessions(args, point)
        runs = {
            n: sp.replayed_from_rows(rows, sessions)
            for n, rows in point["requests"].items()
            if n in sp.SIMULATED
        }
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    emu = scenario.emulation
    print(
        f"testbed: {point['label']}; chips {emu.chip_a} (datacenter A) and {emu.chip_b} (B), "
        f"{emu.chips} per instance, token scale {emu.token_scale}, time dilation "
        f"{emu.time_dilation:g} (times below: chip time)"
    )
    for name, o in (point.get("overruns") or {}).items():
        if o.get("forwards"):
            print(
                f"  {name}: {o['overruns']}/{o['forwards']} forwards overran the emulated chip "
                f"({100 * o['overruns'] / o['forwards']:.1f}%: host time, not chip time)"
            )
    predicted = sp.predict(scenario, runs)
    rows = sp.comparison({s["name"]: s for s in point["summaries"]}, predicted)
    print(sp.format_comparison(rows, predicted))
    for s in point["summaries"]:
        if s.get("pipelines"):
            share = 100 * (s.get("relay_share") or 0.0)
            print(f"{s['name']} measured: pipelines {s['pipelines']}, RLD share {share:.1f}%")
    _write_json(
        opts,
        {
            "label": point["label"],
            "goal_relative_error": sp.FIDELITY_GOAL,
            "scenario": asdict(scenario),
            "rows": [dict(zip(ROW_KEYS, r, strict=True)) for r in rows],
            "predicted": {n: asdict(p) for n, p in predicted.items()},
        },
    )
    return 0


ROW_KEYS = ("contender", "figure", "measured_s", "predicted_s", "error", "within_goal")


def _write_json(opts, doc: dict) -> None:
    if opts.json:
        Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
        doc = {"testbed_json": opts.testbed_json, "point": opts.point, **doc}
        Path(opts.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {opts.json}")


def main(argv: list[str] | None = None) -> int:
    ap = shared_flags.parser(__doc__)
    ap.add_argument("--testbed-json", default="out/testbed.json")
    ap.add_argument(
        "--point", type=int, default=0, help="which point of the JSON (a sweep has many)"
    )
    shared_flags.json_out(ap, None, "write the comparison here")
    ap.add_argument(
        "--block-tokens",
        type=int,
        default=1,
        help="calibrated mode: simulator prefix block (SGLang's CPU radix cache matches per token)",
    )
    ap.add_argument(
        "--intra-gbs",
        type=float,
        default=1.0,
        help="calibrated mode: assumed KV rate between servers of one datacenter (loopback), GB/s",
    )
    opts = ap.parse_args(argv)
    if opts.block_tokens < 1:
        ap.error("--block-tokens must be >= 1")
    try:
        args, point = load_point(opts.testbed_json, opts.point)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.get("emulation"):
        return emulated(opts, args, point)
    return calibrated(opts, args, point)


if __name__ == "__main__":
    sys.exit(main())
