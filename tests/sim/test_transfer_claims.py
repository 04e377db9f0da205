"""PDD's transfer claims (``ClusterSpec.transfer_claims``) and Prefill's backlog as the router
reads it (``PrefillInstance.backlog_s``)."""

from __future__ import annotations

import dataclasses

import pytest
import simpy

from sglang_pdd.policy import PipelinePolicyConfig
from sglang_pdd.sim.chips import InstancePerf
from sglang_pdd.sim.instances import PrefillInstance
from sglang_pdd.sim.link import LinkConfig
from sglang_pdd.sim.runner import run_contender
from tests.sim.helpers import CHIP, ENGINE, MODEL, config, req, spec

BT = 512  # the config's prefix block
SHARED = list(range(10))  # ten blocks both prompts start with
MAIN_ONLY = PipelinePolicyConfig(ttft_slo_s=1e6)  # MD's first token is always in time: P-MD
RELAY_ALL = PipelinePolicyConfig(ttft_slo_s=0.0)  # P-RLD-MD
# 1e7 bytes/s: the first prompt's 5 MB of KV take 0.5 s, longer than the second's prefill.
SLOW_WAN = LinkConfig(bandwidth_gbps=0.08, rtt_s=0.01, jitter_s=0.0)


def _pair(pipeline: PipelinePolicyConfig, claims: bool):
    s = spec("pdd", pipeline=pipeline, transfer_claims=claims, wan=SLOW_WAN)
    reqs = [req(0, 0.0, 10 * BT, 4, SHARED), req(1, 0.05, 12 * BT, 4, SHARED + [100, 101])]
    _, recs = run_contender(s, config(s), reqs)
    return recs


def test_a_main_only_request_waits_for_the_transfer_carrying_its_prefix():
    first, second = _pair(MAIN_ONLY, claims=True)
    assert (first.pipeline, second.pipeline) == ("P-MD", "P-MD")
    # Its prefill starts once the first request's KV has landed on MD ...
    assert second.prefill_done_s > first.main_kv_s
    # ... and only what MD lacks then crosses.
    assert second.decode_hit_tokens == 10 * BT
    assert second.wan_bytes == 2 * BT * MODEL.kv_bytes_per_token


def test_without_claims_both_send_the_shared_prefix():
    first, second = _pair(MAIN_ONLY, claims=False)
    # Queued behind the first prefill only (toy chip: 2e-5 s a token).
    assert second.prefill_done_s == pytest.approx((10 + 12) * BT * 2e-5)
    assert second.wan_bytes == 12 * BT * MODEL.kv_bytes_per_token


def test_a_relayed_request_streams_at_once_and_sends_to_md_after_the_claim():
    first, second = _pair(RELAY_ALL, claims=True)
    assert (first.pipeline, second.pipeline) == ("P-RLD-MD", "P-RLD-MD")
    # RLD's side did not wait; MD's did, for the first transfer, then sent the rest.
    assert second.prefill_done_s == pytest.approx((10 + 12) * BT * 2e-5)
    assert second.first_token_s < first.main_kv_s
    assert second.main_kv_s == pytest.approx(first.main_kv_s + 0.01 + 2 * BT * 1000 / 1e7)
    assert second.wan_bytes == 2 * BT * MODEL.kv_bytes_per_token
    assert second.done_s > 0 and second.completions == 1


def test_the_backlog_is_the_queue_over_the_rate_prefilled_at():
    env = simpy.Environment()
    engine = dataclasses.replace(ENGINE, chunk_tokens=1000)
    p = PrefillInstance(env, InstancePerf(CHIP, MODEL, engine), "P")
    p.submit(0, 5000, 0, lambda *_: None)
    assert p.backlog_s() == 0.0  # no rate measured yet
    env.run(until=0.05)  # two forwards of 1000 tokens done (0.02 s each), a third running
    assert p.tokens_done == 2000
    # Busy time is counted as each forward starts: 0.06 s for the 2000 tokens.
    assert p.backlog_s() == pytest.approx(3000 * 0.06 / 2000)


def test_relaying_yields_to_a_prefill_queue_when_rld_shares_p():
    pipeline = PipelinePolicyConfig(
        ttft_slo_s=1e-9, relay_shares_prefill=True, prefill_backlog_limit_s=0.01
    )
    s = spec("pdd", pipeline=pipeline)
    engine = dataclasses.replace(ENGINE, chunk_tokens=1000)
    cfg = dataclasses.replace(config(s), engine=engine)
    reqs = [req(0, 0.0, 10 * BT, 4, range(10)), req(1, 0.05, 2 * BT, 4, [50, 51])]
    _, (first, second) = run_contender(s, cfg, reqs)
    assert first.pipeline == "P-RLD-MD"
    assert second.pipeline == "P-MD" and second.placement.decision.rule == "prefill_busy"
