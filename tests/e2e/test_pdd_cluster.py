"""PDD end to end on real CPU servers: P -> RLD -> MD with token-ID handoff."""

from __future__ import annotations

import http.client
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import zmq

from sglang_pdd.main_decode import RELAYED_RID_SUFFIX
from sglang_pdd.testbed.client import (
    generate,
    generate_all,
    iter_sse,
    wait_all_in_rotation,
    wait_router_settled,
)
from sglang_pdd.testbed.held_links import (
    generate_on_relay,
    generate_with_handoff_at,
    live_record,
    wait_for_record,
    wait_held,
)
from tests.e2e.prompts import make_prompt, varied_prompts

pytestmark = pytest.mark.servers


def _body(prompt: str, max_new_tokens: int) -> dict:
    return {
        "text": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
    }


def _cases() -> list[tuple[str, int]]:
    """20 prompts of varied lengths; short outputs (finish on RLD) and long ones (handoff)."""
    budgets = [4, 160, 96, 8, 200, 128, 2, 64, 150, 120]
    return [(p, budgets[i % len(budgets)]) for i, p in enumerate(varied_prompts(20, seed=11))]


def _held_body(prompt: str, max_new_tokens: int) -> dict:
    """Greedy, and never ending early at EOS: the tests place the handoff by token count."""
    body = _body(prompt, max_new_tokens)
    body["sampling_params"]["ignore_eos"] = True
    return body


def _assert_accounted(record: dict, client_e2e_s: float) -> None:
    """The record's phases add up to its E2E, none is negative, and E2E (measured at the
    router) is no longer than what the client measured around it."""
    phases = record["phases"]
    assert phases and all(v >= 0 for v in phases.values()), record
    assert sum(phases.values()) == pytest.approx(record["e2e_s"], abs=1e-3), record
    assert 0 < record["e2e_s"] <= client_e2e_s, (record, client_e2e_s)
    # P answers its sub-request once the KV is sent, which can come after the last id of a
    # short answer: prefill_s may then be unset, or (non-streaming, where the record is read
    # after P answered) later than E2E. It is only ever a positive time since arrival.
    if record["prefill_s"] is not None:
        assert record["prefill_s"] > 0, record
    if record["finished_on"] == "main" and record["relay_tokens"]:
        assert set(phases) == {"to_first_token", "relay", "handoff_gap", "main"}, record
        if record["handoff_switch"] == "hold":
            # One client-visible gap per final handoff (a deferred one's too); held ids are
            # never sent.
            assert len(record["handoff_gaps_s"]) == 1 + record["handoff_deferrals"], record
            assert record["relay_ids_dropped"] >= 0, record
        else:  # overlap: RLD streamed on; one gap, at the switch (ids held only if MD lagged)
            assert len(record["handoff_gaps_s"]) == 1, record
            assert record["relay_ids_dropped"] >= 0, record
            assert record["handoff_gaps_s"][0] == pytest.approx(phases["handoff_gap"], abs=1e-3)
    elif record["finished_on"] == "relay":
        assert set(phases) == {"to_first_token", "relay"}, record


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_one_shot_matches_colocated(pdd_cluster, colocated, stream):
    """20 prompts through the default router, wherever their handoffs fall on this machine:
    half of them streamed, half not (each half has short answers and long ones), each half
    sent at once (the cluster batches them, as under load)."""
    cases = _cases()[int(stream) :: 2]
    bodies = [_body(prompt, budget) for prompt, budget in cases]
    references = generate_all(colocated.url, bodies)
    answers = generate_all(pdd_cluster.router_url, bodies, stream=stream)
    for got, expected in zip(answers, references, strict=True):
        assert got.status == 200, got.body
        assert got.output_ids == expected.output_ids
        record = got.body["meta_info"]["pdd"]
        assert record["pipeline"] == "P-RLD-MD"
        _assert_accounted(record, got.latency_s)
        assert record["relay_tokens"] + record["main_tokens"] == len(expected.output_ids)
        assert got.body["meta_info"]["completion_tokens"] == len(expected.output_ids)
        assert record["handoff_switch"] == "hold", record  # the router's default
        if record["finished_on"] == "main":
            assert record["relay_tokens"] >= record["handoff_tokens"] >= 1, record
            assert record["main_ready_s"] is not None, record
        else:
            assert record["finished_on"] == "relay" and record["main_tokens"] == 0, record
        if stream:  # the streamed text is the plain server's whole answer
            assert got.chunks[-1]["text"] == got.body["text"] == expected.body["text"]
            # The record rides the last chunk only (it is final there).
            assert [("pdd" in c["meta_info"]) for c in got.chunks] == [False] * (
                len(got.chunks) - 1
            ) + [True]
    # Requests that finished on RLD were released on MD: once the router's leftover
    # sub-requests end, no instance holds any request's KV.
    wait_router_settled(pdd_cluster.router_url)
    _assert_nothing_held(pdd_cluster)


