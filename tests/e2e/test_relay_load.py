"""Relay-Decode's live load drives the router: ``--handoff-mode auto`` on a real busy RLD."""

from __future__ import annotations

import random
import threading
import time

import pytest
import requests

from sglang_pdd.testbed.client import generate, pd_generate
from sglang_pdd.testbed.held_links import generate_with_handoff_at
from tests.e2e.prompts import make_prompt

pytestmark = pytest.mark.servers


def _body(prompt: str, max_new_tokens: int) -> dict:
    return {
        "text": prompt,
        "sampling_params": {
            "temperature": 0.0,
            "ignore_eos": True,
            "max_new_tokens": max_new_tokens,
        },
    }


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


def test_auto_handoff_follows_relay_load(
    pdd_cluster, small_relay, small_relay_links, auto_router, colocated
):
    # The router knows the relay by the URL it reaches it at (the stallable link).
    router, relay = auto_router.url, small_relay_links.relay.url
    # The handoff comes after RLD's first id (MD's ready is held back until then, RLD's link
    # stalled from then until MD streams), so the mode is the one the router picks for RLD's
    # load at that moment, on any machine.
    prompt, budget = make_prompt(random.Random(51), 400), 400
    expected = generate(colocated.url, _body(prompt, budget)).output_ids

    _wait_load(router, relay, busy=False)
    idle = generate_with_handoff_at(
        router, small_relay_links, _body(prompt, budget), stream=False, relay_tokens=1
    )
    assert idle.output_ids == expected
    assert idle.body["meta_info"]["pdd"]["handoff_mode"] == "catch-up"

    # Occupy most of the small relay's KV with one long request through plain SGLang PD.
    rng = random.Random(52)
    hog_rid = f"hog{rng.getrandbits(32)}"
    hog = {
        "rid": hog_rid,
        "input_ids": [rng.randrange(10, 500) for _ in range(5000)],
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 1200, "ignore_eos": True},
    }
    prefill = pdd_cluster.prefill
    thread = threading.Thread(
        target=pd_generate,
        daemon=True,
        args=(prefill.url, prefill.bootstrap_port, small_relay.url, hog),
    )
    thread.start()
    try:
        assert _wait_load(router, relay, busy=True) >= 0.5
        busy = generate_with_handoff_at(
            router, small_relay_links, _body(prompt, budget), stream=False, relay_tokens=1
        )
        assert busy.output_ids == expected
        record = busy.body["meta_info"]["pdd"]
        assert (record["handoff_mode"], record["handoff_chunks"]) == ("one-shot", 1), record
    finally:
        for url in (small_relay.url, prefill.url):
            requests.post(f"{url}/abort_request", json={"rid": hog_rid}, timeout=30)
        thread.join(120)
    _wait_load(router, relay, busy=False)
