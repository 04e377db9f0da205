"""Relay-Decode's live load drives the router: ``--handoff-mode auto`` on a real busy RLD."""

from __future__ import annotations

import random
import threading
import time

import pytest
import requests

from sglang_pdd.testbed.client import generate, pd_generate, wait_router_settled
from tests.e2e.prompts import make_prompt

pytestmark = pytest.mark.servers


def _body(prompt: str, max_new_tokens: int) -> dict:
    return {"text": prompt, "sampling_params": {"temperature": 0.0, "ignore_eos": True,
                                                "max_new_tokens": max_new_tokens}}  # fmt: skip


def _relay_load(router_url: str, relay_url: str) -> float:
    info = requests.get(f"{router_url}/get_server_info", timeout=30).json()
    return float(info["pdd_router"]["relay_loads"].get(relay_url, 0.0))


def _wait_load(router_url: str, relay_url: str, busy: bool, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        load = _relay_load(router_url, relay_url)
        if (load >= 0.5) == busy:
            return load
        time.sleep(0.25)
    raise AssertionError(f"the router never saw the relay {'busy' if busy else 'idle'}")


def test_auto_handoff_follows_relay_load(pdd_cluster, small_relay, auto_router, colocated):
    router, relay = auto_router.url, small_relay.url
    # 400 output tokens keep RLD decoding for seconds, far longer than MD needs to take over
    # a prompt it already caches, even while RLD and P are busy (the hog fits beside it in
    # the small RLD: 5,000 + 1,200 + about 800 + 400 tokens < 8,192).
    prompt, budget = make_prompt(random.Random(51), 400), 400
    expected = generate(colocated.url, _body(prompt, budget)).output_ids

    # MD caches the prompt first (a one-token request finishes on RLD and warms MD), so that
    # MD is ready after one short transfer, long before RLD's 160th token.
    assert generate(router, _body(prompt, 1)).status == 200
    wait_router_settled(router)
    _wait_load(router, relay, busy=False)
    idle = generate(router, _body(prompt, budget))
    assert idle.output_ids == expected
    assert idle.body["meta_info"]["pdd"]["handoff_mode"] == "catch-up"

    # Occupy most of the small relay's KV with one long request through plain SGLang PD.
    rng = random.Random(52)
    hog_rid = f"hog{rng.getrandbits(32)}"
    hog = {"rid": hog_rid, "input_ids": [rng.randrange(10, 500) for _ in range(5000)],
           "sampling_params": {"temperature": 0.0, "max_new_tokens": 1200,
                               "ignore_eos": True}}  # fmt: skip
    prefill = pdd_cluster.prefill
    thread = threading.Thread(target=pd_generate, daemon=True,
                              args=(prefill.url, prefill.bootstrap_port, relay, hog))  # fmt: skip
    thread.start()
    try:
        assert _wait_load(router, relay, busy=True) >= 0.5
        busy = generate(router, _body(prompt, budget))
        assert busy.output_ids == expected
        record = busy.body["meta_info"]["pdd"]
        assert (record["handoff_mode"], record["handoff_chunks"]) == ("one-shot", 1), record
    finally:
        for url in (relay, prefill.url):
            requests.post(f"{url}/abort_request", json={"rid": hog_rid}, timeout=30)
        thread.join(120)
    _wait_load(router, relay, busy=False)