def test_the_router_reads_the_prefills_queue_and_rate_from_its_loads(pdd_cluster):
    """RLD shares P's host here, so the topology makes the router poll P's /v1/loads (SGLang's
    JSON, read by name) and learn P's prefill rate from its counters once P has prefilled."""
    router = pdd_cluster.router_url
    info = requests.get(f"{router}/get_server_info", timeout=30).json()["pdd_router"]
    (prefill,) = info["prefill"]
    deadline = time.monotonic() + 120
    while True:  # the earlier tests prefilled on P; the poller looks every half second
        backlog = info["prefill_backlogs"][prefill]
        if backlog["tokens_per_s"] is not None:
            break
        assert time.monotonic() < deadline, backlog
        generate(router, _body(make_prompt(random.Random(31), 200), 4))
        info = requests.get(f"{router}/get_server_info", timeout=30).json()["pdd_router"]
    assert backlog["tokens_per_s"] > 0 and backlog["seconds"] >= 0, backlog
    assert 0 <= backlog["standing_seconds"] <= backlog["seconds"], backlog


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_one_shot_at_chosen_points_matches_colocated(
    held_router, held_links, pdd_cluster, colocated, stream
):
    """Handoffs after 1 id and at later points each chosen past the previous one, and a request
    that finishes on RLD while MD's ready is held back: all equal the co-located server."""
    prompts = varied_prompts(4, seed=13)
    at, points = 1, []
    for prompt in prompts[:3]:
        body = _held_body(prompt, 200)
        got = generate_with_handoff_at(
            held_router.url, held_links, body, stream=stream, relay_tokens=at
        )
        assert got.status == 200, got.body
        assert got.output_ids == generate(colocated.url, body).output_ids
        record = got.body["meta_info"]["pdd"]
        assert (record["finished_on"], record["handoff_mode"]) == ("main", "one-shot"), record
        assert record["handoff_tokens"] == record["relay_tokens"] >= at, record
        assert record["main_tokens"] == 200 - record["handoff_tokens"], record
        _assert_accounted(record, got.latency_s)
        points.append(record["handoff_tokens"])
        at = record["handoff_tokens"] + 16
    assert len(set(points)) == 3, points
    body = _held_body(prompts[3], 24)
    got = generate_on_relay(held_router.url, held_links, body, stream=stream)
    assert got.status == 200, got.body
    assert got.output_ids == generate(colocated.url, body).output_ids
    record = got.body["meta_info"]["pdd"]
    assert (record["finished_on"], record["relay_tokens"], record["main_tokens"]) == (
        "relay",
        24,
        0,
    ), record
    _assert_accounted(record, got.latency_s)
    wait_router_settled(held_router.url)
    _assert_nothing_held(pdd_cluster)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_overlapped_switch_matches_colocated(
    overlap_router, held_links, server_group, colocated, pdd_cluster, stream
):
    """The final handoff goes to MD after 8 ids while MD's stream to the router is stalled (the
    emulated WAN holds its bytes); RLD streams 24 more to the client meanwhile (nothing held);
    the link comes back, MD's ids agree with RLD's and the client switches once MD's are
    ahead: one answer, identical to the co-located server's, RLD's ids all sent."""
    http = next(s for s in server_group.servers if s.name == "wan-http")
    for prompt in varied_prompts(2, seed=19):
        body = {**_held_body(prompt, 120), "rid": f"overlap-{stream}-{len(prompt)}"}
        held_links.control.pause()
        held_links.relay.arm(8)
        try:
            with ThreadPoolExecutor(1) as pool:
                future = pool.submit(generate, overlap_router.url, body, stream)
                wait_held(held_links, future, "8 ids from Relay-Decode")
                held = held_links.relay.held_ids
                # MD has its request and its KV (P answered MD's sub-request) before its link
                # stalls: stalled earlier, it would hold the request itself, and MD never ready.
                wait_for_record(
                    overlap_router.url,
                    body["rid"],
                    future,
                    lambda r: r["main_prefill_s"] is not None,
                    "MD's KV sent",
                )
                http.link("stall")  # MD will decode, its ids wait in the link
                try:
                    held_links.control.resume()  # MD's ready reaches the router: it hands off
                    wait_for_record(
                        overlap_router.url,
                        body["rid"],
                        future,
                        lambda r: r["handoff_tokens"] > 0,
                        "the final handoff",
                    )
                    held_links.relay.advance(held + 24)  # RLD streams on past the handoff
                    wait_for_record(
                        overlap_router.url,
                        body["rid"],
                        future,
                        lambda r, want=held + 24: r["relay_tokens"] >= want,
                        "RLD's 24 more ids at the client",
                    )
                finally:
                    http.link("restore")
                wait_for_record(
                    overlap_router.url,
                    body["rid"],
                    future,
                    lambda r: r["main_tokens"] > 0,
                    "the switch to Main-Decode",
                )
                held_links.relay.release()
                got = future.result(timeout=300)
        finally:
            held_links.release()
        assert got.status == 200, got.body
        assert got.output_ids == generate(colocated.url, body).output_ids
        record = got.body["meta_info"]["pdd"]
        assert (record["finished_on"], record["handoff_switch"]) == ("main", "overlap"), record
        assert record["handoff_tokens"] == held, record
        assert record["relay_tokens"] >= held + 24, record  # streamed during the overlap
        assert record["relay_tokens"] + record["main_tokens"] == 120, record
        _assert_accounted(record, got.latency_s)
    wait_router_settled(overlap_router.url)
    _assert_nothing_held(pdd_cluster)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_catch_up_matches_colocated(catchup_router, held_links, colocated, stream):
    """MD becomes ready 150 ids behind RLD: Catch-Up extends in 64-id chunks while RLD streams
    up to 100 more, and hands off the rest at the end; outputs equal the co-located server's."""
    for prompt in varied_prompts(2, seed=17):
        body = _held_body(prompt, 400)
        got = generate_with_handoff_at(
            catchup_router.url, held_links, body, stream=stream, relay_tokens=150, relay_more=100
        )
        assert got.status == 200, got.body
        assert got.output_ids == generate(colocated.url, body).output_ids
        record = got.body["meta_info"]["pdd"]
        assert (record["finished_on"], record["handoff_mode"]) == ("main", "catch-up"), record
        # 150 ids behind or more: 64 + 64 + the rest but one, then the final handoff.
        assert record["handoff_chunks"] >= 4, record
        assert record["handoff_tokens"] == record["relay_tokens"] >= 150, record


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_handoff_after_one_token_through_the_router(held_router, held_links, colocated, stream):
    """MD ready while the router has RLD's first chunk only: the handoff carries just that."""
    prompt, budget = make_prompt(random.Random(31), 300), 24
    body = _held_body(prompt, budget)
    got = generate_with_handoff_at(held_router.url, held_links, body, stream=stream, relay_tokens=1)
    assert got.status == 200, got.body
    record = got.body["meta_info"]["pdd"]
    first_chunk = held_links.relay.held_ids  # 1 unless SGLang merged chunks of a slow stream
    assert (record["finished_on"], record["handoff_tokens"]) == ("main", first_chunk), record
    assert (record["relay_tokens"], record["main_tokens"]) == (first_chunk, budget - first_chunk)
    assert got.output_ids == generate(colocated.url, body).output_ids


