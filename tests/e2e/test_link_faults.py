"""The WAN links to Main-Decode failing on command: nothing lost, output unchanged.

The router's control connection to MD is reset while the request is parked and again in the
middle of Catch-Up: whatever was on the link is lost (the router's watch, MD's ``ready``, a
chunk or its ``extended``). ZeroMQ redials, the router watches its requests again, MD answers
with what it holds, and the handoff goes on from there. MD's HTTP link is stalled and then
reset after the handoff: the router's stream from MD breaks and the request continues on RLD
from the ids the client has. The links are ``sglang-pdd wan-link`` proxies told what to do
through their command API; every wait is on the router's own state or the gate.
"""

from __future__ import annotations

import random
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_pdd.testbed.client import generate, wait_all_in_rotation, wait_router_settled
from sglang_pdd.testbed.held_links import (
    HANG_S,
    generate_acting_at,
    wait_for_record,
    wait_held,
)

pytestmark = pytest.mark.servers


def _greedy(seed: int, prompt: int, new: int) -> dict:
    rng = random.Random(seed)
    return {
        "rid": f"link-{uuid.uuid4().hex[:8]}",
        "input_ids": [rng.randrange(10, 250) for _ in range(prompt)],
        "sampling_params": {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": new},
    }


def _reference(colocated, body) -> list[int]:
    return generate(colocated.url, {k: v for k, v in body.items() if k != "rid"}).output_ids


def _cut(link) -> int:
    """Stall the link, reset every connection on it (what it held is lost), restore it."""
    link.link("stall")
    try:
        return link.link("reset")["reset"]
    finally:
        link.link("restore")


def test_control_link_reset_while_parked_and_mid_catch_up_loses_nothing(
    catchup_router, held_links, colocated
):
    control = held_links.control
    body = _greedy(61, 300, 500)
    expected = _reference(colocated, body)
    control.link("stall")  # the router's watch, and MD's ready, wait in the link
    held_links.relay.arm(300)  # RLD never finishes first; the handoff point is fixed
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(generate, catchup_router.url, body, True)
            wait_held(held_links, future, "300 ids from Relay-Decode")
            held = held_links.relay.held_ids
            assert _cut(control) >= 1  # lost: the watch (and MD's ready, if it was sent)
            rid = body["rid"]
            wait_for_record(
                catchup_router.url,
                rid,
                future,
                lambda r: r["handoff_chunks"] >= 1,
                "the first Catch-Up chunk",
            )
            _cut(control)  # lost: whatever chunk or "extended" was on the link
            wait_for_record(
                catchup_router.url,
                rid,
                future,
                lambda r: r["main_tokens"] > 0,
                "Main-Decode's first token",
            )
            held_links.relay.release()
            result = future.result(timeout=HANG_S)
    finally:
        control.link("restore")
        held_links.release()
    assert result.status == 200, result.body
    assert result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert (pdd["finished_on"], pdd["handoff_mode"], pdd["handoff_tokens"]) == (
        "main",
        "catch-up",
        held,
    ), pdd
    assert pdd["handoff_chunks"] >= 2 and pdd["migrations"] == [], pdd
    wait_router_settled(catchup_router.url)


@pytest.fixture(scope="module")
def link_router(server_group, pdd_cluster, held_links):
    """A router of this module's own on the cluster (its health state is this module's),
    reaching RLD through the gate of ``held_links``."""
    from sglang_pdd.testbed.cluster import start_router

    router = start_router(
        server_group,
        pdd_cluster,
        name="router-link-faults",
        relay_url=held_links.relay.url,
        tail_on_relay=False,
        handoff_switch="hold",
    )
    yield router
    server_group.stop_named(router.name)


def test_main_decode_http_link_stalled_then_reset_the_request_continues(
    link_router, pdd_cluster, server_group, colocated, held_links
):
    http = next(s for s in server_group.servers if s.name == "wan-http")
    body = _greedy(62, 400, 1500)
    expected = _reference(colocated, body)
    cuts = []
    held_links.relay.arm(30)  # RLD cannot finish the request before MD takes it over
    try:
        result = generate_acting_at(
            link_router.url,
            body,
            stream=True,
            when=lambda r: r["main_tokens"] >= 20,
            what="Main-Decode's first tokens",
            act=lambda: cuts.append(_cut(http)),
        )
    finally:
        held_links.relay.release()
    assert cuts[0] >= 1
    assert result.status == 200, result.body
    assert result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert len(pdd["migrations"]) == 1 and pdd_cluster.main_via_wan in pdd["migrations"][0], pdd
    wait_router_settled(link_router.url)
    wait_all_in_rotation(link_router.url)  # MD itself is healthy: the probe puts it back


@pytest.fixture(scope="module")
def partition_router(server_group, pdd_cluster, held_links):
    """A router that ends a decoding stream silent for 3 s and migrates the request."""
    from sglang_pdd.testbed.cluster import start_router

    router = start_router(
        server_group,
        pdd_cluster,
        name="router-partition",
        relay_url=held_links.relay.url,
        tail_on_relay=False,
        handoff_switch="hold",
        upstream_idle_timeout_s=3.0,
    )
    yield router
    server_group.stop_named(router.name)


def test_main_decode_partitioned_mid_stream_the_request_ends_on_relay_decode(
    partition_router, pdd_cluster, server_group, colocated, held_links
):
    """MD's HTTP and control links stall (a partition: nothing delivered, nothing refused)
    while MD streams a greedy answer. The router's idle limit ends MD's stream, the abort to
    the unreachable MD gives up after its deadline, and the request continues on RLD from the
    ids the client has: the whole answer arrives, identical, while the partition lasts."""
    links = [s for s in server_group.servers if s.name in ("wan-http", "wan-control")]
    assert len(links) == 2
    body = _greedy(63, 400, 600)
    expected = _reference(colocated, body)
    held_links.relay.arm(30)  # MD takes the request over after 30 ids

    def partition():
        held_links.relay.release()  # RLD will serve the migrated request
        for link in links:
            link.link("stall")

    try:
        result = generate_acting_at(
            partition_router.url,
            body,
            stream=True,
            when=lambda r: r["main_tokens"] >= 20,
            what="Main-Decode's first tokens",
            act=partition,
        )
        still_partitioned = [link.link("state") for link in links]
    finally:
        for link in links:
            link.link("restore")
        held_links.release()
    assert result.status == 200, result.body
    assert result.output_ids == expected
    assert all(s["state"] == "stalled" for s in still_partitioned), still_partitioned
    pdd = result.body["meta_info"]["pdd"]
    assert len(pdd["migrations"]) == 1 and "sent nothing for 3 s" in pdd["migrations"][0], pdd
    assert pdd["pipeline"] == "P-RLD" and pdd["finished_on"] == "relay", pdd
    wait_router_settled(partition_router.url)
    wait_all_in_rotation(partition_router.url)
