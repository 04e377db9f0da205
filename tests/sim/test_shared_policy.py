"""The simulator is driven by the same policy objects (and classes) the router uses."""

import importlib
import importlib.util

import pytest

import sglang_pdd.policy as policy
from sglang_pdd.policy.placement import pace_ratio
from sglang_pdd.sim import cluster
from sglang_pdd.sim.cluster import ClusterSim
from sglang_pdd.sim.link import LinkConfig

from .helpers import config, req, spec


class RecordingPolicy(policy.PipelinePolicy):
    def __init__(self):
        super().__init__(policy.PipelinePolicyConfig(ttft_slo_s=0.0))
        self.calls = []

    def decide(self, facts, link, relay_load=0.0, **estimates):
        decision = super().decide(facts, link, relay_load, **estimates)
        self.calls.append((facts, decision))
        return decision


class RecordingHandoff(policy.HandoffPolicy):
    def __init__(self):
        super().__init__(policy.HandoffPolicyConfig(mode="one-shot"))
        self.calls = 0

    def plan(self, backlog_tokens, relay_load):
        self.calls += 1
        return super().plan(backlog_tokens, relay_load)


def test_injected_policy_objects_make_every_decision():
    s = spec("pdd")
    pipeline, handoff = RecordingPolicy(), RecordingHandoff()
    sim = ClusterSim(s, config(s), pipeline, handoff)
    assert sim.pipeline_policy is pipeline and sim.handoff_policy is handoff
    reqs = [req(i, 0.1 * i, 20_000, 400, range(i * 100, i * 100 + 40)) for i in range(4)]
    records = sim.run(reqs)
    assert len(pipeline.calls) == len(reqs)
    # Threshold 0: every transfer counts as slow, so every request is relayed and handed off.
    assert [d.pipeline for _, d in pipeline.calls] == [r.pipeline for r in records]
    assert all(r.pipeline == "P-RLD-MD" for r in records)
    assert handoff.calls >= len(reqs)
    assert pipeline.calls[0][0].kv_bytes_per_token == 1000


def test_simulator_uses_the_shared_policy_classes():
    assert cluster.PipelinePolicy is policy.PipelinePolicy
    assert cluster.HandoffPolicy is policy.HandoffPolicy
    assert cluster.RequestFacts is policy.RequestFacts


def test_router_imports_the_same_policy_module():
    if importlib.util.find_spec("sglang_pdd.router") is None:
        pytest.skip("router package not present in this checkout")
    import pathlib

    import sglang_pdd.router as router

    sources = "".join(p.read_text() for p in pathlib.Path(router.__file__).parent.rglob("*.py"))
    assert "sglang_pdd.policy" in sources


def test_the_simulator_drives_the_routers_handoff_state_machine():
    """Each relayed request's handoff is a RelayedHandoff (the class the router drives) that
    ended with MD taking the final handoff, after RLD's first id (MD needs one it lacks)."""
    from sglang_pdd.handoff.steps import RelayedHandoff

    s = spec("pdd")
    sim = ClusterSim(s, config(s), RecordingPolicy(), RecordingHandoff())
    records = sim.run(
        [req(i, 0.1 * i, 20_000, 400, range(i * 100, i * 100 + 40)) for i in range(4)]
    )
    assert all(r.pipeline == "P-RLD-MD" for r in records)
    for r in records:
        assert isinstance(r.handoff, RelayedHandoff) and r.handoff.done, r
        assert r.handoff.mode == "one-shot" and r.relay_tokens == r.handoff.handed >= 1
        assert r.relay_tokens + r.main_tokens == r.output_tokens


def test_router_and_simulator_plan_through_one_function(monkeypatch):
    """Both call ``policy.placement.place``; the simulator at each arrival, with the router's
    moving averages, and it then uses the instances the plan named."""
    import asyncio

    from sglang_pdd.policy import placement
    from sglang_pdd.router.config import MainEndpoint, RouterConfig
    from sglang_pdd.router.state import RouterState

    calls = []
    real = placement.place

    def spy(snapshot, *args):
        chosen = real(snapshot, *args)
        calls.append((snapshot, chosen))
        return chosen

    monkeypatch.setattr(placement, "place", spy)
    s = spec("pdd", prefill=2, decode=2, relay=2)
    sim = ClusterSim(s, config(s))
    reqs = [req(i, 0.05 * i, 20_000, 400, range(i * 100, i * 100 + 40)) for i in range(6)]
    records = sim.run(reqs)
    assert len(calls) == len(reqs)
    assert calls[0][0].prefill_s == placement.PREFILL_PRIOR_S  # nothing learned before
    assert sim.prefill_estimate.value != placement.PREFILL_PRIOR_S  # relayed first tokens taught it
    for rec, (_, chosen) in zip(records, calls, strict=True):
        assert rec.placement is chosen and rec.pipeline == chosen.decision.pipeline
        assert str(rec.prefill_idx) == chosen.prefill and str(rec.relay_idx) == chosen.relay
        assert str(rec.main_idx) == chosen.main
    assert len({c.prefill for _, c in calls}) == 2  # spread over both P (round-robin, load)

    async def route():
        state = RouterState(
            RouterConfig(
                prefill=("http://p0:1",),
                relay=("http://r0:1",),
                main=(MainEndpoint("http://m0:1", "tcp://127.0.0.1:1"),),
            )
        )
        state.kv_bytes_per_token = 512
        return state.route(list(range(300)), 64)

    routed = asyncio.run(route())
    snap, chosen = calls[-1]
    assert (routed.decision, routed.prefill, routed.relay, routed.main.url) == (
        chosen.decision,
        chosen.prefill,
        chosen.relay,
        chosen.main,
    )
    assert snap.prefill_s == placement.PREFILL_PRIOR_S


def test_the_simulator_learns_rld_and_md_paces_and_plans_with_their_ratio():
    """As the router: each finished request teaches RLD's and MD's seconds per id, and later
    plans value RLD's head start with their ratio (``placement.pace_ratio``)."""
    # A slow link (0.1 Gbit/s: 20,000 tokens' KV take 1.6 s) so that RLD makes tens of ids.
    s = spec("pdd", wan=LinkConfig(bandwidth_gbps=0.1, rtt_s=0.01, cost_per_gbps_hour=0.0))
    pipeline = RecordingPolicy()
    seen = []
    original = pipeline.decide

    def decide(facts, link, relay_load=0.0, **estimates):
        seen.append(estimates["pace_ratio"])
        return original(facts, link, relay_load, **estimates)

    pipeline.decide = decide
    sim = ClusterSim(s, config(s), pipeline, RecordingHandoff())
    # 60 s apart: each request has finished (taught both paces) before the next is planned.
    reqs = [req(i, 60.0 * i, 20_000, 400, range(i * 100, i * 100 + 40)) for i in range(3)]
    sim.run(reqs)
    relay, main = sim.relay_itl_estimate.value, sim.main_itl_estimate.value
    assert relay is not None and relay > 0 and main is not None and main > 0
    assert seen[0] == 1.0  # nothing measured before the first request
    assert seen[-1] != 1.0 and seen[-1] == pytest.approx(pace_ratio(main, relay), rel=0.5)
