"""``IdleClock`` and the ``expire`` items rank 0 makes from it (real ZeroMQ for the latter)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from sglang_pdd.main_decode.idle_clock import IdleClock
from sglang_pdd.main_decode.state import ControlMessages, MainDecodeState
from sglang_pdd.testbed.ports import free_port
from sglang_pdd.wire.messages import Expire


def test_expired_names_what_was_idle_past_the_ttl_once():
    clock = IdleClock(ttl_s=10.0, check_every_s=1.0)
    clock.touch("a", now=0.0)
    clock.touch("b", now=5.0)
    assert clock.expired(now=9.0) == []
    assert clock.expired(now=10.5) == ["a"]  # forgotten once named
    clock.touch("c", now=0.0)
    assert clock.expired(now=11.0) == []  # checked at most once a second
    assert clock.expired(now=11.6) == ["c"]
    clock.touch("b", now=12.0)  # activity restarts the clock
    assert clock.expired(now=20.0) == []
    clock.forget("b")
    assert clock.expired(now=40.0) == [] and clock.last == {}


def test_a_parked_request_without_control_activity_is_ended_and_its_watcher_told():
    import zmq

    port = free_port()
    state = MainDecodeState(port, host="127.0.0.1", ttl_s=600.0)
    router = zmq.Context.instance().socket(zmq.DEALER)
    router.setsockopt(zmq.LINGER, 0)
    router.connect(f"tcp://127.0.0.1:{port}")
    try:
        router.send(json.dumps({"op": "watch", "rid": "p.pdd-relayed"}).encode())
        state.poll_control(timeout_ms=10_000)
        state.requests.parked["p.pdd-relayed"] = SimpleNamespace(rid="p.pdd-relayed")
        state.requests.watches.watchers["w.pdd-relayed"] = b"someone"  # watched, never parked
        state.requests.idle.touch("w.pdd-relayed")
        state.requests.idle.ttl_s = 0.0  # everything is idle past the TTL now
        state.requests.idle._next_check = 0.0
        batch = state.read_control()
        assert sorted(m.rid for _, m in batch.items) == ["p.pdd-relayed", "w.pdd-relayed"]
        assert all(isinstance(m, Expire) for _, m in batch.items)
        state.apply_control(batch)
        # Ends through SGLang's abort, KV cached.
        assert state.requests.releases == {"p.pdd-relayed"}
        assert state.requests.watches.watchers == {} and state.requests.watches.handoffs == {}
        assert router.poll(10_000)
        reply = json.loads(router.recv())
        assert reply["event"] == "error" and "--pdd-parked-ttl-s" in reply["message"]
        # A peer cannot send an expire: the socket accepts only the protocol's ops.
        router.send(json.dumps({"op": "expire", "rid": "x.pdd-relayed"}).encode())
        state.wait_for_control(10_000)
        assert state.read_control() in (None, ControlMessages(()))
    finally:
        router.close()
        state.socket.close()
