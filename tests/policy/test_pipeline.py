"""Pipeline choice: thresholds, relay switch, anomalous-traffic filter, validation."""

import math

import pytest

from sglang_pdd.policy import (
    LinkEstimate,
    PipelinePolicy,
    PipelinePolicyConfig,
    RequestFacts,
)

KV = 50_000
LINK = LinkEstimate(bandwidth_bytes_per_s=1e9, rtt_s=0.02)


def facts(inp, cached, out=256):
    return RequestFacts(inp, cached, out, KV)


SLO_1S = PipelinePolicy(PipelinePolicyConfig(ttft_slo_s=1.0))


def test_high_hit_goes_straight_to_md():
    d = SLO_1S.decide(facts(64_000, 60_000), LINK)
    assert d.pipeline == "P-MD"
    assert d.wan_bytes == 4_000 * KV
    assert d.est_main_ready_s == pytest.approx(0.02 + 4_000 * KV / 1e9)


def test_low_hit_goes_through_relay():
    d = PipelinePolicy().decide(facts(64_000, 0), LINK)
    assert d.pipeline == "P-RLD-MD"
    assert d.wan_bytes == 64_000 * KV
    assert d.est_main_ready_s > 1.0


def test_backlog_counts_toward_estimate():
    busy = LinkEstimate(1e9, 0.02, backlog_bytes=2e9)
    assert PipelinePolicy().decide(facts(64_000, 60_000), busy).pipeline == "P-RLD-MD"


def test_relay_disabled_is_plain_cross_dc_pd():
    policy = PipelinePolicy(PipelinePolicyConfig(enable_relay=False))
    assert policy.decide(facts(64_000, 0, out=4), LINK).pipeline == "P-MD"


def test_anomalous_long_input_short_output_finishes_on_relay():
    d = PipelinePolicy().decide(facts(64_000, 0, out=8), LINK)
    assert d.pipeline == "P-RLD"
    assert d.wan_bytes == 0
    assert math.isinf(d.est_main_ready_s)


def test_anomaly_filter_leaves_fast_transfers_alone():
    assert SLO_1S.decide(facts(64_000, 63_900, out=8), LINK).pipeline == "P-MD"


def test_anomaly_filter_can_be_disabled():
    policy = PipelinePolicy(PipelinePolicyConfig(enable_anomaly_filter=False))
    assert policy.decide(facts(64_000, 0, out=8), LINK).pipeline == "P-RLD-MD"


def test_saturated_relay_sends_slow_requests_straight_to_md():
    policy = PipelinePolicy(PipelinePolicyConfig(max_relay_load=0.9))
    assert policy.decide(facts(64_000, 0), LINK, relay_load=0.5).pipeline == "P-RLD-MD"
    busy = policy.decide(facts(64_000, 0, out=8), LINK, relay_load=0.95)
    assert busy.pipeline == "P-MD" and "RLD load" in busy.reason
    with pytest.raises(ValueError, match="relay_load"):
        policy.decide(facts(64_000, 0), LINK, relay_load=-1)


