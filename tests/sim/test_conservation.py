"""Every request completes exactly once; every output token comes from exactly one of RLD/MD."""

import dataclasses

import pytest

from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.sim.defaults import default_sim_config
from sglang_pdd.sim.link import LinkConfig
from sglang_pdd.sim.runner import run_contender
from sglang_pdd.sim.workload import AgenticWorkloadConfig, generate_agentic

WORKLOAD = generate_agentic(
    AgenticWorkloadConfig(duration_s=120.0, sessions_per_s=0.5, mean_turn_gap_s=5.0), seed=3
)
# A WAN whose transfers are slow (2 Gbps per transfer) but not saturated, so that low-hit
# requests take the relay pipeline and hand off.
SLOW_WAN = LinkConfig(bandwidth_gbps=60.0, rtt_s=0.03, jitter_s=0.02, max_flow_gbps=2.0)


def _pdd(mode: str):
    cfg = default_sim_config()
    base = next(c for c in cfg.contenders if c.kind == "pdd")
    spec = dataclasses.replace(
        base,
        wan=SLOW_WAN,
        handoff=HandoffPolicyConfig(mode=mode, catchup_threshold_tokens=8, catchup_chunk_tokens=16),
        pipeline=PipelinePolicyConfig(ttft_slo_s=0.5),
    )
    return spec, cfg


@pytest.mark.parametrize("mode", ["one-shot", "catch-up", "auto"])
def test_pdd_conserves_requests_and_tokens(mode):
    spec, cfg = _pdd(mode)
    result, records = run_contender(spec, cfg, WORKLOAD)
    assert len(records) == len(WORKLOAD)
    assert all(r.completions == 1 for r in records)
    assert all(r.relay_tokens + r.main_tokens == r.output_tokens for r in records)
    assert all(r.relay_tokens >= 0 and r.main_tokens >= 0 for r in records)
    relayed = [r for r in records if r.pipeline == "P-RLD-MD"]
    assert relayed, "the thin WAN should push some requests through RLD"
    handed = [r for r in relayed if r.main_tokens > 0 and r.relay_tokens > 0]
    assert handed, "some relayed requests should be handed over mid-stream"
    assert 0 < result.summary["relay_token_share"] < 1
    for r in records:
        if r.pipeline == "P-MD":
            assert r.relay_tokens == 0
        if r.pipeline == "P-RLD":
            assert r.main_tokens == 0


def test_baselines_make_every_token_on_the_decoder():
    cfg = default_sim_config()
    for spec in cfg.contenders:
        if spec.kind == "pdd":
            continue
        _, records = run_contender(spec, cfg, WORKLOAD[:300])
        assert all(r.completions == 1 for r in records)
        assert all(r.main_tokens == r.output_tokens and r.relay_tokens == 0 for r in records)


def test_relay_hides_slow_transfers():
    spec, cfg = _pdd("one-shot")
    cross = dataclasses.replace(spec, kind="cross-dc", relay=None, name="cross")
    pdd_res, _ = run_contender(spec, cfg, WORKLOAD)
    cross_res, _ = run_contender(cross, cfg, WORKLOAD)
    assert pdd_res.summary["ttft_s"]["p90"] < cross_res.summary["ttft_s"]["p90"]
