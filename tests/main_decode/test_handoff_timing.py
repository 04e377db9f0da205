"""MD's "extended" event says how long the handoff waited on MD and how long its extend batch
ran (real ZeroMQ peer; the scheduler's two calls made by hand)."""

from __future__ import annotations

import time

import msgspec
import zmq

from sglang_pdd.main_decode.state import ControlMessages, MainDecodeState
from sglang_pdd.testbed.ports import free_port
from sglang_pdd.wire.codec import encode
from sglang_pdd.wire.messages import Expire, Extended, Handoff, Watch


def test_extended_carries_the_wait_and_the_extend_and_nothing_is_kept_after():
    port = free_port()
    state = MainDecodeState(port, host="127.0.0.1", vocab_size=100)
    peer = zmq.Context.instance().socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.setsockopt(zmq.ROUTING_ID, b"router-a")
    peer.connect(f"tcp://127.0.0.1:{port}")

    def deliver(message) -> None:
        peer.send(encode(message))
        state.poll_control(timeout_ms=10_000)

    def extended() -> Extended:
        assert peer.poll(10_000), "no event from Main-Decode"
        return msgspec.json.decode(peer.recv(), type=Extended)

    try:
        for rid in ("a.pdd-relayed", "b.pdd-relayed"):
            deliver(Watch(rid=rid))
        start = time.monotonic()
        deliver(Handoff(rid="a.pdd-relayed", token_ids=[1, 2, 3]))
        state.note_extend_started("a.pdd-relayed")  # the extend batch is built...
        built = time.monotonic()
        state.notify_extended("a.pdd-relayed", 3, True)  # ...and merged after it ran
        event = extended()
        assert 0 <= event.waited_s <= built - start
        assert 0 <= event.extend_s <= time.monotonic() - start
        # Nothing to extend (the ids were extended before): no batch ran for it.
        deliver(Handoff(rid="b.pdd-relayed", token_ids=[4], final=False))
        state.notify_extended("b.pdd-relayed", 1, False)
        assert extended().extend_s == 0.0
        # An event without a handoff behind it (a re-sent "extended") has no times.
        state.notify_extended("b.pdd-relayed", 1, False)
        event = extended()
        assert event.waited_s is None and event.extend_s is None
        # A handoff whose request ends before its extend leaves no times behind.
        deliver(Handoff(rid="b.pdd-relayed", token_ids=[4, 5]))
        state.apply_control(ControlMessages(((b"", Expire(rid="b.pdd-relayed")),)))
        assert state.requests.watches.handoff_times == {}
    finally:
        peer.close(0)
        state.socket.close()


def test_a_handoff_is_runnable_once_its_request_is_parked_and_not_short_of_kv():
    """The idle scheduler's wait on the control socket is skipped while this holds (a handoff
    to an idle MD would otherwise wait out the 2 ms poll before its extend)."""
    state = MainDecodeState(None)  # a rank without the socket: control items applied by hand
    rid = "a.pdd-relayed"
    state.apply_control(ControlMessages(((b"router-a", Watch(rid=rid)),)))
    assert not state.requests.handoff_runnable()  # watched, nothing handed off
    state.apply_control(ControlMessages(((b"router-a", Handoff(rid=rid, token_ids=[1])),)))
    # Handed off before its KV landed: nothing to run yet.
    assert not state.requests.handoff_runnable()
    state.requests.parked[rid] = object()  # the KV landed (park_arrivals)
    assert state.requests.handoff_runnable()
    state.requests.note_kv_wait(rid)  # the extend batch found no KV room for it
    assert not state.requests.handoff_runnable()
