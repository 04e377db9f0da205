"""The simulator's prediction of an emulated testbed run: the conversion of its scenario and
requests, the figures' definitions, the comparison table (pure logic, no servers)."""

from __future__ import annotations

import argparse
import random
import sys

import numpy as np
import pytest

from sglang_pdd.emulation.config import EmulationConfig
from sglang_pdd.emulation.forward import ForwardPacer, ForwardShape
from sglang_pdd.sim.cluster import RequestRecord
from sglang_pdd.sim.defaults import CHIP_A, CHIP_B, DEFAULT_ENGINE, DEFAULT_MODEL
from sglang_pdd.sim.runner import run_contender
from sglang_pdd.testbed import sim_prediction as sp
from sglang_pdd.testbed.emulated_chips import ChipEmulation
from sglang_pdd.testbed.replay import RequestResult
from sglang_pdd.testbed.report import summarize
from sglang_pdd.testbed.workload import AgenticConfig, agentic_sessions

K = 32
SCENARIO = sp.EmulatedScenario(ChipEmulation(token_scale=K, time_dilation=2.0), 10_000.0, 15.0)


def test_the_scenario_comes_from_the_testbed_flags():
    args = {
        "emulation": {
            "chip_a": "A",
            "chip_b": "B",
            "chips": 8,
            "token_scale": K,
            "time_dilation": 2.0,
            "model_file": "",
        },
        "wan_mbps": 10_000.0,
        "wan_delay_ms": 15.0,
        "ttft_slo_s": 3.0,  # the testbed stretched the router's objective by the dilation
        "handoff_mode": "catch-up",
    }
    s = sp.EmulatedScenario.from_args(args, wan_mbps=800.0)
    assert (s.wan_mbps, s.wan_delay_ms, s.ttft_slo_s, s.handoff_mode) == (
        800.0,
        15.0,
        1.5,
        "catch-up",
    )
    assert s.emulation == ChipEmulation(token_scale=K, time_dilation=2.0)
    assert sp.EmulatedScenario.from_args({**args, "ttft_slo_s": None}).ttft_slo_s is None
    with pytest.raises(ValueError, match="no-emulation"):
        sp.EmulatedScenario.from_args({**args, "emulation": None})


def test_the_simulator_runs_the_emulated_chips_links_and_topology():
    cfg = sp.sim_config(SCENARIO)
    assert cfg.chips["A"].peak_tflops == CHIP_A.peak_tflops
    assert cfg.chips["B"].memory_bw_gbs == CHIP_B.memory_bw_gbs
    assert cfg.model == DEFAULT_MODEL
    assert cfg.engine.chunk_tokens == 512 * K  # the servers chunk by testbed tokens
    assert cfg.engine.kv_per_chunk and cfg.engine.mfu == DEFAULT_ENGINE.mfu
    assert cfg.block_tokens == K
    same, cross, pdd = cfg.contenders
    assert [c.name for c in cfg.contenders] == list(sp.SIMULATED)
    assert (same.prefill.chip, same.decode.chip) == ("A", "A")
    assert (cross.decode.chip, cross.decode_cache) == ("B", True)
    assert (pdd.relay.chip, pdd.decode.chip) == ("A", "B")
    assert {p.count for c in cfg.contenders for _, p in c.pools()} == {1}
    assert {p.chips for c in cfg.contenders for _, p in c.pools()} == {8}
    assert (cross.wan.bandwidth_gbps, cross.wan.rtt_s, cross.wan.jitter_s) == (10.0, 0.03, 0.0)
    assert cross.wan.fifo  # the testbed's emulated WAN carries writes in order
    # The router sees testbed tokens: its anomaly threshold is K times as many model tokens.
    assert pdd.pipeline.anomaly_min_input_tokens == 32768 * K
    assert pdd.handoff.mode == "one-shot"
    # The router's claims; with emulated chips RLD has chips of its own (the testbed's
    # topology lists them apart), so the router does not yield it to P's queue, whose limit
    # it would read on the dilated clock.
    assert pdd.transfer_claims and not pdd.pipeline.relay_shares_prefill
    assert pdd.pipeline.prefill_backlog_limit_s == pytest.approx(0.5 / 2.0)


def test_prompts_are_scaled_outputs_are_not_and_prefixes_are_shared():
    shared = tuple(range(10, 110))
    rows = [sp.Replayed(0.0, shared, 7), sp.Replayed(1.0, shared + (5, 6), 3)]
    a, b = sp.sim_requests(rows, K, 1)
    assert (a.input_tokens, a.output_tokens, b.input_tokens, b.output_tokens) == (
        100 * K,
        7,
        102 * K,
        3,
    )
    assert b.hash_ids[:100] == a.hash_ids and len(b.hash_ids) == 102
    with pytest.raises(ValueError, match="output"):
        sp.sim_requests([sp.Replayed(0.0, shared, 0)], K, 1)