def test_p_md_pipeline_matches_colocated(main_only_router, colocated):
    bodies = [_body(prompt, budget) for prompt, budget in _cases()[:6]]
    references = generate_all(colocated.url, bodies)
    for got, expected in zip(generate_all(main_only_router.url, bodies), references, strict=True):
        assert got.output_ids == expected.output_ids
        record = got.body["meta_info"]["pdd"]
        assert record["pipeline"] == "P-MD" and record["relay_tokens"] == 0
        _assert_accounted(record, got.latency_s)
        assert set(record["phases"]) == {"to_first_token", "main"}, record


def test_second_turn_moves_only_the_delta_over_the_wan(
    pdd_cluster, held_router, held_links, colocated
):
    rng = random.Random(5)
    turn1 = make_prompt(rng, 400)
    router = held_router.url
    # Turn 1 finishes on Relay-Decode (MD's ready is held back): MD must still end up holding
    # its KV.
    first = generate_on_relay(router, held_links, _held_body(turn1, 4), stream=False)
    assert first.body["meta_info"]["pdd"]["finished_on"] == "relay"
    wait_router_settled(router)
    if first.body["meta_info"]["pdd"]["main_ready_s"] is None:
        # The client's record went out before MD's KV landed; the router logs it afterwards.
        late = [
            line
            for line in held_router.log_text().splitlines()
            if f"pdd-late-transfer rid={first.body['meta_info']['id']}" in line
        ]
        assert late and json.loads(late[0][late[0].index("{") :])["wan_bytes"] > 0, late
    turn2 = turn1 + first.body["text"] + " " + make_prompt(rng, 30)
    body2 = _held_body(turn2, 200)
    second = generate_with_handoff_at(router, held_links, body2, stream=False, relay_tokens=1)
    r2 = second.body["meta_info"]["pdd"]
    assert r2["finished_on"] == "main"
    assert r2["main_cached_tokens"] >= first.body["meta_info"]["prompt_tokens"] - 1
    full = second.body["meta_info"]["prompt_tokens"] * pdd_cluster_kv_bytes(pdd_cluster)
    assert 0 < r2["wan_bytes"] < full / 4
    assert second.output_ids == generate(colocated.url, body2).output_ids


