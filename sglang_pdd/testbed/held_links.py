"""Handoff points chosen by the caller (a test or a benchmark), not by the machine's speed.

A router in these tests reaches Relay-Decode through a ``RelayGate`` (which can hold RLD's
stream after a chosen number of ids) and Main-Decode's control socket through a link proxy the
test can stall (``ServerProcess.pause``). While the control link is stalled MD's ``ready``
cannot reach the router, so the request stays on RLD; once the gate holds RLD's stream the
router has exactly the ids the test chose and cannot see RLD finish. Releasing the control link
then places the handoff at that count, on a fast machine or a slow one. Every wait here waits
on an event (the gate holding) or on the router's own state (``GET /pdd/requests``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import requests

from sglang_pdd.testbed.client import GenerateResult, generate
from sglang_pdd.testbed.launcher import ServerProcess
from sglang_pdd.testbed.relay_gate import RelayGate

HANG_S = 300  # a request stuck this long is a hang, not a slow machine


@dataclass(frozen=True)
class HeldLinks:
    """A test router's way to RLD (a gate) and its stallable link to MD's control socket."""

    relay: RelayGate
    control: ServerProcess

    def release(self) -> None:
        self.relay.release()
        self.control.resume()


def live_record(router_url: str, rid: str) -> dict | None:
    """The router's record so far of request ``rid`` (None once it has ended)."""
    return requests.get(f"{router_url}/pdd/requests", timeout=30).json().get(rid)


class EndedEarly(AssertionError):
    """The request ended before the state a test waited for."""


def ended_summary(result) -> str:
    """What a failed wait reports about a request that ended: its status and PDD record or
    error, without the thousands of output ids that would bury them in a test log."""
    body = result.body
    if not isinstance(body, dict):
        return f"status {result.status}: {str(body)[:2000]}"
    meta = body.get("meta_info", {}) if isinstance(body.get("meta_info"), dict) else {}
    shown = {
        "pdd": meta.get("pdd"),
        "finish_reason": meta.get("finish_reason"),
        "completion_tokens": meta.get("completion_tokens"),
        "error": body.get("error"),
    }
    return f"status {result.status}: {shown}"


def wait_for_record(
    router_url: str, rid: str, future: Future, done: Callable[[dict], bool], what: str
) -> dict:
    """Wait until the router's record of ``rid`` satisfies ``done``: its live record, or, once
    the request has ended (between two looks, on a slow machine), the final one in its answer;
    ``future`` is the request in flight (EndedEarly if it ended without satisfying ``done``)."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        record = live_record(router_url, rid)
        if record is not None and done(record):
            return record
        if future.done():
            body = future.result().body
            final = body.get("meta_info", {}).get("pdd") if isinstance(body, dict) else None
            if final is not None and done(final):
                return final
            raise EndedEarly(f"the request ended before {what}: {ended_summary(future.result())}")
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def generate_acting_at(
    router_url: str,
    body: dict,
    *,
    stream: bool,
    when: Callable[[dict], bool],
    what: str,
    act: Callable[[], object],
) -> GenerateResult:
    """Send ``body`` (with its ``rid``) through the router; once the router's record of it
    satisfies ``when`` (``what`` names that state), run ``act()`` (kill an instance, cut a
    link, drain) while the request is in flight; return the request's result."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(generate, router_url, body, stream)
        wait_for_record(router_url, body["rid"], future, when, what)
        act()
        return future.result(timeout=HANG_S)


def wait_held(links: HeldLinks, future: Future, what: str) -> None:
    """Wait until the gate holds RLD's stream (EndedEarly if the request ended first)."""
    deadline = time.monotonic() + HANG_S
    while not links.relay.holding.wait(0.05):
        if future.done():
            raise EndedEarly(f"the request ended before {what}: {ended_summary(future.result())}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")


def _wait_main_tokens(router_url: str, rid: str, future, may_end_on_relay: bool) -> None:
    """Until the request's record counts MD's first token (or, ``may_end_on_relay``, it
    ended on RLD first)."""
    try:
        wait_for_record(
            router_url, rid, future, lambda r: r["main_tokens"] > 0, "Main-Decode's first token"
        )
    except EndedEarly:
        if not may_end_on_relay:
            raise