def test_a_lone_prefill_lasts_what_the_emulated_server_pads_it_to():
    prompt = tuple(random.Random(0).randrange(10, 250) for _ in range(1300))
    cfg = sp.sim_config(SCENARIO)
    reqs = sp.sim_requests([sp.Replayed(0.0, prompt, 2)], K, 1)
    _, (rec,) = run_contender(cfg.contenders[0], cfg, reqs)
    # The server's forwards: chunks of 512 testbed tokens, paced by ForwardPacer (dilated).
    pacer = ForwardPacer(EmulationConfig(CHIP_A, DEFAULT_MODEL, DEFAULT_ENGINE, 8, K, 2.0))
    chunks = [(512, 0), (512, 512), (276, 1024)]
    paced = sum(pacer.duration(ForwardShape(extends=(c,))) for c in chunks) / 2.0
    assert rec.prefill_done_s == pytest.approx(paced, rel=1e-9)


def _record(**kw) -> RequestRecord:
    base = dict(rid=0, arrival_s=1.0, input_tokens=10, output_tokens=5)
    return RequestRecord(**{**base, **kw})


def test_gaps_follow_rld_then_the_handoff_then_md():
    plain = _record(first_token_s=2.0, done_s=2.4)
    assert sp.request_gaps(plain) == pytest.approx([0.1] * 4)
    # 3 ids on RLD (0.2 s apart), 0.4 s of handoff, then MD's 2 ids (0.45 s apart).
    handed = _record(
        first_token_s=2.0,
        done_s=3.25,
        relay_tokens=3,
        handoff_gap_s=0.4,
        main_first_s=2.0 + 0.4 + 0.4,
    )
    assert sp.request_gaps(handed) == pytest.approx([0.2, 0.2, 0.4, 0.45])
    assert sp.request_gaps(_record(output_tokens=1, first_token_s=2.0, done_s=2.0)) == []


def test_figures_are_the_testbed_summary_s():
    rng = random.Random(3)
    recs, results = [], []
    for i in range(20):
        at, ttft, gap, n = rng.uniform(0, 9), rng.uniform(0.1, 3), rng.uniform(0.01, 0.05), 30
        recs.append(
            _record(
                rid=i,
                arrival_s=at,
                output_tokens=n,
                first_token_s=at + ttft,
                done_s=at + ttft + gap * (n - 1),
            )
        )
        results.append(
            RequestResult(
                0, i, "user", 10, at, 0.0, 200, ttft, ttft + gap * (n - 1), [gap] * (n - 1), [1] * n
            )
        )
    got, want = sp.figures(recs), summarize("x", results)
    for m, q in sp.FIGURES:
        assert got[f"{m}_p{q}"] == pytest.approx(getattr(want, f"{m}_p{q}"))
    assert got["ttft_p90"] == pytest.approx(np.percentile([r.ttft_s for r in results], 90))


def test_rows_rebuild_prompts_from_the_sessions_and_outputs():
    sessions = agentic_sessions(AgenticConfig(sessions=2, turns=3, output_tokens=5, seed=1))
    rows, history = [], {}
    for s in sessions:
        hist: list[int] = []
        for k, t in enumerate(s.turns):
            prompt = hist + list(t.new_ids)
            out = [11] * t.max_new_tokens
            rows.append(
                {
                    "sid": s.sid,
                    "turn": k,
                    "prompt_tokens": len(prompt),
                    "at_s": t.at_s,
                    "late_s": 0.25,
                    "status": 200,
                    "ttft_s": 0.1,
                    "output_ids": out,
                }
            )
            history[(s.sid, k)] = prompt
            if t.kind != "side":
                hist = prompt + out
    got = sp.replayed_from_rows(rows, sessions)
    assert [r.prompt_ids for r in got] == [tuple(history[(r["sid"], r["turn"])]) for r in rows]
    assert [r.sent_s for r in got] == [r["at_s"] + 0.25 for r in rows]
    rows[0]["status"], rows[0]["ttft_s"] = 500, None
    assert len(sp.replayed_from_rows(rows, sessions)) == len(rows) - 1
    rows[1]["prompt_tokens"] += 1
    with pytest.raises(ValueError, match="rebuilt prompt"):
        sp.replayed_from_rows(rows, sessions)


def _prediction(**figs) -> sp.Prediction:
    return sp.Prediction(
        "pdd",
        3,
        {f"{m}_p{q}": figs.get(f"{m}_p{q}", 1.0) for m, q in sp.FIGURES},
        {"P-RLD-MD": 3},
        0.05,
    )