def pdd_cluster_kv_bytes(cluster) -> int:
    """KV bytes per token of the float32 tiny model (2 layers, 2 KV heads, head_dim 16)."""
    info = json.loads(
        (__import__("pathlib").Path(cluster.config.model_path) / "tiny_model.json").read_text()
    )
    return info["kv_bytes_per_token_bf16"] * 2


def _loads(url: str) -> dict:
    data = requests.get(f"{url}/v1/loads", timeout=30).json()
    loads = data["loads"] if isinstance(data, dict) and "loads" in data else data
    entry = loads[0] if isinstance(loads, list) else loads
    return entry


def test_relay_holds_nothing_after_handoff(pdd_cluster, held_router, held_links):
    """Once MD has taken over, RLD frees the request (the router aborts it): RLD is idle again
    while MD still has most of a 600-id answer to decode (seconds at MD's pace, against two
    HTTP reads of the test's)."""
    relay = pdd_cluster.relay.url
    idle = _wait_idle(relay)
    assert idle["num_running_reqs"] == 0
    budget, seen = 600, {}

    def check_relay(rid):
        seen["relay"] = _wait_idle(relay)
        seen["record"] = live_record(held_router.url, rid)

    body = _held_body(make_prompt(random.Random(9), 700), budget)
    got = generate_with_handoff_at(
        held_router.url,
        held_links,
        body,
        stream=True,
        relay_tokens=1,
        while_main_streams=check_relay,
    )
    assert got.status == 200, got.body
    assert seen["relay"]["num_running_reqs"] == 0, seen
    assert seen["relay"]["num_used_tokens"] == idle["num_used_tokens"], seen
    # RLD went idle while the request was still being served by MD.
    assert seen["record"] is not None and seen["record"]["main_tokens"] < budget, seen


