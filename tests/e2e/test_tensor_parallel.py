"""A tensor-parallel Main-Decode (``--tp-size 2 --pdd-experimental-tp`` on the CPU engine): the
plugin runs on both ranks, one control socket opens (on the rank that receives requests), and
control messages read there are answered while the server keeps serving (issue 9).

What is not tested here, and why (docs/cpu.md): a handoff to it. On this machine the KV transfer
from the TP-1 prefill server to a TP-2 decode server (Mooncake's M-to-N head slicing) never
completed, so no request parks on it; a cluster with every server at TP 2 needs six scheduler
processes more than CI's 24 GB holds beside the rest of the suite. The rank broadcast of the
control messages is unit-tested (tests/main_decode/test_control_ownership.py)."""

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
    assert log.count("Main-Decode control socket on port") == 1


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
