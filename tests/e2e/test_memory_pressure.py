"""A Main-Decode with a small KV pool under more relayed requests and handoffs than it holds:
no scheduler dies, every request completes equal to the co-located server, KV returns to idle;
a final handoff with no room is deferred while Relay-Decode serves on.

The small MD estimates each request's future growth as 64 tokens
(``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``), so SGLang admits more transfers than the pool holds
once they all grow: the handoffs, not SGLang's admission, meet the shortage."""

from __future__ import annotations

import random
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from sglang_pdd.testbed.client import generate, generate_all, wait_router_settled
from sglang_pdd.testbed.held_links import wait_for_record
from tests.e2e.prompts import varied_prompts
from tests.e2e.test_pdd_cluster import _loads, _wait_idle

pytestmark = pytest.mark.servers
POOL_TOKENS = 4096  # a few prompts' KV plus SGLang's 512-token reserve per active request


@pytest.fixture(scope="module")
def small_main_router(server_group, pdd_cluster):
    from sglang_pdd.testbed.cluster import add_main_decode, start_router

    small = add_main_decode(
        server_group,
        pdd_cluster,
        "main-small",
        max_total_tokens=POOL_TOKENS,
        env={"SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "64"},
    )
    router = start_router(server_group, pdd_cluster, name="router-small-main", mains=[small])
    yield router, small
    # The session's servers must fit a 24 GB machine: this module's two go when it ends.
    server_group.stop_named("router-small-main", "main-small")


def test_small_main_decode_serves_more_than_it_holds(small_main_router, colocated):
    router, small = small_main_router
    prompts = varied_prompts(10, seed=43)
    bodies = [
        {
            "text": p,
            "sampling_params": {
                "temperature": 0.0,
                "ignore_eos": True,
                "max_new_tokens": 120 + 20 * (i % 4),
            },
        }
        for i, p in enumerate(prompts)
    ]
    expected = [r.output_ids for r in generate_all(colocated.url, bodies)]
    prompt_tokens = 0
    for _ in range(2):  # two rounds: the second also meets a warm, full radix cache
        with ThreadPoolExecutor(len(bodies)) as pool:
            results = list(pool.map(lambda b: generate(router.url, b), bodies))
        for result, want in zip(results, expected, strict=True):
            assert result.status == 200, result.body
            assert result.output_ids == want
            prompt_tokens += result.body["meta_info"]["prompt_tokens"]
    assert prompt_tokens > 2 * POOL_TOKENS  # the demand really exceeded the pool
    wait_router_settled(router.url)
    _assert_idle(small)


def _assert_idle(small) -> None:
    assert small.server.proc.poll() is None, "Main-Decode died"
    load = _wait_idle(small.server.url)
    assert load["num_running_reqs"] == 0, load
    assert requests.post(small.server.url + "/flush_cache", timeout=30).status_code == 200
    assert _loads(small.server.url)["num_used_tokens"] == 0


def test_a_final_handoff_without_room_is_deferred_while_relay_decode_serves(
    small_main_router, server_group, colocated
):
    """Three requests park on MD (500-token prompts) while MD's control link is stalled, until
    RLD has streamed 900 ids of each; then their final handoffs meet a pool that holds two:
    3 x (500 + 900) > 4096. When they reach MD together the third is deferred: RLD keeps
    streaming it and the router hands it off again later (or it finishes on RLD). Every output
    equals the co-located server's, and MD ends idle."""
    router, small = small_main_router
    _assert_idle(small)  # also empties MD's radix cache: free memory is exactly the pool's
    control = next(s for s in server_group.servers if s.name == "wan-control-main-small")
    rng = random.Random(45)
    bodies = [
        {
            "input_ids": [rng.randrange(10, 250) for _ in range(500)],
            "rid": f"defer-{i}-{uuid.uuid4().hex[:6]}",
            "sampling_params": {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 1200},
        }
        for i in range(3)
    ]
    references = generate_all(
        colocated.url, [{k: v for k, v in b.items() if k != "rid"} for b in bodies]
    )
    expected = [r.output_ids for r in references]
    control.pause()  # MD's "ready" waits: every request stays on RLD, parked on MD
    try:
        with ThreadPoolExecutor(len(bodies)) as pool:
            futures = [
                pool.submit(generate, router.url, b, i % 2 == 1) for i, b in enumerate(bodies)
            ]
            for body, future in zip(bodies, futures, strict=True):
                wait_for_record(
                    router.url,
                    body["rid"],
                    future,
                    lambda r: r["relay_tokens"] >= 900,
                    "900 ids from Relay-Decode",
                )
            control.resume()
            results = [f.result(timeout=600) for f in futures]
    finally:
        control.resume()
    records = []
    for result, want in zip(results, expected, strict=True):
        assert result.status == 200, result.body
        assert result.output_ids == want
        records.append(result.body["meta_info"]["pdd"])
    # Whether a handoff is deferred here depends on the machine's speed (the three final
    # handoffs must reach MD together): CI saw runs with one deferral and runs with none. The
    # deferral itself is covered without timing by tests/main_decode/test_handoff_admission.py,
    # test_control_ownership.py (MD's side) and tests/policy/test_handoff_state.py (the
    # router's); this run shows that whatever happens, outputs match and MD ends idle.
    wait_router_settled(router.url)
    _assert_idle(small)
