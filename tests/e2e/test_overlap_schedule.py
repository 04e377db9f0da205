"""A Main-Decode running SGLang's overlap scheduler (its default on GPUs): the handoff extend is
a batch the overlap loop runs and whose result it processes one iteration late, like any
prefill. Greedy output through PDD equals the co-located server's in One-Shot and Catch-Up,
with sampling options, grammar and under concurrent load."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_pdd.testbed.client import generate, wait_router_settled
from sglang_pdd.testbed.held_links import generate_with_handoff_at
from tests.e2e.prompts import varied_prompts

pytestmark = pytest.mark.servers


@pytest.fixture(scope="module")
def overlap_main(server_group, pdd_cluster):
    """A second Main-Decode, with the overlap scheduler on, behind the emulated WAN."""
    from sglang_pdd.testbed.cluster import add_main_decode

    site = add_main_decode(server_group, pdd_cluster, "main-overlap", overlap_schedule=True)
    yield site
    server_group.stop_named("main-overlap")


@pytest.fixture(scope="module")
def overlap_links(server_group, pdd_cluster, overlap_main):
    """A gate to the cluster's RLD and a stallable link to the overlap MD's control socket."""
    from sglang_pdd.testbed.held_links import hold_links

    links = hold_links(server_group, pdd_cluster, overlap_main, "overlap")
    yield links
    links.release()
    server_group.stop_named("held-control-overlap")


@pytest.fixture(scope="module")
def overlap_routers(server_group, pdd_cluster, overlap_main, overlap_links):
    """(One-Shot router, Catch-Up router) over the overlap MD's held links."""
    from sglang_pdd.testbed.held_links import start_held_router

    args = (server_group, pdd_cluster, overlap_main, overlap_links)
    routers = (
        start_held_router(*args, "router-overlap"),
        start_held_router(
            *args,
            "router-overlap-cu",
            handoff_mode="catch-up",
            catchup_threshold=4,
            catchup_chunk=64,
        ),
    )
    yield routers
    server_group.stop_named("router-overlap", "router-overlap-cu")


def _greedy(prompt: str, budget: int, **extra) -> dict:
    sampling = {"temperature": 0.0, "max_new_tokens": budget, "ignore_eos": True, **extra}
    return {"text": prompt, "sampling_params": sampling}


def test_the_overlap_main_decode_runs_the_overlap_scheduler(overlap_main):
    """The plugin's marker line reports the scheduler's own ``enable_overlap``."""
    log = overlap_main.server.log_text()
    assert "role=main overlap_schedule=True" in log


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_one_shot_handoffs_to_an_overlap_main_decode_match_colocated(
    overlap_routers, overlap_links, colocated, stream
):
    """Six prompts, handoffs after 1 to 20 ids, plain greedy and with penalties: every request
    finishes on MD with the co-located server's ids."""
    router = overlap_routers[0]
    options = ({}, {"frequency_penalty": 0.5, "presence_penalty": 0.3}, {"repetition_penalty": 1.2})
    for i, prompt in enumerate(varied_prompts(6, seed=131)):
        body = _greedy(prompt, 48, **options[i % len(options)])
        expected = generate(colocated.url, body)
        at = (1, 3, 7, 12, 20, 5)[i]
        got = generate_with_handoff_at(
            router.url, overlap_links, body, stream=stream, relay_tokens=at
        )
        assert got.status == 200, got.body
        record = got.body["meta_info"]["pdd"]
        assert record["finished_on"] == "main" and record["handoff_tokens"] >= at, record
        assert got.output_ids == expected.output_ids, (i, at, record)
    wait_router_settled(router.url)


def test_catch_up_and_grammar_on_an_overlap_main_decode_match_colocated(
    overlap_routers, overlap_links, colocated
):
    """Catch-Up chunks (middle chunks, not streamed) and a final handoff inside regex output."""
    router = overlap_routers[1]
    prompt = varied_prompts(1, seed=137)[0]
    body = _greedy(prompt, 300, frequency_penalty=0.3)
    expected = generate(colocated.url, body)
    got = generate_with_handoff_at(
        router.url, overlap_links, body, stream=True, relay_tokens=150, relay_more=100
    )
    record = got.body["meta_info"]["pdd"]
    assert (record["handoff_mode"], record["finished_on"]) == ("catch-up", "main"), record
    assert record["handoff_chunks"] >= 3, record
    assert got.output_ids == expected.output_ids
    words = r"([a-z]+ ){200,400}[a-z]+\."
    regex = {
        "text": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 300, "regex": words},
    }
    expected = generate(colocated.url, regex)
    got = generate_with_handoff_at(
        router.url, overlap_links, regex, stream=False, relay_tokens=150, relay_more=100
    )
    assert got.body["meta_info"]["pdd"]["finished_on"] == "main"
    assert got.output_ids == expected.output_ids
    wait_router_settled(router.url)


def test_concurrent_requests_on_an_overlap_main_decode_match_colocated(
    server_group, pdd_cluster, overlap_main, colocated
):
    """Twelve requests at once: RLD's stream of each holds after 8 ids, so each ends by a
    handoff, and handoffs land while the overlap MD decodes the requests handed off before
    (extend and decode batches interleave)."""
    from sglang_pdd.testbed.cluster import start_router
    from sglang_pdd.testbed.relay_gate import RelayGate

    gate = RelayGate(pdd_cluster.relay.url)
    gate.hold_every(8)
    router = start_router(
        server_group,
        pdd_cluster,
        name="router-overlap-load",
        relay_url=gate.url,
        mains=[overlap_main],
        tail_on_relay=False,
        handoff_switch="hold",
    )
    try:
        prompts = varied_prompts(12, seed=139)
        bodies = [_greedy(p, 40 + 10 * (i % 4)) for i, p in enumerate(prompts)]
        with ThreadPoolExecutor(12) as pool:
            got = list(
                pool.map(
                    lambda ib: generate(router.url, ib[1], stream=ib[0] % 2 == 0), enumerate(bodies)
                )
            )
        for body, result in zip(bodies, got, strict=True):
            assert result.status == 200, result.body
            assert result.body["meta_info"]["pdd"]["finished_on"] == "main"
            assert result.output_ids == generate(colocated.url, body).output_ids
        wait_router_settled(router.url)
    finally:
        gate.release()
        server_group.stop_named("router-overlap-load")
