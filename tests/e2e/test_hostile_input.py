"""Hostile input against a live router: generated bodies get an answer (200, or a
4xx naming what is wrong), never a 5xx or a hang; a flood of refused requests leaves the
router's memory bounded; afterwards it serves an ordinary request identically."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_pdd.testbed.client import generate, wait_router_settled
from tests.router.api.test_request_model import json_value

pytestmark = pytest.mark.servers

# Small enough that a body the router accepts finishes quickly on the CPU.
_small_sampling = st.fixed_dictionaries(
    {},
    optional={
        "max_new_tokens": st.integers(-2, 6) | json_value,
        "n": st.integers(-1, 3) | json_value,
        "temperature": st.floats(-1, 2) | json_value,
        "top_k": st.integers(-2, 5) | json_value,
        "stop": json_value,
        "ignore_eos": json_value,
    },
)
_bodies = st.fixed_dictionaries(
    {},
    optional={
        "text": st.text(max_size=12) | json_value,
        "input_ids": st.lists(st.integers(-2, 300), max_size=6) | json_value,
        "sampling_params": _small_sampling | st.lists(_small_sampling, max_size=2) | json_value,
        "rid": st.text(max_size=5) | json_value,
        "stream": st.booleans() | json_value,
        "extra_field": json_value,
    },
)


FLOOD = 10_000


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=_bodies)
def test_any_body_gets_an_answer_never_a_server_error(pdd_cluster, body):
    resp = requests.post(pdd_cluster.router_url + "/generate", data=json.dumps(body), timeout=120)
    assert resp.status_code in (200, 400, 413), (body, resp.status_code, resp.text[:300])
    if resp.status_code == 400:
        assert resp.json()["error"]["message"], resp.text


def test_a_flood_of_refused_requests_keeps_the_routers_memory_bounded(
    server_group, pdd_cluster, colocated
):
    router = next(s for s in server_group.servers if s.name == "router" and s.alive())
    before = _rss_mb(router.proc.pid)
    url = pdd_cluster.router_url
    huge_n = {"text": "x", "sampling_params": {"n": 10**6, "max_new_tokens": 1}}
    deep = "[" * 100_000 + "]" * 100_000
    wrong = {"input_ids": "not ids", "sampling_params": {"max_new_tokens": "many"}}

    def send(i: int) -> int:
        payload = (json.dumps(huge_n), deep, json.dumps(wrong))[i % 3]
        return requests.post(f"{url}/generate", data=payload, timeout=120).status_code

    with ThreadPoolExecutor(16) as pool:  # the figure: 10,000 hostile requests
        statuses = list(pool.map(send, range(FLOOD)))
    assert set(statuses) == {400}, sorted(set(statuses))
    grown = _rss_mb(router.proc.pid) - before
    assert grown < 200, f"the router grew by {grown:.0f} MB over {FLOOD} refused requests"
    body = {"text": "after the flood", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
    got = generate(url, body)
    assert got.status == 200 and got.output_ids == generate(colocated.url, body).output_ids
    wait_router_settled(url)