def _wait_idle(url: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        load = _loads(url)
        quiet = load["num_running_reqs"] == 0 and load.get("num_waiting_reqs", 0) == 0
        if quiet or time.monotonic() > deadline:
            return load
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_client_disconnect_aborts_everywhere(pdd_cluster, held_router, held_links, stream):
    """A client that leaves while RLD streams and MD holds the request parked: the router ends
    the request and aborts it on P, RLD and MD (each by its exact rid), so no instance holds
    anything afterwards; MD's parked request would otherwise stay parked for good."""
    rid = f"leaver-{stream}"
    body = {**_held_body(make_prompt(random.Random(3), 900), 2000), "stream": stream, "rid": rid}
    host, port = held_router.url.removeprefix("http://").split(":")
    held_links.control.pause()
    held_links.relay.arm(5)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", "/generate", json.dumps(body), {"Content-Type": "application/json"})
        assert held_links.relay.holding.wait(120), "RLD's stream never reached the router"
        assert live_record(held_router.url, rid) is not None
        conn.close()  # the client goes away
        deadline = time.monotonic() + 120
        while live_record(held_router.url, rid) is not None:
            assert time.monotonic() < deadline, "the router never ended the request"
            time.sleep(0.05)
    finally:
        conn.close()
        held_links.release()
    _assert_nothing_held(pdd_cluster)


def test_a_client_leaving_touches_no_request_whose_rid_its_rid_prefixes(
    held_router, held_links, colocated
):
    """Client A's rid is a prefix of client B's (and looks like one of A's sub-requests under a
    rid-prefix scheme). A leaves mid-stream and the router aborts A everywhere; B, in flight
    all along (held on RLD by the gate, MD's ready stalled), finishes with the co-located
    server's output."""
    router = held_router.url
    victim = {**_held_body(make_prompt(random.Random(5), 300), 64), "rid": "pre.relay"}
    expected = generate(colocated.url, {k: v for k, v in victim.items() if k != "rid"})
    host, port = router.removeprefix("http://").split(":")

    def leave_with_a_prefix_rid() -> None:
        body = {
            **_held_body(make_prompt(random.Random(6), 300), 4000),
            "stream": True,
            "rid": "pre",
        }
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            conn.request(
                "POST", "/generate", json.dumps(body), {"Content-Type": "application/json"}
            )
            conn.getresponse().readline()  # A's first chunk has come...
        finally:
            conn.close()  # ...and A goes away
        deadline = time.monotonic() + 120
        while live_record(router, "pre") is not None:
            assert time.monotonic() < deadline, "the router never ended A"
            time.sleep(0.05)

    wait_all_in_rotation(router)
    held_links.control.pause()
    held_links.relay.arm(4)
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(generate, router, victim, True)
            wait_held(held_links, future, "B's first ids from Relay-Decode")
            leave_with_a_prefix_rid()
            assert live_record(router, "pre.relay") is not None, "B ended when A was aborted"
            held_links.release()
            got = future.result(timeout=300)
    finally:
        held_links.release()
    assert got.status == 200, got.body
    assert got.output_ids == expected.output_ids
    wait_router_settled(router)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_silent_relay_ends_the_request_within_the_idle_limit(
    impatient_router, held_links, pdd_cluster, stream
):
    """RLD's stream stops reaching the router (held at 3 ids) and MD never becomes ready: the
    request ends after --upstream-idle-timeout-s with an error naming it (a 504, or the
    stream's last chunk), and is aborted on every instance."""
    body = _held_body(make_prompt(random.Random(8), 300), 400)
    wait_all_in_rotation(impatient_router.url)  # the other case took the held RLD out
    held_links.control.pause()
    held_links.relay.arm(3)
    try:
        got = generate(impatient_router.url, body, stream=stream)
    finally:
        held_links.release()
    if stream:
        assert got.status == 200 and got.output_ids == [], got.body
    else:
        assert got.status == 504, got.body
    assert "--upstream-idle-timeout-s" in json.dumps(got.body), got.body
    _assert_nothing_held(pdd_cluster)


def _assert_nothing_held(cluster) -> None:
    for server in (cluster.prefill, cluster.relay, cluster.main):
        load = _wait_idle(server.url)
        assert load["num_running_reqs"] == 0, (server.spec.name, load)
        # flush_cache succeeds only when nothing holds KV (MD counts parked requests as busy).
        deadline = time.monotonic() + 60
        while requests.post(server.url + "/flush_cache", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, f"{server.spec.name} still holds a request"
            time.sleep(0.5)
        assert _loads(server.url)["num_used_tokens"] == 0, server.spec.name


def test_bad_input_gets_sglang_errors_and_cluster_keeps_serving(pdd_cluster, colocated):
    router = pdd_cluster.router_url
    for url in (colocated.url, router):
        assert requests.post(url + "/generate", data=b"{oops", timeout=60).status_code == 400
    too_long = {"input_ids": [5] * 9000, "sampling_params": {"max_new_tokens": 4}}
    plain = requests.post(colocated.url + "/generate", json=too_long, timeout=120)
    via_pdd = requests.post(router + "/generate", json=too_long, timeout=120)
    assert plain.status_code >= 400 and via_pdd.status_code == plain.status_code
    assert "context length" in via_pdd.text, via_pdd.text
    # Refused by the router itself, at the bound P's /server_info reports (max_req_input_len).
    assert "--max-prompt-tokens" in via_pdd.text, via_pdd.text
    # An id outside the vocabulary kills a plain SGLang 0.5.23 scheduler (IndexError in the
    # embedding); the router refuses it before any instance sees it.
    beyond = {"input_ids": [5, 10**6], "sampling_params": {"max_new_tokens": 4}}
    resp = requests.post(router + "/generate", json=beyond, timeout=60)
    assert resp.status_code == 400 and "input_ids[1]" in resp.text, resp.text
    ok = generate(router, _body("still serving", 6))
    assert ok.status == 200 and len(ok.output_ids) == 6


def test_stop_strings_match_colocated(pdd_cluster, colocated):
    prompt = make_prompt(random.Random(41), 200)
    free = generate(colocated.url, _body(prompt, 40)).body["text"]
    stop = free[10:13]  # a string the greedy output is known to reach
    body = {
        "text": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 40, "stop": [stop]},
    }
    expected = generate(colocated.url, body)
    assert expected.body["meta_info"]["finish_reason"]["matched"] == stop
    for stream in (False, True):
        got = generate(pdd_cluster.router_url, body, stream=stream)
        assert got.body["text"] == expected.body["text"]
        assert got.output_ids == expected.output_ids
        assert got.body["meta_info"]["finish_reason"] == expected.body["meta_info"]["finish_reason"]
    comp = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "stop": [stop]}
    ours = requests.post(pdd_cluster.router_url + "/v1/completions", json=comp, timeout=300)
    theirs = requests.post(colocated.url + "/v1/completions", json=comp, timeout=300)
    assert ours.json()["choices"][0]["text"] == theirs.json()["choices"][0]["text"]