def generate_with_handoff_at(
    router_url: str,
    links: HeldLinks,
    body: dict,
    *,
    stream: bool,
    relay_tokens: int,
    relay_more: int = 0,
    while_held: Callable[[str], None] | None = None,
    while_main_streams: Callable[[str], None] | None = None,
    may_end_on_relay: bool = False,
) -> GenerateResult:
    """Send ``body`` through the router so that MD takes over after exactly the first
    ``relay_tokens`` ids of RLD (or the first chunk of RLD's stream reaching that count).

    MD's control link is stalled and the gate armed; once the gate holds RLD's stream, MD's
    ``ready`` is let through. With ``relay_more`` (Catch-Up), once the first chunk went to MD
    the gate lets RLD stream that many more ids, then holds again. The gate opens once MD's
    tokens flow; ``while_main_streams(rid)`` runs then, while the request is still in flight.
    ``while_held(rid)`` runs while RLD's stream is held and MD's ready not yet let through.
    With ``may_end_on_relay`` a request that RLD finished within the chunk reaching
    ``relay_tokens`` (SGLang merges a slow reader's chunks) is returned, not an error."""
    rid = f"held-{uuid.uuid4().hex}"
    body = {**body, "rid": rid}
    links.control.pause()
    links.relay.arm(relay_tokens)
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(generate, router_url, body, stream)
            wait_held(links, future, f"{relay_tokens} ids from Relay-Decode")
            held = links.relay.held_ids
            if while_held is not None:
                while_held(rid)
            links.control.resume()
            if relay_more:
                wait_for_record(
                    router_url,
                    rid,
                    future,
                    lambda r: r["handoff_chunks"] >= 1,
                    "the first Catch-Up chunk",
                )
                # RLD streams on (up to a new hold, so that it never finishes first) while
                # MD catches up.
                links.relay.advance(held + relay_more)
            _wait_main_tokens(router_url, rid, future, may_end_on_relay)
            links.relay.release()
            if while_main_streams is not None:
                while_main_streams(rid)
            return future.result(timeout=HANG_S)
    finally:
        links.release()


def generate_on_relay(
    router_url: str, links: HeldLinks, body: dict, *, stream: bool
) -> GenerateResult:
    """Send ``body`` with MD's control link stalled for the whole request: MD's ``ready``
    cannot reach the router, so Relay-Decode finishes the request."""
    links.control.pause()
    try:
        return generate(router_url, body, stream=stream)
    finally:
        links.control.resume()


def hold_links(group, cluster, site, name: str, relay_url: str | None = None) -> HeldLinks:
    """A gate to ``cluster``'s RLD (or the Relay-Decode at ``relay_url``) and a stallable link
    (across the emulated WAN, started in ``group`` as ``held-control-<name>``) to the control
    socket of Main-Decode ``site``."""
    from sglang_pdd.testbed.cluster import start_link_proxy

    control = start_link_proxy(group, f"held-control-{name}", site.control_port, cluster.config.wan)
    return HeldLinks(RelayGate(relay_url or cluster.relay.url), control)


def start_held_router(group, cluster, site, links: HeldLinks, name: str, **overrides):
    """A router (named ``name``) on ``cluster``'s P, its RLD through ``links``' gate and the
    Main-Decode ``site`` through ``links``' control link; ``overrides`` as for
    ``start_router``. The tail rule is off and the switch holds RLD's ids unless ``overrides``
    say otherwise: these routers hand off at the points their callers choose."""
    from dataclasses import replace

    from sglang_pdd.testbed.cluster import start_router

    site = replace(site, control_via_wan=links.control.url.replace("http://", "tcp://"))
    overrides = {"tail_on_relay": False, "handoff_switch": "hold", **overrides}
    return start_router(
        group, cluster, name=name, relay_url=links.relay.url, mains=[site], **overrides
    )
