"""Main-Decode's control socket: a peer acts only on the requests it watched (real ZeroMQ)."""

from __future__ import annotations

import json
import time

import zmq

from sglang_pdd.main_decode.state import MainDecodeState
from sglang_pdd.testbed.ports import free_port
from sglang_pdd.wire.codec import decode_event, encode
from sglang_pdd.wire.messages import Deferred, Handoff, Release, Watch


def _peer(port: int, name: bytes) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTING_ID, name)
    sock.connect(f"tcp://127.0.0.1:{port}")
    return sock


def _deliver(state: MainDecodeState, sock: zmq.Socket, payload: bytes) -> None:
    sock.send(payload)
    state.poll_control(timeout_ms=10_000)  # waits for the message, then handles it


def _reply(sock: zmq.Socket) -> dict:
    assert sock.poll(10_000), "no reply from Main-Decode"
    return json.loads(sock.recv())


def test_only_the_watching_peer_may_act_on_a_request():
    port = free_port()
    state = MainDecodeState(port, host="127.0.0.1", vocab_size=100)
    owner, intruder = _peer(port, b"router-a"), _peer(port, b"router-b")
    try:
        _deliver(state, owner, encode(Watch(rid="r.pdd-relayed")))
        assert state.requests.watches.watchers["r.pdd-relayed"] == b"router-a"
        rid = "r.pdd-relayed"
        for message in map(encode, (Watch(rid), Release(rid), Handoff(rid, [1, 2], final=True))):
            _deliver(state, intruder, message)
            reply = _reply(intruder)
            assert reply["event"] == "error" and "another peer owns" in reply["message"], reply
        assert state.requests.watches.watchers["r.pdd-relayed"] == b"router-a"
        assert not state.requests.releases and not state.requests.watches.handoffs
        # Acting on a request nobody watched is refused too.
        _deliver(state, intruder, encode(Release(rid="other.pdd-relayed")))
        assert "before watch" in _reply(intruder)["message"]
        # The owner's own messages are taken.
        _deliver(state, owner, encode(Handoff(rid="r.pdd-relayed", token_ids=[1, 2], final=False)))
        _deliver(state, owner, encode(Release(rid="r.pdd-relayed")))
        assert state.requests.watches.handoffs["r.pdd-relayed"] == ([1, 2], False)
        assert "r.pdd-relayed" in state.requests.releases
    finally:
        owner.close()
        intruder.close()
        state.socket.close()


def test_an_abort_that_overtakes_its_request_still_ends_it():
    """An abort that found nothing parked is remembered briefly: the relayed request whose KV
    lands afterwards is ended (released), not parked for good; others park as usual."""
    from types import SimpleNamespace

    from sglang_pdd.main_decode import parked as parked_module

    state = MainDecodeState(free_port(), host="127.0.0.1")
    scheduler = SimpleNamespace(
        waiting_queue=[],
        tree_cache=SimpleNamespace(disable=True),
        token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=object),
    )

    def arrive(rid):
        req = SimpleNamespace(
            rid=rid, origin_input_ids=[1, 2, 3], prefix_len=0, skip_radix_cache_insert=False
        )
        scheduler.waiting_queue = [req]
        state.park_arrivals(scheduler)

    try:
        state.unpark_for_abort(scheduler, "gone.pdd-relayed", abort_all=False)
        state.requests.recent_aborts["old.pdd-relayed"] = -parked_module.ABORT_MEMORY_ITERATIONS - 1
        for rid in ("gone.pdd-relayed", "kept.pdd-relayed", "old.pdd-relayed"):
            arrive(rid)
        assert set(state.requests.parked) == {
            "gone.pdd-relayed",
            "kept.pdd-relayed",
            "old.pdd-relayed",
        }
        assert state.requests.releases == {"gone.pdd-relayed"}
        assert "old.pdd-relayed" not in state.requests.recent_aborts
    finally:
        state.socket.close()


def test_a_deferred_final_handoff_is_dropped_and_reported_and_the_request_stays_parked():
    from types import SimpleNamespace

    from sglang_pdd.main_decode.parked import HandoffDeferred

    port = free_port()
    state = MainDecodeState(port, host="127.0.0.1", vocab_size=100)
    router = _peer(port, b"router-a")
    rid = "r.pdd-relayed"
    try:
        _deliver(state, router, encode(Watch(rid=rid)))
        state.requests.parked[rid] = SimpleNamespace(rid=rid)
        state.requests.parked_at[rid] = 0.0
        _deliver(state, router, encode(Handoff(rid=rid, token_ids=[1, 2, 3], final=True)))
        taken = state.take_ready_handoffs(lambda req, ids, final: HandoffDeferred("no room"))
        assert (
            taken == []
            and rid in state.requests.parked
            and rid not in state.requests.watches.handoffs
        )
        reply = _reply(router)
        assert reply == {"event": "deferred", "message": "no room", "rid": rid}
        assert isinstance(decode_event(json.dumps(reply).encode()), Deferred)
        # Sent again with more ids, and taken: it leaves the parked set to decode on.
        _deliver(state, router, encode(Handoff(rid=rid, token_ids=[1, 2, 3, 4], final=True)))
        taken = state.take_ready_handoffs(lambda req, ids, final: True)
        assert [(ids, final) for _, ids, final, _ in taken] == [([1, 2, 3, 4], True)]
        assert rid not in state.requests.parked
    finally:
        router.close()
        state.socket.close()