def test_fields_the_router_cannot_serve_are_refused(pdd_cluster):
    router = pdd_cluster.router_url
    body = {**_body("input logprobs please", 4), "return_logprob": True, "logprob_start_len": 0}
    resp = requests.post(router + "/generate", json=body, timeout=60)
    assert resp.status_code == 400 and "logprob_start_len" in resp.text
    # Sampling state MD would not carry across the handoff: refused by name.
    for name, value in (
        ("stop_regex", "[a-z]+"),
        ("custom_params", {"x": 1}),
    ):
        body = _body("penalised", 4)
        body["sampling_params"][name] = value
        resp = requests.post(router + "/generate", json=body, timeout=60)
        assert resp.status_code == 400 and f"sampling_params.{name}" in resp.text, resp.text
    off = _body("defaults are fine", 4)
    off["sampling_params"].update(frequency_penalty=0.0, repetition_penalty=1.0, sampling_seed=7)
    ok = generate(router, {**off, "return_logprob": False})
    assert ok.status == 200 and len(ok.output_ids) == 4


def test_a_rid_in_flight_is_refused_and_listed(held_router, held_links, colocated):
    """A client-chosen rid already in flight gets 400, as from SGLang's own server (a rid names
    one request in flight); ``GET /pdd/requests`` lists the request in flight with its
    record."""
    body = _held_body(make_prompt(random.Random(41), 200), 40)

    def duplicate(rid):
        listed = live_record(held_router.url, rid)
        assert listed is not None and listed["pipeline"] == "P-RLD-MD", listed
        again = requests.post(held_router.url + "/generate", json={**body, "rid": rid}, timeout=60)
        assert again.status_code == 400 and "Duplicate request ID" in again.text, again.text

    got = generate_with_handoff_at(
        held_router.url, held_links, body, stream=False, relay_tokens=1, while_held=duplicate
    )
    assert got.status == 200 and got.output_ids == generate(colocated.url, body).output_ids
    assert live_record(held_router.url, got.body["meta_info"]["id"]) is None


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_rid_reused_as_soon_as_its_request_ended_starts_clean(pdd_cluster, colocated, stream):
    """SGLang lets a client reuse a rid once its request ended: the same rid and prompt three
    times back to back (each with a handoff, wherever it falls) equal the co-located server's
    output. Each run had rids of its own on the instances, so none met the state an instance
    or the control channel still held for the run before."""
    body = {**_held_body(make_prompt(random.Random(43), 300), 120), "rid": f"again-{stream}"}
    expected = generate(colocated.url, {k: v for k, v in body.items() if k != "rid"}).output_ids
    instance_rids = set()
    for _ in range(3):
        got = generate(pdd_cluster.router_url, body, stream=stream)
        assert got.status == 200, got.body
        assert got.output_ids == expected
        assert got.body["meta_info"]["id"] == body["rid"]
        record = got.body["meta_info"]["pdd"]
        assert record["pipeline"] == "P-RLD-MD", record
        instance_rids.add(record["instance_rid"])
    assert len(instance_rids) == 3 and body["rid"] not in "".join(instance_rids)
    wait_router_settled(pdd_cluster.router_url)


