"""An instance killed (``kill -9``) in the middle of a request loses nothing.

Requests whose instance is killed or drained mid-stream ask for enough tokens that the instance
is still generating when the test acts, however fast the machine: 600 where Relay-Decode is the
victim, since a ``RelayGate`` freezes RLD (SIGSTOP) the moment it has carried 20 or 30 ids, in
the gate's own thread, so that the test can kill it at leisure (unfrozen, an idle relay made
600 tokens before a loaded test process had looked twice); 1,500 where Main-Decode is killed,
drained, cut off (it makes them at MD's pace after a handoff at 30 ids; it was seen acted on
after 47-74 of them) or sent SIGTERM (the router learns it from /ready, asked every 0.25 s
there; at the default 2 s, 468 ids went by). Every token beyond that margin is time the suite
spends decoding the rest of the answer twice (here and on the reference).

Each test kills a server of its own, never one the session shares: a Main-Decode after the
handoff (the request continues on Relay-Decode from the prompt plus the ids the client has), a
Main-Decode while the request is parked on it (Relay-Decode, still serving, finishes it) and a
Relay-Decode before the handoff (Main-Decode takes the request from P directly), a prefill
server between RLD's and MD's KV transfers, and the emulated WAN under MD's KV stalled then
dropped mid-transfer (RLD finishes the request; MD ends idle). The client's output equals the
co-located server's in each case. Every wait is on the router's or an instance's own state.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from sglang_pdd.testbed.client import generate, wait_router_settled
from sglang_pdd.testbed.held_links import generate_acting_at

pytestmark = pytest.mark.servers
_names = itertools.count()


def _greedy(rng: random.Random, prompt: int, new: int) -> dict:
    return {
        "rid": f"fault-{uuid.uuid4().hex[:8]}",
        "input_ids": [rng.randrange(10, 250) for _ in range(prompt)],
        "sampling_params": {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": new},
    }


def _kill(server) -> None:
    os.killpg(server.proc.pid, signal.SIGKILL)  # the server and its scheduler processes
    server.proc.wait(timeout=60)


@contextlib.contextmanager
def _main_takes_over(links):
    """The next request's RLD stream holds at 30 ids (RLD cannot finish it first, however slow
    MD's KV): MD takes it over there."""
    links.relay.arm(30)
    try:
        yield
    finally:
        links.relay.release()


def _main_streams(record: dict) -> bool:
    return record["main_tokens"] >= 20


def _relay_streams(record: dict) -> bool:
    return record["relay_tokens"] >= 20


def _reference(colocated, body) -> list[int]:
    return generate(colocated.url, {k: v for k, v in body.items() if k != "rid"}).output_ids


# Which kind of server of its own each fixture's test kills (launched one test ahead).
_KINDS = {
    "doomed_main": "main",
    "doomed_main_checked_often": "main",
    "ttl_main": "main-ttl",
    "doomed_relay": "relay",
    "doomed_relay_slow_catch_up": "relay",
    "doomed_prefill": "prefill",
}


@pytest.fixture(scope="module")
def kv_fault_dir(tmp_path_factory):
    """Where each doomed prefill server's KV-link fault file is (named after the server)."""
    return tmp_path_factory.mktemp("kv-link-faults")


@pytest.fixture(scope="module")
def ahead(server_group, tiny_model, pdd_cluster, kv_fault_dir):
    """Each test's own server, launched while the test before it runs (``launch_ahead.py``)."""
    from sglang_pdd.testbed.cluster import launch_main_decode
    from tests.e2e.launch_ahead import LaunchAhead, LaunchedServer

    def main():
        return launch_main_decode(server_group, pdd_cluster, f"main-doomed-{next(_names)}")

    def main_ttl():
        name = f"main-ttl-{next(_names)}"
        ttl = ("--pdd-parked-ttl-s", "3")
        return launch_main_decode(server_group, pdd_cluster, name, extra_args=ttl)

    def relay():
        spec = _relay_spec(f"relay-doomed-{next(_names)}", tiny_model)
        return LaunchedServer(server_group, server_group.launch(spec))

    def prefill():
        name = f"prefill-doomed-{next(_names)}"
        spec = _prefill_spec(name, tiny_model, pdd_cluster, kv_fault_dir / name)
        return LaunchedServer(server_group, server_group.launch(spec))

    launchers = {"main": main, "main-ttl": main_ttl, "relay": relay, "prefill": prefill}
    servers = LaunchAhead(server_group, launchers, _KINDS)
    yield servers
    servers.close()


