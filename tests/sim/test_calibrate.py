"""Calibration fits on synthetic data with known answers, the calibrated config reproducing them
through the simulator, and the testbed workload rebuilt with its prefix sharing."""

import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import pytest

from sglang_pdd.policy import HandoffPolicyConfig
from sglang_pdd.sim import calibrate as cal
from sglang_pdd.sim.chips import InstancePerf
from sglang_pdd.sim.cluster import ClusterSim
from sglang_pdd.testbed.workload import AgenticConfig, agentic_sessions

REPO_ROOT = Path(__file__).resolve().parents[2]
HW = cal.KnownHardware(
    kv_bytes_per_token=512,
    weight_bytes=1e6,
    kv_capacity_tokens=65536,
    chunk_tokens=512,
    intra_gbs=1.0,
)
DECODE = cal.DecodeFit(step_s=0.002, per_context_token_s=2e-7, rmse_s=0.0, samples=0)
PREFILL = cal.PrefillFit(
    fixed_s=0.05, per_token_s=2e-5, per_token_context_s=5e-8, rmse_s=0.0, samples=0
)


def _ttft(n: int, h: int, prefill=PREFILL, decode=DECODE, hw=HW) -> float:
    """The simulator's TTFT of an unqueued request under a calibration (the fit's model)."""
    ovh = cal.forward_overhead_s(decode, hw)
    transfer = (n + h) * hw.kv_bytes_per_token / (hw.intra_gbs * 1e9)
    return (
        prefill.fixed_s
        + prefill.compute_s(n, h)
        + ovh * math.ceil(n / hw.chunk_tokens)
        + transfer
        + decode.step_time(n + h)
    )


def test_nonnegative_fit_recovers_slope_and_intercept():
    xs = [float(x) for x in range(10, 200, 7)]
    f = cal.fit_nonnegative({"one": [1.0] * len(xs), "x": xs}, [0.3 + 0.02 * x for x in xs])
    assert f["one"] == pytest.approx(0.3)
    assert f["x"] == pytest.approx(0.02)
    assert f.rmse == pytest.approx(0.0, abs=1e-12)
    assert f.samples == len(xs)


def test_nonnegative_fit_drops_a_negative_coefficient():
    xs = [float(x) for x in range(1, 20)]
    # y falls with x: the best non-negative model is the constant mean.
    f = cal.fit_nonnegative({"one": [1.0] * len(xs), "x": xs}, [5.0 - 0.1 * x for x in xs])
    assert f["x"] == 0.0
    assert f["one"] == pytest.approx(5.0 - 0.1 * 10)


def test_fit_rejects_too_few_samples():
    with pytest.raises(ValueError, match="samples"):
        cal.fit_nonnegative({"one": [1.0], "x": [2.0]}, [1.0])


def test_decode_fit_recovers_step_and_per_token_cost():
    rng = random.Random(1)
    contexts = [rng.uniform(1000, 20000) for _ in range(30)]
    gaps = [0.0015 + 3e-7 * c for c in contexts]
    f = cal.fit_decode(gaps, contexts)
    assert f.step_s == pytest.approx(0.0015)
    assert f.per_context_token_s == pytest.approx(3e-7)


def test_prefill_fit_recovers_the_generating_constants():
    rng = random.Random(2)
    new = [rng.randint(20, 2000) for _ in range(40)]
    cached = [rng.randint(0, 5000) for _ in range(40)]
    ttfts = [_ttft(n, h) for n, h in zip(new, cached, strict=True)]
    f = cal.fit_prefill(new, cached, ttfts, DECODE, HW)
    assert f.fixed_s == pytest.approx(PREFILL.fixed_s, rel=1e-6)
    assert f.per_token_s == pytest.approx(PREFILL.per_token_s, rel=1e-6)
    assert f.per_token_context_s == pytest.approx(PREFILL.per_token_context_s, rel=1e-6)


def test_calibrated_profiles_give_the_fitted_times():
    c = cal.Calibration(HW, DECODE, PREFILL)
    perf = InstancePerf(c.chip(), c.model(), c.engine())
    ovh = cal.forward_overhead_s(DECODE, HW)
    assert perf.prefill_time([(300, 1000)]) == pytest.approx(ovh + PREFILL.compute_s(300, 1000))
    assert perf.decode_step_time(4, 9000) == pytest.approx(DECODE.step_time(9000))
    assert perf.kv_capacity_tokens == HW.kv_capacity_tokens