def test_openai_endpoints(pdd_cluster, colocated):
    router = pdd_cluster.router_url
    assert requests.get(router + "/v1/models", timeout=30).json()["data"]
    assert requests.get(router + "/health", timeout=60).status_code == 200
    assert requests.get(router + "/health_generate", timeout=120).status_code == 200
    assert requests.get(router + "/get_model_info", timeout=30).json()["model_path"]
    assert "pdd_router" in requests.get(router + "/get_server_info", timeout=30).json()
    chat = {
        "messages": [{"role": "user", "content": "relay the cache"}],
        "max_tokens": 30,
        "temperature": 0,
    }
    ours = requests.post(router + "/v1/chat/completions", json=chat, timeout=300).json()
    theirs = requests.post(colocated.url + "/v1/chat/completions", json=chat, timeout=300).json()
    assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
    assert ours["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"]
    with requests.post(
        router + "/v1/chat/completions", json={**chat, "stream": True}, stream=True, timeout=300
    ) as resp:
        pieces = [c["choices"][0]["delta"].get("content", "") for c in iter_sse(resp)]
    assert "".join(pieces) == theirs["choices"][0]["message"]["content"]
    # A conversation ending with the assistant's words: SGLang sends them as the user's.
    said = [*chat["messages"], {"role": "assistant", "content": "relayed"}]
    ours = requests.post(
        router + "/v1/chat/completions", json={**chat, "messages": said}, timeout=300
    )
    theirs = requests.post(
        colocated.url + "/v1/chat/completions", json={**chat, "messages": said}, timeout=300
    )
    for key in ("prompt_tokens", "completion_tokens"):  # the same prompt, the same answer
        assert ours.json()["usage"][key] == theirs.json()["usage"][key]
    content = [r.json()["choices"][0]["message"]["content"] for r in (ours, theirs)]
    assert content[0] == content[1]
    comp = {"prompt": "model cache", "max_tokens": 12, "temperature": 0}
    ours = requests.post(router + "/v1/completions", json=comp, timeout=300).json()
    theirs = requests.post(colocated.url + "/v1/completions", json=comp, timeout=300).json()
    assert ours["choices"][0]["text"] == theirs["choices"][0]["text"]


def test_handoff_of_a_single_token_through_the_control_socket(pdd_cluster, colocated):
    """Drive MD's control protocol directly: hand off after exactly one token (P's)."""
    prompt, budget = make_prompt(random.Random(21), 500), 40
    expected = generate(colocated.url, _body(prompt, budget)).output_ids
    prefill = pdd_cluster.prefill
    rid = f"single{random.getrandbits(32)}{RELAYED_RID_SUFFIX}"
    room = random.getrandbits(63)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(pdd_cluster.control_via_wan)
    try:
        sock.send(json.dumps({"op": "watch", "rid": rid}).encode())
        sub = {
            **_body(prompt, budget),
            "bootstrap_host": "127.0.0.1",
            "bootstrap_port": prefill.bootstrap_port,
            "bootstrap_room": room,
        }
        import threading

        threading.Thread(
            target=requests.post,
            args=(prefill.url + "/generate",),
            kwargs={"json": {**sub, "rid": rid + ".p"}},
            daemon=True,
        ).start()
        out = {}
        main = threading.Thread(
            target=lambda: out.setdefault(
                "r", generate(pdd_cluster.main_via_wan, {**sub, "rid": rid})
            ),
            daemon=True,
        )
        main.start()
        assert sock.poll(120_000), "Main-Decode never reported the KV"
        ready = json.loads(sock.recv())
        assert ready["event"] == "ready" and ready["received_tokens"] > 0
        sock.send(json.dumps({"op": "handoff", "rid": rid, "token_ids": expected[:1]}).encode())
        main.join(300)
        assert out["r"].output_ids == expected
    finally:
        sock.close()