def _doomed_main(request, ahead, server_group, pdd_cluster, held_links, **router_overrides):
    """A Main-Decode of this test's own (behind its own WAN proxies) and a router using it. The
    router reaches RLD through the gate of ``held_links``: ``_main_takes_over`` holds RLD's
    stream, so the request cannot finish on RLD before the new MD, whose first KV transfer
    can take seconds, is ready."""
    from sglang_pdd.testbed.cluster import start_router

    site, names = ahead.take(request, "main")
    router = start_router(
        server_group,
        pdd_cluster,
        name=f"router-{site.server.name}",
        mains=[site],
        relay_url=held_links.relay.url,
        **{"tail_on_relay": False, "handoff_switch": "hold", **router_overrides},
    )
    yield site, router
    server_group.stop_named(router.name, *names)


@pytest.fixture
def doomed_main(request, ahead, server_group, pdd_cluster, held_links):
    yield from _doomed_main(request, ahead, server_group, pdd_cluster, held_links)


@pytest.fixture
def doomed_main_checked_often(request, ahead, server_group, pdd_cluster, held_links):
    """As ``doomed_main``, with its router asking MD for /ready every 0.25 s (default 2 s), so
    that a SIGTERM's 503 is seen within a few dozen of MD's ids."""
    yield from _doomed_main(
        request, ahead, server_group, pdd_cluster, held_links, instance_check_interval_s=0.25
    )


@pytest.fixture
def ttl_main(request, ahead, server_group):
    """A Main-Decode of the test's own that ends a parked request after 3 s."""
    site, names = ahead.take(request, "main-ttl")
    yield site
    server_group.stop_named(*names)


def test_main_decode_killed_after_the_handoff_the_request_continues(
    doomed_main, colocated, held_links
):
    site, router = doomed_main
    body = _greedy(random.Random(51), 400, 1500)
    expected = _reference(colocated, body)
    with _main_takes_over(held_links):
        result = generate_acting_at(
            router.url,
            body,
            stream=True,
            when=_main_streams,
            what="Main-Decode's first tokens",
            act=lambda: _kill(site.server),
        )
    assert result.status == 200, result.body
    assert result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert len(pdd["migrations"]) == 1 and site.http_via_wan in pdd["migrations"][0], pdd
    assert result.body["meta_info"]["prompt_tokens"] == 400  # the client's, not the replay's
    # The dead MD is out of rotation: the next request goes straight to what is left.
    info = requests.get(f"{router.url}/get_server_info", timeout=30).json()["pdd_router"]
    assert info["out_of_rotation"] == [site.http_via_wan], info
    metrics = requests.get(f"{router.url}/metrics", timeout=30).text
    open_breaker = f'instance="{site.http_via_wan}",role="main"}} 2.0'
    assert f"sglang_pdd:instance_breaker_state{{{open_breaker}" in metrics, metrics[-3000:]
    health = requests.get(f"{router.url}/health", timeout=60)  # degraded: P-RLD is left
    assert health.status_code == 200 and site.http_via_wan in health.text, health.text
    body = _greedy(random.Random(54), 300, 50)
    after = generate(router.url, body)
    assert after.status == 200 and after.output_ids == _reference(colocated, body)
    pdd = after.body["meta_info"]["pdd"]
    assert (pdd["pipeline"], pdd["migrations"]) == ("P-RLD", []), pdd
    wait_router_settled(router.url)


def test_main_decode_sent_sigterm_mid_stream_moves_its_stream_and_exits(
    doomed_main_checked_often, colocated, held_links
):
    """SIGTERM to a Main-Decode mid-stream (a rolling restart): SGLang's graceful shutdown
    answers /ready with 503, the router drains MD (the request continues on RLD from the ids
    the client has), and MD, left with no request, exits by itself."""
    site, router = doomed_main_checked_often
    body = _greedy(random.Random(60), 400, 1500)  # /ready is asked every 0.25 s
    expected = _reference(colocated, body)
    pid = site.server.proc.pid
    with _main_takes_over(held_links):
        result = generate_acting_at(
            router.url,
            body,
            stream=True,
            when=_main_streams,
            what="Main-Decode's first tokens",
            act=lambda: os.kill(pid, signal.SIGTERM),
        )
    assert result.status == 200, result.body
    assert result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert len(pdd["migrations"]) == 1 and "stopping" in pdd["migrations"][0], pdd
    assert site.server.proc.wait(timeout=300) is not None  # its graceful shutdown completed
    info = requests.get(f"{router.url}/get_server_info", timeout=30).json()["pdd_router"]
    assert site.http_via_wan in info["stopping"], info
    wait_router_settled(router.url)