def test_simulated_same_dc_ttft_matches_the_fitted_model():
    c = cal.Calibration(HW, DECODE, PREFILL)
    config = cal.testbed_sim_config(
        c, cal.testbed_wan(8.0, 100.0), 0.5, HandoffPolicyConfig(), block_tokens=16
    )
    same = config.contenders[0]
    reqs = cal.testbed_requests([(0.0, list(range(1200)), 5), (10.0, list(range(1500)), 5)], 16)
    recs = ClusterSim(same, config).run(reqs)
    assert recs[0].first_token_s - recs[0].arrival_s == pytest.approx(_ttft(1200, 0))
    # The second prompt extends the first: its 1200 cached tokens (75 blocks) are not prefilled.
    assert recs[1].prefill_hit_tokens == 1200
    assert recs[1].first_token_s - recs[1].arrival_s == pytest.approx(_ttft(300, 1200))


def test_testbed_contenders_and_link():
    wan = cal.testbed_wan(8.0, 100.0)
    assert wan.bandwidth_gbps == pytest.approx(0.008)
    assert wan.rtt_s == pytest.approx(0.2)
    config = cal.testbed_sim_config(
        cal.Calibration(HW, DECODE, PREFILL), wan, 0.5, HandoffPolicyConfig(), 1
    )
    kinds = {c.name: c for c in config.contenders}
    assert [kinds[n].kind for n in ("same-dc", "cross-dc", "pdd")] == ["same-dc", "cross-dc", "pdd"]
    assert kinds["pdd"].relay.count == 1 and kinds["pdd"].pipeline.ttft_slo_s == 0.5
    assert kinds["cross-dc"].decode_cache and kinds["cross-dc"].wan == wan
    with pytest.raises(ValueError, match="--wan-mbps"):
        cal.testbed_wan(0.0, 100.0)


def test_mean_batch_context_of_overlapping_spans():
    # A: 0..10 s, 100 prompt, 10 out; B: 5..15 s, 1000 prompt, 0 out (constant).
    spans = [(0.0, 10.0, 100, 10), (5.0, 15.0, 1000, 0)]
    a, b = cal.mean_batch_context(spans, points=1000)
    assert a == pytest.approx(105 + 500, rel=1e-3)  # A averages 105; B is there half the time
    assert b == pytest.approx(1000 + (107.5 * 5) / 10, rel=1e-3)


def test_prefix_hits_are_longest_shared_prefixes():
    hits = cal.prefix_hits([[1, 2, 3, 4], [1, 2, 9], [1, 2, 3, 4, 5], [7], [1, 2, 3, 4, 5]])
    assert hits == [0, 2, 4, 0, 4]  # the last token is always computed


def _workload():
    cfg = AgenticConfig(sessions=3, turns=6, side_call_fraction=0.5, cold_fraction=0.0, seed=3)
    sessions = agentic_sessions(cfg)
    rng = random.Random(0)
    outputs = {
        (s.sid, k): [rng.randrange(10, 250) for _ in range(t.max_new_tokens)]
        for s in sessions
        for k, t in enumerate(s.turns)
    }
    return cfg, sessions, outputs


def test_rebuilt_prompts_extend_history_and_share_the_system_prompt():
    cfg, sessions, outputs = _workload()
    prompts = cal.testbed_prompts(sessions, outputs)
    firsts = [prompts[(s.sid, 0)] for s in sessions]
    assert all(p[: cfg.system_tokens] == firsts[0][: cfg.system_tokens] for p in firsts)
    sides = 0
    for s in sessions:
        prev = None
        for k, turn in enumerate(s.turns):
            p = prompts[(s.sid, k)]
            if prev is not None:
                assert p[: len(prev)] == prev  # history = previous prompt + its output
            if turn.kind == "side":
                sides += 1
            else:
                prev = p + outputs[(s.sid, k)]
    assert sides > 0
    with pytest.raises(ValueError, match="no recorded output"):
        cal.testbed_prompts(sessions, {})