def test_cached_beyond_input_is_capped():
    assert facts(1000, 1024).uncached_tokens == 0


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"ttft_slo_s": -1.0}, "ttft_slo_s"),
        ({"ttft_slo_s": float("nan")}, "ttft_slo_s"),
        ({"enable_relay": "yes"}, "enable_relay"),
        ({"anomaly_min_input_tokens": 0}, "anomaly_min_input_tokens"),
        ({"anomaly_max_output_tokens": -3}, "anomaly_max_output_tokens"),
        ({"max_relay_load": 0.0}, "max_relay_load"),
        ({"relay_shares_prefill": 1}, "relay_shares_prefill"),
        ({"prefill_backlog_limit_s": -0.1}, "prefill_backlog_limit_s"),
        ({"prefill_backlog_limit_s": float("inf")}, "prefill_backlog_limit_s"),
        ({"prefill_backlog_window_s": -1.0}, "prefill_backlog_window_s"),
        ({"prefill_backlog_window_s": float("nan")}, "prefill_backlog_window_s"),
        ({"prefill_backlog_window_s": 61.0}, "prefill_backlog_window_s"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        PipelinePolicyConfig(**kwargs)


def test_link_and_facts_validate():
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        LinkEstimate(0.0, 0.01)
    with pytest.raises(ValueError, match="input_tokens"):
        RequestFacts(-1, 0, 1, KV)


def test_slo_compares_prefill_plus_live_link_and_explains_it():
    policy = PipelinePolicy(PipelinePolicyConfig(ttft_slo_s=0.5))
    link = LinkEstimate(1e6, 0.2, backlog_bytes=0)
    fast = policy.decide(facts(1000, 900, out=300), LinkEstimate(1e6, 0.2), prefill_s=0.1)
    # 100 tokens x 50 kB = 5 MB at 1 MB/s: 5 s + 0.2 s + 0.1 s prefill
    assert fast.pipeline == "P-RLD-MD"
    assert fast.est_main_ready_s == pytest.approx(0.1 + 0.2 + 5.0)
    assert fast.rule == "over_slo" and "SLO 0.5s" in fast.reason and "5000 kB" in fast.reason
    tiny = policy.decide(RequestFacts(1000, 999, 300, 1000), link, prefill_s=0.1)
    assert tiny.pipeline == "P-MD" and tiny.rule == "within_slo"
    # The same request behind 1 MB already queued on the link misses the objective.
    queued = policy.decide(
        RequestFacts(1000, 999, 300, 1000), LinkEstimate(1e6, 0.2, backlog_bytes=1e6), prefill_s=0.1
    )
    assert queued.pipeline == "P-RLD-MD" and "behind 1000 kB" in queued.reason


def test_prefill_estimate_is_validated():
    with pytest.raises(ValueError, match="prefill_s"):
        PipelinePolicy().decide(facts(10, 0), LINK, prefill_s=float("nan"))


def test_by_default_a_request_relays_when_its_kv_wait_outlasts_a_handoff():
    """The relative objective: relay when the KV's wait on the link (0.22 s here) exceeds what
    a handoff costs the client; then RLD's ids during the wait outweigh the switch."""
    policy = PipelinePolicy()
    request = facts(64_000, 60_000)
    assert policy.decide(request, LINK, handoff_gap_s=0.1).pipeline == "P-RLD-MD"
    d = policy.decide(request, LINK, handoff_gap_s=0.5, prefill_s=3.0)
    assert d.pipeline == "P-MD" and "handoff gap 0.50s" in d.reason  # the prefill counts not
    assert policy.decide(request, LINK).pipeline == "P-RLD-MD"  # no gap measured: the RTT
    with pytest.raises(ValueError, match="handoff_gap_s"):
        policy.decide(request, LINK, handoff_gap_s=float("nan"))


@pytest.mark.parametrize(
    "gap_s, pace_ratio, pipeline",
    [
        # KV wait 0.22 s + half the 0.02 s RTT = 0.23 s of RLD ids before MD's "ready" arrives.
        (0.20, 1.0, "P-RLD-MD"),  # worth 0.23 s of MD's time: more than the 0.20 s gap
        (0.225, 1.0, "P-RLD-MD"),  # the half RTT counts: the wait alone (0.22 s) would not
        (0.20, 0.5, "P-MD"),  # RLD twice as slow as MD: its ids are worth 0.115 s
        (0.10, 0.5, "P-RLD-MD"),
        (0.40, 2.0, "P-RLD-MD"),  # MD slower than RLD: RLD's ids are worth more
        (0.50, 2.0, "P-MD"),
    ],
)
def test_rlds_head_start_is_valued_in_mds_time(gap_s, pace_ratio, pipeline):
    """The relative objective weighs what relaying changes in the whole answer: RLD's ids made
    until the router learns MD's KV landed, each worth MD's time per id, against the gap."""
    d = PipelinePolicy().decide(
        facts(64_000, 60_000), LINK, handoff_gap_s=gap_s, pace_ratio=pace_ratio
    )
    assert d.pipeline == pipeline, d.reason
    assert f"x{pace_ratio:.2f} MD/RLD" in d.reason


def test_pace_ratio_is_validated():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="pace_ratio"):
            PipelinePolicy().decide(facts(10, 0), LINK, pace_ratio=bad)


@pytest.mark.parametrize(
    "shares, slo, backlog_s, pipeline",
    [
        (True, None, 0.6, "P-MD"),  # P has more than 0.5 s queued: RLD would slow it
        (True, None, 0.5, "P-RLD-MD"),  # at the limit: relaying goes on
        (True, None, 0.0, "P-RLD-MD"),
        (False, None, 30.0, "P-RLD-MD"),  # RLD on chips of its own costs P nothing
        (True, 0.0, 30.0, "P-RLD-MD"),  # --ttft-slo-s 0 relays every request
        (True, 1.0, 30.0, "P-MD"),
    ],
)
def test_a_relay_on_prefills_hardware_yields_while_prefills_wait(shares, slo, backlog_s, pipeline):
    """RLD decoding on P's cores takes compute from the prefills queued there (the sweep's 7
    sessions: P's prefills took 7-14 s while RLD decoded); a request that P makes wait gains
    nothing from RLD's head start that the others do not pay for."""
    policy = PipelinePolicy(PipelinePolicyConfig(ttft_slo_s=slo, relay_shares_prefill=shares))
    d = policy.decide(facts(64_000, 0), LINK, handoff_gap_s=0.1, prefill_backlog_s=backlog_s)
    assert d.pipeline == pipeline, d.reason
    if pipeline == "P-MD":
        assert d.rule == "prefill_busy" and f"{backlog_s:.2f}s of prefill queued" in d.reason
    with pytest.raises(ValueError, match="prefill_backlog_s"):
        policy.decide(facts(10, 0), LINK, prefill_backlog_s=float("nan"))