def test_main_decode_killed_while_the_request_is_parked_relay_decode_finishes_it(
    doomed_main, colocated, server_group
):
    site, router = doomed_main
    control = next(s for s in server_group.servers if s.name == f"wan-control-{site.server.name}")
    body = _greedy(random.Random(52), 400, 600)
    expected = _reference(colocated, body)
    control.pause()  # MD's "ready" cannot reach the router: the request stays on RLD
    try:
        result = generate_acting_at(
            router.url,
            body,
            stream=False,
            when=_relay_streams,
            what="Relay-Decode's first tokens",
            act=lambda: (_kill(site.server), control.resume()),
        )
    finally:
        control.resume()
    assert result.status == 200, result.body
    assert result.output_ids == expected
    assert result.body["meta_info"]["pdd"]["finished_on"] == "relay"
    wait_router_settled(router.url)


def _relay_spec(name: str, tiny_model):
    from sglang_pdd.testbed.launcher import ServerSpec
    from tests.e2e.conftest import _common

    return ServerSpec(
        name, role="decode", extra_args=("--pdd-role", "relay"), **_common(tiny_model)
    )


def _doomed_relay(request, ahead, server_group, pdd_cluster, gated=False, **router_overrides):
    """A Relay-Decode of the test's own, and a router using it beside the cluster's MD (over a
    control link of its own that the test can stall); ``gated``: the router reads RLD through
    a ``RelayGate`` (yielded last, else None)."""
    from dataclasses import replace

    from sglang_pdd.testbed.cluster import start_link_proxy, start_router
    from sglang_pdd.testbed.relay_gate import RelayGate

    relay, _ = ahead.take(request, "relay")
    name = relay.name
    gate = RelayGate(relay.url) if gated else None
    main = pdd_cluster.mains[0]
    control = start_link_proxy(
        server_group, f"control-{name}", main.control_port, pdd_cluster.config.wan
    )
    site = replace(main, control_via_wan=control.url.replace("http://", "tcp://"))
    router = start_router(
        server_group,
        pdd_cluster,
        name=f"router-{name}",
        relay_url=gate.url if gated else relay.url,
        mains=[site],
        **{"tail_on_relay": False, "handoff_switch": "hold", **router_overrides},
    )
    yield relay, control, router, gate
    if gate is not None:
        gate.release()
    control.resume()
    server_group.stop_named(router.name, control.name, name)


@pytest.fixture
def doomed_relay(request, ahead, server_group, pdd_cluster):
    yield from _doomed_relay(request, ahead, server_group, pdd_cluster, gated=True)


@pytest.fixture
def doomed_relay_slow_catch_up(request, ahead, server_group, pdd_cluster):
    """As ``doomed_relay``, with Catch-Up in chunks of one id: MD, once ready, lags RLD for as
    long as RLD serves."""
    yield from _doomed_relay(
        request,
        ahead,
        server_group,
        pdd_cluster,
        gated=True,
        handoff_mode="catch-up",
        catchup_threshold=4,
        catchup_chunk=1,
    )


def test_relay_decode_killed_before_the_handoff_main_decode_takes_the_request(
    doomed_relay, colocated
):
    relay, control, router, gate = doomed_relay
    body = _greedy(random.Random(53), 400, 600)
    expected = _reference(colocated, body)
    control.pause()  # no handoff: the request is on RLD when it dies
    # RLD is frozen the moment the gate has carried 20 of its ids: it dies mid-answer however
    # fast it decodes (600 ids leave room for what it wrote before the gate read the 20th).
    gate.arm(20, on_hold=relay.pause)
    try:
        result = generate_acting_at(
            router.url,
            body,
            stream=True,
            when=_relay_streams,
            what="Relay-Decode's first tokens",
            act=lambda: (_kill(relay), control.resume(), gate.release()),
        )
    finally:
        control.resume()
        gate.release()
    assert result.status == 200, result.body
    assert result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert pdd["pipeline"] == "P-MD" and gate.url in pdd["migrations"][0], pdd
    wait_router_settled(router.url)