def test_the_table_marks_each_goal_figure_within_or_over():
    measured = {"pdd": {f"{m}_p{q}": 1.0 for m, q in sp.FIGURES} | {"ttft_p90": 2.0}}
    rows = sp.comparison(measured, {"pdd": _prediction(ttft_p99=5.0)})
    by = {r[1]: r for r in rows}
    assert by["ttft_p50"][4:] == (0.0, True)
    assert by["ttft_p90"][4:] == (-0.5, False)
    assert by["ttft_p99"][5] is None  # reported, outside the goal
    text = sp.format_comparison(rows, {"pdd": _prediction()})
    assert "OVER 10%" in text and "within 10%" in text and "4/5 figures" in text
    assert "pipelines {'P-RLD-MD': 3}" in text
    assert sp.comparison({}, {"pdd": _prediction()}) == []


def test_the_hook_prints_the_prediction_beside_a_point():
    prompt = tuple(range(10, 600))
    results = [
        RequestResult(
            0,
            0,
            "user",
            len(prompt),
            0.0,
            0.0,
            200,
            1.0,
            5.0,
            [0.02] * 9,
            [1] * 10,
            prompt_ids=list(prompt),
        )
    ]
    point = {
        "wan_mbps": 10_000.0,
        "runs": {n: results for n in sp.SIMULATED},
        "summaries": [summarize(n, results) for n in sp.SIMULATED],
    }
    args = argparse.Namespace(
        emulation=ChipEmulation(token_scale=K),
        wan_mbps=10_000.0,
        wan_delay_ms=15.0,
        ttft_slo_s=None,
        handoff_mode="one-shot",
    )
    lines: list[str] = []
    predicted = sp.print_prediction(point, args, out=lines.append)
    assert set(predicted) == set(sp.SIMULATED)
    assert all(p.requests == 1 for p in predicted.values())
    assert "measured vs simulated" in lines[0] and "fidelity:" in lines[1]
    args.emulation = None
    assert sp.print_prediction(point, args, out=lines.append) == {}


def test_sim_vs_testbed_compares_an_emulated_json(tmp_path, capsys):
    import importlib.util
    import json
    from pathlib import Path

    cfg = AgenticConfig(sessions=2, turns=2, context_tokens=200, output_tokens=6, seed=4)
    rows = []
    for s in agentic_sessions(cfg):
        h: list[int] = []
        for k, t in enumerate(s.turns):
            prompt = h + list(t.new_ids)
            out = [12] * t.max_new_tokens
            rows.append(
                {
                    "sid": s.sid,
                    "turn": k,
                    "kind": t.kind,
                    "prompt_tokens": len(prompt),
                    "at_s": t.at_s,
                    "late_s": 0.0,
                    "status": 200,
                    "ttft_s": 0.5,
                    "e2e_s": 1.0,
                    "gaps_s": [0.1] * (len(out) - 1),
                    "output_ids": out,
                }
            )
            h = prompt + out if t.kind != "side" else h
    emulation = {
        "chip_a": "A",
        "chip_b": "B",
        "chips": 8,
        "token_scale": K,
        "time_dilation": 2.0,
        "model_file": "",
    }
    args = {
        "workload": "agentic",
        "turns": cfg.turns,
        "context_tokens": cfg.context_tokens,
        "max_new_tokens": cfg.output_tokens,
        "turn_interval_s": cfg.turn_interval_s,
        "seed": cfg.seed,
        "wan_mbps": 10_000.0,
        "wan_delay_ms": 15.0,
        "ttft_slo_s": None,
        "handoff_mode": "one-shot",
        "emulation": emulation,
    }
    summaries = []
    for name in sp.SIMULATED:
        results = [
            RequestResult(
                r["sid"],
                r["turn"],
                r["kind"],
                r["prompt_tokens"],
                r["at_s"],
                0.0,
                200,
                0.5,
                1.0,
                r["gaps_s"],
                r["output_ids"],
            )
            for r in rows
        ]
        summaries.append(summarize(name, results).as_dict())
    point = {
        "label": "synthetic",
        "wan_mbps": 10_000.0,
        "sessions": cfg.sessions,
        "summaries": summaries,
        "requests": {n: rows for n in sp.SIMULATED},
    }
    src, out = tmp_path / "tb.json", tmp_path / "cmp.json"
    src.write_text(json.dumps({"args": args, "points": [point]}))
    script = Path(__file__).resolve().parents[2] / "benchmark" / "sim_vs_testbed.py"
    if str(script.parent) not in sys.path:
        sys.path.insert(0, str(script.parent))  # it imports shared_flags from its folder
    spec = importlib.util.spec_from_file_location("sim_vs_testbed", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--testbed-json", str(src), "--json", str(out)]) == 0
    assert "fidelity:" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert {r["contender"] for r in doc["rows"]} == set(sp.SIMULATED)
    assert doc["predicted"]["pdd"]["requests"] == len(rows)
