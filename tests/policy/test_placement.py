"""``policy.placement.place``: the one choice of pipeline and instances (pure: no servers)."""

import math

import pytest

from sglang_pdd.policy import LinkEstimate, PipelinePolicy, PipelinePolicyConfig
from sglang_pdd.policy.placement import (
    SMOOTHING,
    ClusterSnapshot,
    MainCandidate,
    MovingAverage,
    PrefillCandidate,
    RelayCandidate,
    place,
)

IDLE = LinkEstimate(1e6, 0.1)  # 8 Mbit/s, 100 ms
BUSY = LinkEstimate(1e6, 0.1, backlog_bytes=4e6)  # 4 s queued ahead
POLICY = PipelinePolicy(PipelinePolicyConfig(ttft_slo_s=0.5))


def snapshot(prefills=None, relays=None, mains=None, **kw) -> ClusterSnapshot:
    return ClusterSnapshot(
        prefills=prefills if prefills is not None else (PrefillCandidate("p0", 0, 0),),
        relays=relays if relays is not None else (RelayCandidate("r0", 0.0),),
        mains=mains if mains is not None else (MainCandidate("m0", 0, IDLE, 0),),
        prefill_s=kw.pop("prefill_s", 0.05),
        handoff_gap_s=kw.pop("handoff_gap_s", 0.1),
        kv_bytes_per_token=kw.pop("kv_bytes_per_token", 100),
        **kw,
    )


@pytest.mark.parametrize(
    ("mains", "chosen"),
    [
        # The cache hit first, even behind a busier link and more requests.
        ((MainCandidate("m0", 0, IDLE, 0), MainCandidate("m1", 512, BUSY, 9)), "m1"),
        # Equal hits: the one whose KV would be ready first.
        ((MainCandidate("m0", 0, BUSY, 0), MainCandidate("m1", 0, IDLE, 5)), "m1"),
        # Equal hits and links: the one serving fewer requests.
        ((MainCandidate("m0", 0, IDLE, 3), MainCandidate("m1", 0, IDLE, 1)), "m1"),
        # All equal: the first listed.
        ((MainCandidate("m0", 0, IDLE, 1), MainCandidate("m1", 0, IDLE, 1)), "m0"),
    ],
)
def test_main_decode_by_cache_hit_then_readiness_then_load(mains, chosen):
    assert place(snapshot(mains=mains), 1000, 64, POLICY).main == chosen


def test_prefill_by_prefix_hit_then_load_then_round_robin():
    hit = (PrefillCandidate("p0", 0, 0), PrefillCandidate("p1", 256, 7))
    assert place(snapshot(prefills=hit), 1000, 64, POLICY).prefill == "p1"
    idle = (PrefillCandidate("p0", 0, 2), PrefillCandidate("p1", 0, 1))
    assert place(snapshot(prefills=idle), 1000, 64, POLICY).prefill == "p1"
    equal = (PrefillCandidate("p0", 0, 0), PrefillCandidate("p1", 0, 0))
    chosen = [place(snapshot(prefills=equal, turn=t), 1000, 64, POLICY).prefill for t in range(4)]
    assert chosen == ["p0", "p1", "p0", "p1"]


def test_relay_least_loaded_round_robin_among_equals():
    loads = (RelayCandidate("r0", 0.9), RelayCandidate("r1", 0.1), RelayCandidate("r2", 0.1))
    chosen = {place(snapshot(relays=loads, turn=t), 1000, 64, POLICY).relay for t in range(6)}
    assert chosen == {"r1", "r2"}