def test_a_parked_request_nobody_hands_off_or_releases_is_ended_after_the_ttl(
    ttl_main, pdd_cluster
):
    """A relayed request parks on MD and its router never sends anything (no watch, handoff or
    release): MD ends it after --pdd-parked-ttl-s, caching its KV, and returns to idle."""
    from sglang_pdd.testbed.launcher import post_json

    site = ttl_main
    prefill = pdd_cluster.prefill
    rng = random.Random(55)
    common = {
        "input_ids": [rng.randrange(10, 250) for _ in range(300)],
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 20},
        "bootstrap_host": prefill.host,
        "bootstrap_port": prefill.bootstrap_port,
        "bootstrap_room": rng.getrandbits(63),
    }
    with ThreadPoolExecutor(2) as pool:
        on_p = pool.submit(post_json, f"{prefill.url}/generate", {**common, "rid": "ttl.p"})
        parked = {**common, "rid": f"ttl-{uuid.uuid4().hex[:6]}.pdd-relayed"}
        on_md = pool.submit(post_json, f"{site.server.url}/generate", parked)
        status, body = on_md.result(timeout=300)
        on_p.result(timeout=300)
    reason = body.get("meta_info", {}).get("finish_reason") or body
    assert "abort" in json.dumps(reason), (status, body)  # ended, not decoded
    assert "without a handoff or release: ending it" in site.server.log_text()
    deadline = time.monotonic() + 120
    while requests.post(f"{site.server.url}/flush_cache", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "Main-Decode still holds the request"
        time.sleep(0.2)


def test_draining_main_decode_moves_its_streams_and_takes_no_new_work(
    doomed_main, colocated, held_links
):
    """POST /pdd/drain on a Main-Decode mid-stream: the request continues elsewhere from the ids
    the client has (no token lost), MD is left idle, new requests avoid it until undrained."""
    site, router = doomed_main
    md = site.http_via_wan
    bad = requests.post(f"{router.url}/pdd/drain", json={"url": "http://nowhere:1"}, timeout=30)
    assert bad.status_code == 400 and "one of the router's instances" in bad.text
    body = _greedy(random.Random(56), 400, 1500)
    expected = _reference(colocated, body)
    drained = {}

    def drain() -> None:
        drained.update(
            requests.post(f"{router.url}/pdd/drain", json={"url": md}, timeout=30).json()
        )

    with _main_takes_over(held_links):
        result = generate_acting_at(
            router.url,
            body,
            stream=True,
            when=_main_streams,
            what="Main-Decode's first tokens",
            act=drain,
        )
    assert drained == {"draining": md, "moved": 1, "finishing": 0}, drained
    assert result.status == 200 and result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert len(pdd["migrations"]) == 1 and "draining" in pdd["migrations"][0], pdd
    deadline = time.monotonic() + 120
    while requests.post(f"{site.server.url}/flush_cache", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "the drained Main-Decode still holds the request"
        time.sleep(0.2)
    body = _greedy(random.Random(57), 300, 40)
    after = generate(router.url, body)
    assert after.status == 200 and after.output_ids == _reference(colocated, body)
    assert after.body["meta_info"]["pdd"]["pipeline"] == "P-RLD"  # MD is out of rotation
    back = requests.post(f"{router.url}/pdd/undrain", json={"url": md}, timeout=30).json()
    assert back == {"draining": []}
    body = _greedy(random.Random(58), 300, 40)
    again = generate(router.url, body)
    assert again.status == 200 and again.output_ids == _reference(colocated, body)
    assert again.body["meta_info"]["pdd"]["pipeline"] == "P-RLD-MD"
    wait_router_settled(router.url)


def test_relay_decode_killed_with_main_decode_ready_main_decode_takes_over_at_once(
    doomed_relay_slow_catch_up, colocated
):
    """RLD dies while MD, ready with the KV, is catching up: the router hands MD every id the
    client has at once (no new prefill, no migration), and RLD leaves rotation."""
    relay, control, router, gate = doomed_relay_slow_catch_up
    body = _greedy(random.Random(59), 400, 600)
    expected = _reference(colocated, body)
    control.pause()  # MD's ready waits until RLD is well ahead (Catch-Up, not one final step)
    # RLD freezes at 30 ids (however fast it decodes): MD, ready later, catches up one id per
    # chunk, and RLD dies after the first chunk, with ids still to catch up.
    gate.arm(30, on_hold=relay.pause)
    try:
        result = generate_acting_at(
            router.url,
            body,
            stream=True,
            when=_relay_streams,
            what="Relay-Decode's tokens",
            act=lambda: _kill_once_main_is_ready(router, body["rid"], control, relay, gate),
        )
    finally:
        control.resume()
        gate.release()
    assert result.status == 200, result.body
    assert result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert pdd["finished_on"] == "main" and pdd["migrations"] == [], pdd
    assert pdd["relay_failed"] and pdd["handoff_tokens"] == pdd["relay_tokens"] >= 20, pdd
    info = requests.get(f"{router.url}/get_server_info", timeout=30).json()["pdd_router"]
    assert gate.url in info["out_of_rotation"], info
    wait_router_settled(router.url)


def _kill_once_main_is_ready(router, rid, control, relay, gate) -> None:
    from sglang_pdd.testbed.held_links import HANG_S, live_record

    control.resume()
    deadline = time.monotonic() + HANG_S
    while (record := live_record(router.url, rid)) is None or record["handoff_chunks"] < 1:
        assert record is not None, "the request ended before Main-Decode was ready"
        assert time.monotonic() < deadline, "Main-Decode never became ready"
        time.sleep(0.01)
    _kill(relay)
    gate.release()  # the gate reads on, finds RLD gone and breaks the router's stream


def _prefill_spec(name: str, tiny_model, pdd_cluster, fault_file):
    """A prefill server whose KV for datacenter B crawls at 1 Mbit/s over an emulated link
    ``fault_file`` can stall or drop."""
    from sglang_pdd.testbed.cluster import DATACENTER_B_HOST
    from sglang_pdd.testbed.launcher import ServerSpec

    wan = pdd_cluster.config.wan
    return ServerSpec(
        name,
        role="prefill",
        model_path=str(tiny_model),
        dtype=pdd_cluster.config.dtype,
        chunked_prefill_size=pdd_cluster.config.chunked_prefill_size,
        # A session its sends failed on is probed (and back in use) after 1 s, not 30.
        env=(("SGLANG_FAILED_SESSION_PROBE_INTERVAL_S", "1"),),
        extra_args=(
            "--pdd-role",
            "prefill",
            "--pdd-wan-hosts",
            DATACENTER_B_HOST,
            "--pdd-wan-bandwidth-mbps",
            "1",
            "--pdd-wan-delay-ms",
            str(wan.one_way_delay_ms),
            "--pdd-wan-fault-file",
            str(fault_file),
            "--pdd-seeded-sampling",
        ),
    )


@pytest.fixture
def doomed_prefill(request, ahead, server_group, pdd_cluster, held_links, kv_fault_dir):
    """A prefill server of this test's own, whose KV for datacenter B crawls at 1 Mbit/s (a
    prompt's transfer to MD takes seconds after RLD's has landed) over an emulated link its
    fault file can stall or drop, and a router over it, the cluster's RLD (through the gate of
    ``held_links``) and MD (through its stallable link). Yields (P, router, fault file)."""
    from dataclasses import replace

    from sglang_pdd.testbed.cluster import start_router

    prefill, _ = ahead.take(request, "prefill")
    name = prefill.name
    fault_file = kv_fault_dir / name
    site = replace(
        pdd_cluster.mains[0], control_via_wan=held_links.control.url.replace("http://", "tcp://")
    )
    router = start_router(
        server_group,
        replace(pdd_cluster, prefill=prefill),
        name=f"router-{name}",
        relay_url=held_links.relay.url,
        mains=[site],
        tail_on_relay=False,
        handoff_switch="hold",
    )
    yield prefill, router, fault_file
    server_group.stop_named(router.name, name)


def _acting_while_main_receives(links, router, body: dict, main: str, act):
    """Send ``body`` with MD's control link stalled (its ready cannot reach the router) and
    RLD's stream held after 5 ids; once MD is receiving the request's KV, ``act()``, let both
    links go and return the request's result."""
    from sglang_pdd.testbed.client import instance_load
    from sglang_pdd.testbed.held_links import wait_held

    links.control.pause()
    links.relay.arm(5)
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(generate, router.url, body, True)
            wait_held(links, future, "Relay-Decode's first ids")
            receiving = instance_load(main)["disaggregation"]
            assert receiving["decode_transfer_queue_reqs"] >= 1, receiving
            act()
            links.release()
            return future.result(timeout=600)
    finally:
        links.release()


def _wait_main_receives_nothing(main: str, timeout: float = 120) -> None:
    """MD gave up the transfer that cannot complete and runs nothing."""
    from sglang_pdd.testbed.client import instance_load

    deadline = time.monotonic() + timeout
    while (load := instance_load(main))["disaggregation"]["decode_transfer_queue_reqs"]:
        assert time.monotonic() < deadline, f"MD still waits for KV that cannot come: {load}"
        time.sleep(0.2)
    assert load["num_running_reqs"] == 0, load


def test_prefill_killed_between_relay_and_main_transfers_relay_decode_finishes(
    doomed_prefill, pdd_cluster, held_links, colocated
):
    """P dies after RLD's KV landed, while MD's is still crossing the WAN: MD's KV never
    comes, RLD (which has everything it needs) finishes the request identical to the
    co-located server, and MD drops the request it was receiving and ends idle."""

    prefill, router, _ = doomed_prefill
    main = pdd_cluster.main.url
    body = _greedy(random.Random(57), 3000, 300)  # 1.5 MB of KV: 12 s at 1 Mbit/s
    expected = _reference(colocated, body)
    result = _acting_while_main_receives(held_links, router, body, main, act=lambda: _kill(prefill))
    assert result.status == 200, result.body
    assert result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert (pdd["pipeline"], pdd["finished_on"]) == ("P-RLD-MD", "relay"), pdd
    wait_router_settled(router.url)
    _wait_main_receives_nothing(main)


def _wait_for_log(server, text: str, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.log_text():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_kv_link_stalled_then_dropped_mid_transfer_relay_decode_finishes(
    doomed_prefill, pdd_cluster, held_links, colocated
):
    """The emulated WAN stalls while MD's KV is crossing it: RLD finishes the request. Then
    the link drops: MD's transfer fails and MD ends idle. Back up, the link carries the next
    request's KV and MD takes that request over."""
    from sglang_pdd.testbed.client import instance_load
    from sglang_pdd.transfer.kv_link_faults import set_link_state

    prefill, router, fault_file = doomed_prefill
    main = pdd_cluster.main.url
    body = _greedy(random.Random(59), 3000, 300)  # 1.5 MB of KV: 12 s at 1 Mbit/s
    expected = _reference(colocated, body)

    def stall():
        set_link_state(fault_file, "stall")
        _wait_for_log(prefill, "sglang-pdd: emulated WAN stalled", "P's pacer to stall")

    result = _acting_while_main_receives(held_links, router, body, main, act=stall)
    assert result.status == 200, result.body
    assert result.output_ids == expected
    pdd = result.body["meta_info"]["pdd"]
    assert (pdd["pipeline"], pdd["finished_on"]) == ("P-RLD-MD", "relay"), pdd
    assert instance_load(main)["disaggregation"]["decode_transfer_queue_reqs"] >= 1
    set_link_state(fault_file, "drop")
    wait_router_settled(router.url)  # the router's wait for MD's KV ends with the failure
    _wait_main_receives_nothing(main)
    # The write that failed was the KV itself, cut while crossing the link (not a later
    # small write such as the aux data).
    failed = re.findall(r"kv-transfer to=\S+ bytes=(\d+) failed after", prefill.log_text())
    assert failed and int(failed[0]) >= 100_000, failed
    set_link_state(fault_file, "up")
    # SGLang blacklisted MD's session when the write failed; its probe (every second here)
    # puts it back. Until then P fails MD's transfers at once, so wait for that state.
    _wait_for_log(prefill, "recovered via probe", "P to put MD's session back in use")
    body = _greedy(random.Random(61), 300, 200)
    with _main_takes_over(held_links):
        after = generate(router.url, body, stream=True)
    assert after.status == 200, after.body
    assert after.body["meta_info"]["pdd"]["finished_on"] == "main", after.body["meta_info"]
    assert after.output_ids == _reference(colocated, body)
    wait_router_settled(router.url)
