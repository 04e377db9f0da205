"""A tensor-parallel Main-Decode (``--tp-size 2`` on the CPU engine) behind a TP-1 prefill
server: the plugin runs on both ranks, one control socket opens (on the rank that receives
requests), control messages read there are answered while the server keeps serving, and
handoffs (One-Shot and Catch-Up) reach both ranks through SGLang's request broadcast, each rank
holding its half of the KV heads. The rank broadcast itself is unit-tested in
tests/main_decode/test_control_ownership.py."""

from __future__ import annotations

import json

import pytest
import requests
import zmq

pytestmark = pytest.mark.servers


@pytest.fixture(scope="module")
def tp_main(server_group, pdd_cluster):
    from sglang_pdd.testbed.cluster import add_main_decode

    site = add_main_decode(server_group, pdd_cluster, "main-tp2", tp_size=2)
    yield site
    server_group.stop_named("main-tp2")


def test_both_ranks_run_the_plugin_and_one_opens_the_control_socket(tp_main):
    log = tp_main.server.log_text()
    assert log.count("sglang-pdd: scheduler hooks active") == 2, "two TP ranks"
    assert log.count("Main-Decode control socket on ") == 1


def test_the_control_socket_answers_and_the_server_keeps_serving(tp_main):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{tp_main.control_port}")
    try:
        # A release before any watch: read on rank 0, broadcast, refused by apply_control.
        sock.send(json.dumps({"op": "release", "rid": "nobody.pdd-relayed"}).encode())
        assert sock.poll(60_000), "no answer from the tensor-parallel Main-Decode"
        reply = json.loads(sock.recv())
        assert reply["event"] == "error" and "before watch" in reply["message"], reply
    finally:
        sock.close()
    assert requests.get(f"{tp_main.server.url}/health", timeout=60).status_code == 200


@pytest.fixture(scope="module")
def tp_routers(server_group, pdd_cluster, tp_main):
    """(links, One-Shot router, Catch-Up router) over the TP-2 Main-Decode."""
    from sglang_pdd.testbed.held_links import hold_links, start_held_router

    links = hold_links(server_group, pdd_cluster, tp_main, "tp2")
    args = (server_group, pdd_cluster, tp_main, links)
    yield (
        links,
        start_held_router(*args, "router-tp2"),
        start_held_router(
            *args, "router-tp2-cu", handoff_mode="catch-up", catchup_threshold=4, catchup_chunk=64
        ),
    )
    links.release()
    server_group.stop_named("router-tp2", "router-tp2-cu", "held-control-tp2")


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_handoffs_to_the_tensor_parallel_main_decode_match_colocated(tp_routers, colocated, stream):
    """KV from the TP-1 P lands on both ranks (each its half of the KV heads); One-Shot and
    Catch-Up handoffs reach both ranks through SGLang's request broadcast, and the output
    equals the co-located server's."""
    from sglang_pdd.testbed.client import generate_all, wait_router_settled
    from sglang_pdd.testbed.held_links import generate_with_handoff_at
    from tests.e2e.prompts import varied_prompts

    links, one_shot, catch_up = tp_routers
    bodies = [
        {
            "text": prompt,
            "sampling_params": {
                "temperature": 0.0,
                # Past each handoff point (3, 40; Catch-Up's 150 + 100 more) with room to spare.
                "max_new_tokens": (120, 120, 300)[i],
                "ignore_eos": True,
                "frequency_penalty": 0.2 * i,
            },
        }
        for i, prompt in enumerate(varied_prompts(3, seed=149 + stream))
    ]
    for i, (body, expected) in enumerate(
        zip(bodies, generate_all(colocated.url, bodies), strict=True)
    ):
        router, more = (catch_up, 100) if i == 2 else (one_shot, 0)
        got = generate_with_handoff_at(
            router.url, links, body, stream=stream, relay_tokens=(3, 40, 150)[i], relay_more=more
        )
        assert got.status == 200, got.body
        record = got.body["meta_info"]["pdd"]
        assert record["finished_on"] == "main", record
        assert got.output_ids == expected.output_ids, (i, record)
        wait_router_settled(router.url)
