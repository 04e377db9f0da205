"""A Main-Decode with a small KV pool under more relayed requests and handoffs than it holds:
no scheduler dies, every request completes equal to the co-located server, KV returns to idle
(issue 9)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from sglang_pdd.testbed.client import generate, wait_router_settled
from tests.e2e.prompts import varied_prompts
from tests.e2e.test_pdd_cluster import _loads, _wait_idle

pytestmark = pytest.mark.servers
POOL_TOKENS = 4096  # a few prompts' KV plus SGLang's 512-token reserve per active request


@pytest.fixture(scope="module")
def small_main_router(server_group, pdd_cluster):
    from sglang_pdd.testbed.cluster import add_main_decode, start_router

    small = add_main_decode(server_group, pdd_cluster, "main-small", max_total_tokens=POOL_TOKENS)
    router = start_router(server_group, pdd_cluster, name="router-small-main", mains=[small])
    yield router, small
    # The session's servers must fit a 24 GB machine: this module's two go when it ends.
    router.stop()
    small.server.stop()


def test_small_main_decode_serves_more_than_it_holds(small_main_router, colocated):
    router, small = small_main_router
    prompts = varied_prompts(10, seed=43)
    bodies = [{"text": p, "sampling_params": {"temperature": 0.0, "ignore_eos": True,
                                              "max_new_tokens": 120 + 20 * (i % 4)}}
              for i, p in enumerate(prompts)]  # fmt: skip
    expected = [generate(colocated.url, body).output_ids for body in bodies]
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
    assert small.server.proc.poll() is None, "Main-Decode died"
    load = _wait_idle(small.server.url)
    assert load["num_running_reqs"] == 0, load
    assert requests.post(small.server.url + "/flush_cache", timeout=30).status_code == 200
    assert _loads(small.server.url)["num_used_tokens"] == 0
