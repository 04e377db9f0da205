"""A tensor-parallel Relay-Decode (``--tp-size 2`` on the CPU engine): SGLang's own PD decode at
TP 2, fed by the TP-1 prefill server with head-sliced KV. Through it, a request that stays on
RLD and requests handed off to the cluster's (TP-1) Main-Decode in One-Shot and Catch-Up give
the co-located server's output. Its own module, so that its two ranks never
run beside the TP-2 Main-Decode of test_tensor_parallel.py (CI's memory)."""

from __future__ import annotations

import pytest

from sglang_pdd.testbed.client import generate, wait_router_settled
from sglang_pdd.testbed.held_links import generate_on_relay, generate_with_handoff_at
from tests.e2e.prompts import varied_prompts

pytestmark = pytest.mark.servers


@pytest.fixture(scope="module")
def tp_relay_routers(server_group, tiny_model, pdd_cluster):
    """(links, One-Shot router, Catch-Up router) with a TP-2 Relay-Decode."""
    from sglang_pdd.testbed.cluster import cpu_rank_binding
    from sglang_pdd.testbed.held_links import hold_links, start_held_router
    from sglang_pdd.testbed.launcher import ServerSpec

    cfg = pdd_cluster.config
    (relay,) = server_group.start(
        ServerSpec(
            "relay-tp2",
            role="decode",
            model_path=str(tiny_model),
            dtype=cfg.dtype,
            chunked_prefill_size=cfg.chunked_prefill_size,
            env=(("SGLANG_CPU_OMP_THREADS_BIND", cpu_rank_binding("", 2)),),
            extra_args=("--pdd-role", "relay", "--tp-size", "2", "--pdd-seeded-sampling"),
        )
    )
    site = pdd_cluster.mains[0]
    links = hold_links(server_group, pdd_cluster, site, "relay-tp2", relay_url=relay.url)
    args = (server_group, pdd_cluster, site, links)
    assert relay.log_text().count("role=relay overlap_schedule") == 2, "two TP ranks"
    yield (
        links,
        start_held_router(*args, "router-relay-tp2"),
        start_held_router(
            *args,
            "router-relay-tp2-cu",
            handoff_mode="catch-up",
            catchup_threshold=4,
            catchup_chunk=64,
        ),
    )
    links.release()
    server_group.stop_named(
        "router-relay-tp2", "router-relay-tp2-cu", "held-control-relay-tp2", "relay-tp2"
    )


def test_the_tensor_parallel_relay_decode_serves_and_hands_off_like_colocated(
    tp_relay_routers, colocated
):
    links, one_shot, catch_up = tp_relay_routers
    prompts = varied_prompts(3, seed=157)
    bodies = [
        {
            "text": p,
            "sampling_params": {
                "temperature": 0.0,
                "max_new_tokens": 200,
                "ignore_eos": True,
                "presence_penalty": 0.3 * i,
            },
        }
        for i, p in enumerate(prompts)
    ]
    on_relay = generate_on_relay(one_shot.url, links, bodies[0], stream=True)
    assert on_relay.status == 200, on_relay.body
    assert on_relay.body["meta_info"]["pdd"]["finished_on"] == "relay"
    assert on_relay.output_ids == generate(colocated.url, bodies[0]).output_ids
    for router, body, at, more in ((one_shot, bodies[1], 7, 0), (catch_up, bodies[2], 60, 80)):
        got = generate_with_handoff_at(
            router.url, links, body, stream=False, relay_tokens=at, relay_more=more
        )
        assert got.status == 200, got.body
        record = got.body["meta_info"]["pdd"]
        assert record["finished_on"] == "main" and record["handoff_tokens"] >= at, record
        assert got.output_ids == generate(colocated.url, body).output_ids, record
    for router in (one_shot, catch_up):
        wait_router_settled(router.url)