def test_rebuilt_requests_keep_prefix_sharing_in_hash_ids():
    cfg, sessions, outputs = _workload()
    prompts = cal.testbed_prompts(sessions, outputs)
    bt = 16
    rows, key = [], {}
    for s in sessions:
        for k, t in enumerate(s.turns):
            key[len(rows)] = (s.sid, k, t.kind)
            rows.append((t.at_s, prompts[(s.sid, k)], len(outputs[(s.sid, k)])))
    reqs = cal.testbed_requests(rows, bt)
    assert [r.arrival_s for r in reqs] == sorted(r[0] for r in rows)
    # Requests come in arrival order (a stable sort of the rows).
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    by_key = {key[i][:2]: (r, key[i][2]) for i, r in zip(order, reqs, strict=True)}
    assert all(r.input_tokens == len(rows[i][1]) for i, r in zip(order, reqs, strict=True))
    assert all(len(r.hash_ids) == r.input_tokens // bt for r in reqs)
    for s in sessions:
        prev = None
        for k in range(len(s.turns)):
            r, kind = by_key[(s.sid, k)]
            if prev is not None:
                assert r.hash_ids[: len(prev.hash_ids)] == prev.hash_ids
            if kind != "side":
                prev = r
    firsts = [by_key[(s.sid, 0)][0].hash_ids[: cfg.system_tokens // bt] for s in sessions]
    assert len(set(firsts)) == 1
    assert by_key[(0, 0)][0].hash_ids[-1] != by_key[(1, 0)][0].hash_ids[-1]


def _synthetic_testbed_json(path, cfg, sessions, outputs):
    """A testbed JSON whose same-dc TTFTs and gaps follow the calibration above."""
    prompts = cal.testbed_prompts(sessions, outputs)
    order = sorted(prompts, key=lambda key: sessions[key[0]].turns[key[1]].at_s)
    hits = dict(zip(order, cal.prefix_hits([prompts[key] for key in order]), strict=True))
    rows = []
    for s in sessions:
        for k, t in enumerate(s.turns):
            p, out = prompts[(s.sid, k)], outputs[(s.sid, k)]
            ttft = _ttft(len(p) - hits[(s.sid, k)], hits[(s.sid, k)])
            gap = DECODE.step_time(len(p))
            rows.append(
                {
                    "sid": s.sid,
                    "turn": k,
                    "kind": t.kind,
                    "prompt_tokens": len(p),
                    "at_s": t.at_s,
                    "late_s": 0.0,
                    "status": 200,
                    "ttft_s": ttft,
                    "e2e_s": ttft + gap * (len(out) - 1),
                    "gaps_s": [gap] * (len(out) - 1),
                    "output_ids": out,
                    "record": None,
                    "error": "",
                }
            )
    args = {
        "workload": "agentic",
        "turns": cfg.turns,
        "context_tokens": cfg.context_tokens,
        "max_new_tokens": cfg.output_tokens,
        "turn_interval_s": cfg.turn_interval_s,
        "seed": cfg.seed,
        "wan_mbps": 8.0,
        "wan_delay_ms": 100.0,
        "ttft_slo_s": 0.5,
        "handoff_mode": "one-shot",
        "max_total_tokens": 65536,
    }
    point = {
        "label": "synthetic",
        "wan_mbps": 8.0,
        "sessions": cfg.sessions,
        "summaries": [],
        "requests": {"same-dc": rows, "cross-dc": rows},
    }
    path.write_text(json.dumps({"args": args, "points": [point]}))


def test_script_recovers_a_synthetic_testbed(tmp_path, capsys):
    cfg = AgenticConfig(sessions=2, turns=4, output_tokens=20, seed=5)
    sessions = agentic_sessions(cfg)
    rng = random.Random(1)
    outputs = {
        (s.sid, k): [rng.randrange(10, 250) for _ in range(t.max_new_tokens)]
        for s in sessions
        for k, t in enumerate(s.turns)
    }
    src, out = tmp_path / "testbed.json", tmp_path / "cmp.json"
    _synthetic_testbed_json(src, cfg, sessions, outputs)
    if str(REPO_ROOT / "benchmark") not in sys.path:
        sys.path.insert(0, str(REPO_ROOT / "benchmark"))  # it imports shared_flags from there
    spec = importlib.util.spec_from_file_location(
        "sim_vs_testbed", REPO_ROOT / "benchmark" / "sim_vs_testbed.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--testbed-json", str(src), "--json", str(out)]) == 0
    assert "met by: same-dc" in capsys.readouterr().out
    res = json.loads(out.read_text())
    same = next(c for c in res["contenders"] if c["name"] == "same-dc")
    # Sessions overlap little, so the prediction of what the fit was made from is close.
    assert abs(same["p50"]["error"]) < 0.05
    assert mod.main(["--testbed-json", str(src), "--point", "3"]) == 2