def test_control_messages_read_on_rank_0_leave_every_rank_in_the_same_state():
    """TP > 1: rank 0 reads the socket; what it read rides SGLang's request broadcast (pickled)
    to the other ranks, which apply it without a socket and send nothing."""
    import pickle

    port = free_port()
    rank0 = MainDecodeState(port, host="127.0.0.1", vocab_size=100)
    rank1 = MainDecodeState(None, vocab_size=100)
    owner, intruder = _peer(port, b"router-a"), _peer(port, b"router-b")
    try:
        items = []

        def read(count):  # what rank 0 reads, until ``count`` items in all
            deadline = time.monotonic() + 30
            while len(items) < count and time.monotonic() < deadline:
                rank0.wait_for_control(1000)
                if (batch := rank0.read_control()) is not None:
                    items.extend(batch.items)
            assert len(items) == count, items

        owner.send(encode(Watch(rid="r.pdd-relayed")))
        owner.send(encode(Handoff(rid="r.pdd-relayed", token_ids=[1, 2, 3], final=True)))
        owner.send(encode(Watch(rid="s.pdd-relayed")))
        read(3)  # two peers' messages have no order between them: the owner's come first
        intruder.send(b"not json")  # malformed: dropped on rank 0, never broadcast
        intruder.send(encode(Release(rid="r.pdd-relayed")))  # refused by ownership, on rank 0
        read(4)
        from sglang_pdd.main_decode.state import ControlMessages

        batch = ControlMessages(tuple(items))
        rank0.apply_control(batch)
        rank1.apply_control(pickle.loads(pickle.dumps(batch)))
        for state in (rank0, rank1):
            assert state.requests.watches.watchers == {
                "r.pdd-relayed": b"router-a",
                "s.pdd-relayed": b"router-a",
            }
            assert state.requests.watches.handoffs == {"r.pdd-relayed": ([1, 2, 3], True)}
            assert not state.requests.releases
        assert "another peer owns" in _reply(intruder)["message"]  # answered by rank 0 only
        assert rank1.socket is None and rank1.read_control() is None
    finally:
        owner.close()
        intruder.close()
        rank0.socket.close()


def test_a_message_whose_handling_raises_is_answered_and_the_next_one_is_handled():
    """``apply_control`` runs inside SGLang's scheduler loop, which exits on an exception: a
    failure handling one message becomes an error reply, and nothing propagates."""
    port = free_port()
    state = MainDecodeState(port, host="127.0.0.1", vocab_size=100)
    router = _peer(port, b"router-a")
    try:
        _deliver(state, router, encode(Watch(rid="r.pdd-relayed")))
        state.requests.releases = None  # a bug in handling a release: set.add on None raises
        _deliver(state, router, encode(Release(rid="r.pdd-relayed")))
        reply = _reply(router)
        assert reply["event"] == "error" and "AttributeError" in reply["message"], reply
        state.requests.releases = set()
        _deliver(state, router, encode(Release(rid="r.pdd-relayed")))
        assert state.requests.releases == {"r.pdd-relayed"}
    finally:
        router.close()
        state.socket.close()


def test_a_watch_after_parking_gets_a_ready_that_still_counts_the_wan_bytes():
    """The router's watch can reach MD after the request's KV landed (a slow control link):
    the "ready" MD sends then must carry the same byte count the first one did."""
    from types import SimpleNamespace

    port = free_port()
    state = MainDecodeState(port, host="127.0.0.1", vocab_size=100)
    state.requests.token_kv_bytes = 1000  # as park_arrivals learns it from the pool
    router = _peer(port, b"router-a")
    rid = "late.pdd-relayed"
    try:
        state.requests.parked[rid] = SimpleNamespace(
            rid=rid, origin_input_ids=list(range(50)), prefix_len=20
        )
        state.requests.parked_at[rid] = 0.0
        _deliver(state, router, encode(Watch(rid=rid)))
        reply = _reply(router)
        assert reply["event"] == "ready", reply
        assert (reply["received_tokens"], reply["kv_bytes"]) == (30, 30 * 1000), reply
    finally:
        router.close()
        state.socket.close()
