"""Main-Decode keeps serving whatever arrives on its control socket (malformed, forged ids)."""

from __future__ import annotations

import json
import random

import pytest
import requests
import zmq

from sglang_pdd.testbed.client import generate

pytestmark = pytest.mark.servers


def _greedy(ids, budget):
    return {"input_ids": ids, "sampling_params": {"temperature": 0.0, "max_new_tokens": budget}}


def test_malformed_control_messages_leave_main_decode_serving(pdd_cluster, colocated):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(pdd_cluster.control_via_wan)
    try:
        refused_with_rid = [
            {"op": "handoff", "rid": "forged.pdd-relayed", "token_ids": [10**9]},  # off vocab
            {"op": "handoff", "rid": "forged.pdd-relayed", "token_ids": [-5]},
            {"op": "handoff", "rid": "forged.pdd-relayed", "token_ids": [True]},
            {"op": "steal", "rid": "forged.pdd-relayed"},
        ]
        for message in refused_with_rid:
            sock.send(json.dumps(message).encode())
        sock.send(b"{not json")
        sock.send_multipart([b"three", b"frames"])
        sock.send(json.dumps({"rid": "no-op-at-all"}).encode())
        errors = []
        while len(errors) < len(refused_with_rid) and sock.poll(60_000):
            errors.append(json.loads(sock.recv()))
        assert len(errors) == len(refused_with_rid)
        assert all(e["event"] == "error" and e["rid"] == "forged.pdd-relayed" for e in errors)
    finally:
        sock.close()
    assert requests.get(f"{pdd_cluster.main.url}/health", timeout=30).status_code == 200
    rng = random.Random(77)
    ids = [rng.randrange(10, 250) for _ in range(300)]
    got = generate(pdd_cluster.router_url, _greedy(ids, 32))
    assert (
        got.status == 200 and got.output_ids == generate(colocated.url, _greedy(ids, 32)).output_ids
    )