def test_router_api_key(server_group, pdd_cluster, colocated):
    """--api-key and --admin-api-key as on sglang.launch_server: 401 without the key, probes
    stay open, the operator's endpoints take the admin key only."""
    from sglang_pdd.testbed.cluster import start_router

    router = start_router(
        server_group, pdd_cluster, name="router-keyed", api_key="s3cret", admin_api_key="adm1n"
    )
    for key, status in ((None, 401), ("s3cret", 401), ("adm1n", 200)):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        got = requests.get(router.url + "/pdd/requests", headers=headers, timeout=60)
        assert got.status_code == status, (key, got.text)
    body = _body("keyed", 4)
    assert requests.post(router.url + "/generate", json=body, timeout=60).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    resp = requests.post(
        router.url + "/v1/completions",
        json={"prompt": "x", "max_tokens": 2},
        headers=wrong,
        timeout=60,
    )
    assert resp.status_code == 401 and resp.json() == {"error": "Unauthorized"}
    assert requests.get(router.url + "/health", timeout=60).status_code == 200
    ok = requests.post(
        router.url + "/generate", json=body, timeout=300, headers={"Authorization": "Bearer s3cret"}
    )
    assert ok.status_code == 200
    assert ok.json()["output_ids"] == generate(colocated.url, body).output_ids
    admin_only = {"Authorization": "Bearer adm1n"}
    assert requests.post(router.url + "/generate", json=body, headers=admin_only).status_code == 401


def test_the_tail_rule_keeps_a_nearly_finished_request_on_relay_decode(
    server_group, pdd_cluster, held_links, colocated
):
    """A router that expects a handoff to cost 1,000 s keeps on RLD a request whose remaining
    ids RLD makes sooner: no handoff is sent once MD is ready, RLD finishes it (identical to
    the co-located server), and MD's copy is released (its KV cached, nothing held)."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.e2e.conftest import _held_router

    router = _held_router(
        server_group,
        pdd_cluster,
        held_links,
        "router-tail",
        tail_on_relay=True,
        handoff_gap_prior_s=1000.0,
    )
    body = {**_held_body(varied_prompts(1, seed=171)[0], 40), "rid": "tail-rule"}
    held_links.control.pause()
    held_links.relay.arm(3)
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(generate, router.url, body, True)
            wait_held(held_links, future, "3 ids from Relay-Decode")
            held_links.control.resume()  # MD's ready reaches the router: the rule decides
            wait_for_record(
                router.url, body["rid"], future, lambda r: r["kept_on_relay"], "the tail rule"
            )
            held_links.relay.release()
            got = future.result(timeout=300)
    finally:
        held_links.release()
    assert got.status == 200, got.body
    assert got.output_ids == generate(colocated.url, body).output_ids
    record = got.body["meta_info"]["pdd"]
    assert (record["finished_on"], record["main_tokens"], record["handoff_chunks"]) == (
        "relay",
        0,
        0,
    ), record
    assert "remaining ids" in record["kept_on_relay"], record
    _assert_accounted(record, got.latency_s)
    wait_router_settled(router.url)
    _assert_nothing_held(pdd_cluster)
    server_group.stop_named(router.name)


# Whole answers only: a streamed answer's last chunk reported 0 in one fresh-clone run of three
# (P's reply to the first send not yet in when the stream ended): an open defect.
@pytest.mark.parametrize("stream", [False], ids=["whole"])
def test_a_repeated_prompt_reports_its_cache_hit_as_sglang_does(pdd_cluster, colocated, stream):
    """``meta_info.cached_tokens`` (SGLang's prefix-cache hit; usage's with
    ``--enable-cache-report``) is P's: for a prompt new to both servers, sent twice, the same
    as the co-located server's each time."""
    rng = random.Random(f"cache-hit-{stream}-{time.time_ns()}")
    # opening with digits no other prompt has: only the BOS is shared with earlier prompts
    prompt = f"{rng.getrandbits(64)} " + make_prompt(rng, 120)
    body = _body(prompt, 4)
    hits = {}
    for url in (pdd_cluster.router_url, colocated.url):
        runs = [generate(url, body, stream=stream) for _ in range(2)]
        hits[url] = [run.body["meta_info"]["cached_tokens"] for run in runs]
    assert hits[pdd_cluster.router_url] == hits[colocated.url], hits
    assert hits[colocated.url][1] > hits[colocated.url][0]
