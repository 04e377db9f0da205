"""``RouterState.route``: which P, RLD and MD a request goes to (no servers: pure state)."""

import asyncio

import pytest

from sglang_pdd.policy import PipelinePolicyConfig
from sglang_pdd.router.config import MainEndpoint, RouterConfig
from sglang_pdd.router.state import RouterState

P = ("http://p0:1", "http://p1:1")
RLD = ("http://r0:1", "http://r1:1")
MD = (
    MainEndpoint("http://m0:1", "tcp://127.0.0.1:1"),
    MainEndpoint("http://m1:1", "tcp://127.0.0.1:2"),
)


@pytest.fixture
def state():
    async def build():  # zmq.asyncio sockets want a running loop
        s = RouterState(
            RouterConfig(
                prefill=P,
                relay=RLD,
                main=MD,
                pipeline=PipelinePolicyConfig(ttft_slo_s=0.5),
                wan_bandwidth_mbps=8.0,
            )
        )
        s.kv_bytes_per_token = 512
        return s

    return asyncio.run(build())


def test_md_with_the_prompt_cached_wins_then_the_least_busy(state):
    ids = list(range(1000))
    state.mains["http://m1:1"].confirm_cached(ids)
    routed = state.route(ids + [7] * 20, 64)
    assert routed.main.url == "http://m1:1" and routed.main_plan.cached_tokens >= 992
    # A cold prompt: both MDs would be equally late; the one serving fewer requests wins.
    state.mains["http://m0:1"].active = 3
    assert state.route([5] * 800, 64).main.url == "http://m1:1"
    state.mains["http://m0:1"].active, state.mains["http://m1:1"].active = 0, 2
    assert state.route([6] * 800, 64).main.url == "http://m0:1"


def test_prefill_by_prefix_hit_then_load_and_relay_by_load(state):
    ids = list(range(500))
    first_p = state.route(ids, 64).prefill
    state.prefill_active[first_p] = 5  # busy, but it holds the prefix
    assert state.route(ids + [1, 2, 3], 64).prefill == first_p
    other = next(u for u in P if u != first_p)
    assert state.route([9] * 300, 64).prefill == other  # nothing cached anywhere: the idle one
    state.relay_loads.update({RLD[0]: 0.9, RLD[1]: 0.1})
    assert {state.route([8] * 100, 64).relay for _ in range(4)} == {RLD[1]}


def test_decision_reason_names_the_estimates(state):
    decision = state.route(list(range(3000)), 64).decision
    assert decision.pipeline == "P-RLD-MD" and decision.rule == "over_slo"
    assert "1536 kB" in decision.reason and "SLO 0.5s" in decision.reason


def test_md_reports_stand_in_until_its_kv_events_arrive():
    async def run():
        from sglang_pdd.router.instances.main_site import MainSite
        from sglang_pdd.transfer.link_model import LinkModelConfig
        from sglang_pdd.wire.messages import Ready

        site = MainSite(
            MainEndpoint("http://m:1", "tcp://127.0.0.1:1", "tcp://127.0.0.1:3"),
            LinkModelConfig(1e6, 0.1),
            16,
            1 << 12,
        )
        ids = list(range(640))
        from sglang_pdd.cache.prefix_blocks import block_hashes

        site.transfers.start("r.pdd-relayed", block_hashes(ids, 16), 0, 640 * 512, now=0.0)
        assert site.cached_tokens(ids) == 0  # no KV event yet, nothing reported
        site._on_event(Ready(rid="r.pdd-relayed", t=0.0, cached_tokens=0, kv_bytes=640 * 512))
        assert site.cached_tokens(ids + [1, 2]) == 640  # MD's own report, before its events
        site.subscriber.view.apply({"type": "AllBlocksCleared"})
        assert site.cached_tokens(ids) == 0  # a flush drops the reports too
        await site.close()

    asyncio.run(run())


def test_failed_instances_are_avoided_down_to_what_is_left(state):
    ids = list(range(3000))  # over the SLO: P-RLD-MD when everything is up
    failed = frozenset({"http://m0:1", RLD[0], P[0]})
    for _ in range(4):
        r = state.route(ids, 64, failed)
        assert (r.prefill, r.relay, r.main.url, r.decision.pipeline) == (
            P[1],
            RLD[1],
            "http://m1:1",
            "P-RLD-MD",
        )
    # No Main-Decode left: Relay-Decode finishes the request.
    r = state.route(ids, 64, frozenset({"http://m0:1", "http://m1:1"}))
    assert (r.decision.pipeline, r.decision.rule, r.main_plan) == ("P-RLD", "failover", None)
    assert r.relay in RLD
    # No Relay-Decode left: Main-Decode takes the request from P directly.
    r = state.route(ids, 64, frozenset(RLD))
    assert (r.decision.pipeline, r.decision.rule, r.relay) == ("P-MD", "failover", None)
    with pytest.raises(ValueError, match="no instance left"):
        state.route(ids, 64, frozenset(P))


def test_measured_paces_give_the_planner_mds_seconds_per_id_over_rlds(state):
    urls = [m.url for m in MD]
    assert state.pace_ratio(urls) == 1.0  # nothing measured yet
    state.note_relay_itl(0.010)
    assert state.pace_ratio(urls) == 1.0  # MD not measured yet
    state.note_main_itl("http://m0:1", 0.004)
    state.note_main_itl("http://m1:1", 0.006)
    assert state.pace_ratio(urls) == pytest.approx(0.5)  # the MDs' mean over RLD's
    assert state.pace_ratio(["http://m0:1"]) == pytest.approx(0.4)
    decision = state.route(list(range(1000)), 64).decision
    assert "MD/RLD" not in decision.reason  # an SLO is set: the ratio is not used