def test_the_pipeline_weighs_the_chosen_mains_link_and_the_least_busy_relay():
    # 1000 uncached tokens x 100 B at 1 MB/s: 0.1 s + RTT + prefill is within 0.5 s ...
    assert place(snapshot(), 1000, 64, POLICY).decision.pipeline == "P-MD"
    # ... behind 4 s of backlog it is not: RLD streams first.
    slow = snapshot(mains=(MainCandidate("m0", 0, BUSY, 0),))
    assert place(slow, 1000, 64, POLICY).decision.pipeline == "P-RLD-MD"
    # Every RLD full: relaying would only queue the request, so it goes P-MD.
    full = snapshot(mains=(MainCandidate("m0", 0, BUSY, 0),), relays=(RelayCandidate("r", 1.0),))
    assert place(full, 1000, 64, POLICY).decision.rule == "relay_busy"
    # The relative objective (no SLO) compares the KV's wait with the handoff gap given.
    relative = PipelinePolicy(PipelinePolicyConfig())
    assert place(snapshot(handoff_gap_s=0.05), 1000, 64, relative).decision.pipeline == "P-RLD-MD"
    assert place(snapshot(handoff_gap_s=5.0), 1000, 64, relative).decision.pipeline == "P-MD"


def test_failover_without_main_or_relay_decode():
    no_main = place(snapshot(mains=()), 1000, 64, POLICY)
    assert (no_main.decision.pipeline, no_main.decision.rule, no_main.main) == (
        "P-RLD",
        "failover",
        None,
    )
    assert math.isinf(no_main.decision.est_main_ready_s)
    slow = (MainCandidate("m0", 0, BUSY, 0),)
    no_relay = place(snapshot(mains=slow, relays=()), 1000, 64, POLICY)
    assert (no_relay.decision.pipeline, no_relay.decision.rule, no_relay.relay) == (
        "P-MD",
        "failover",
        None,
    )
    assert no_relay.decision.reason.startswith("no Relay-Decode left")
    with pytest.raises(ValueError, match="no instance left"):
        place(snapshot(prefills=()), 1000, 64, POLICY)
    with pytest.raises(ValueError, match="no instance left"):
        place(snapshot(mains=(), relays=()), 1000, 64, POLICY)


def test_moving_average_starts_at_its_prior_or_first_sample():
    prior = MovingAverage(1.0)
    prior.note(2.0)
    assert prior.value == pytest.approx(1.0 + SMOOTHING)
    first = MovingAverage()
    assert first.value is None
    first.note(3.0)
    assert first.value == 3.0


def test_the_pace_ratio_is_mds_seconds_per_id_over_rlds_within_bounds():
    from sglang_pdd.policy.placement import PACE_RATIO_BOUNDS, pace_ratio

    assert pace_ratio(None, 0.01) == pace_ratio(0.01, None) == pace_ratio(0.0, 0.01) == 1.0
    assert pace_ratio(0.005, 0.010) == pytest.approx(0.5)
    assert pace_ratio(0.001, 1.0) == PACE_RATIO_BOUNDS[0]
    assert pace_ratio(1.0, 0.001) == PACE_RATIO_BOUNDS[1]


def test_the_snapshots_pace_ratio_reaches_the_relative_objective():
    """A relay that pays at equal paces does not once RLD is four times slower than MD."""
    relative = PipelinePolicy(PipelinePolicyConfig())
    equal = place(snapshot(handoff_gap_s=0.2), 1000, 64, relative)
    slow_relay = place(snapshot(handoff_gap_s=0.2, pace_ratio=0.25), 1000, 64, relative)
    assert (equal.decision.pipeline, slow_relay.decision.pipeline) == ("P-RLD-MD", "P-MD")


def test_the_chosen_prefills_backlog_reaches_the_policy():
    """The backlog that counts is the one of the P the request will wait for (the best hit),
    not the least busy P's."""
    sharing = PipelinePolicy(PipelinePolicyConfig(ttft_slo_s=0.1, relay_shares_prefill=True))
    busy_hit = (PrefillCandidate("p0", 0, 0, 0.0), PrefillCandidate("p1", 512, 0, 3.0))
    chosen = place(snapshot(prefills=busy_hit), 1000, 64, sharing)
    assert (chosen.prefill, chosen.decision.pipeline, chosen.decision.rule) == (
        "p1",
        "P-MD",
        "prefill_busy",
    )
    idle_hit = (PrefillCandidate("p0", 0, 0, 3.0), PrefillCandidate("p1", 512, 0, 0.0))
    chosen = place(snapshot(prefills=idle_hit), 1000, 64, sharing)
    assert (chosen.prefill, chosen.decision.pipeline) == ("p1", "P-RLD-MD")
