"""Per-peer limits on Main-Decode's control state: a peer's watched requests and the
handed-off ids held for it stay within bounds on every path (property test), and a message
past a bound is refused by name (real ZeroMQ)."""

from __future__ import annotations

import json
from collections import Counter

import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.main_decode.state import ControlMessages, MainDecodeState
from sglang_pdd.testbed.ports import free_port
from sglang_pdd.wire.codec import encode
from sglang_pdd.wire.messages import Expire, Handoff, Release, Watch

PEERS = [b"router-a", b"router-b"]
RIDS = [f"r{i}.pdd-relayed" for i in range(6)]

_messages = st.one_of(
    st.builds(Watch, rid=st.sampled_from(RIDS)),
    st.builds(Release, rid=st.sampled_from(RIDS)),
    st.builds(
        Handoff,
        rid=st.sampled_from(RIDS),
        token_ids=st.lists(st.integers(0, 99), max_size=8),
        final=st.booleans(),
    ),
    st.builds(Expire, rid=st.sampled_from(RIDS)),
)
_steps = st.lists(st.tuples(st.sampled_from(PEERS), _messages), max_size=60)


def _check_ledger(state: MainDecodeState) -> None:
    watches = state.requests.watches
    watched = Counter(watches.watchers.values())
    assert watches.watch_counts == watched
    held = Counter()
    for rid, (ids, _final) in watches.handoffs.items():
        held[watches.watchers[rid]] += len(ids)  # every held handoff has its watcher
    assert +watches.held_tokens == +held
    assert all(n <= watches.max_watches_per_peer for n in watched.values())
    assert all(n <= watches.max_held_tokens_per_peer for n in held.values())


@settings(max_examples=300, deadline=None)
@given(_steps)
def test_the_ledger_matches_the_tables_and_stays_bounded(steps):
    state = MainDecodeState(None, max_watches_per_peer=3, max_held_tokens_per_peer=10)
    for peer, message in steps:
        identity = b"" if isinstance(message, Expire) else peer
        state.apply_control(ControlMessages(((identity, message),)))
        _check_ledger(state)
    for rid in RIDS:  # every request ending (the TTL here) empties the ledger
        state.apply_control(ControlMessages(((b"", Expire(rid=rid)),)))
    watches = state.requests.watches
    assert not watches.watch_counts and not watches.held_tokens and not watches.handoffs


def test_a_peer_past_its_bounds_is_refused_naming_the_bound():
    port = free_port()
    state = MainDecodeState(
        port, host="127.0.0.1", vocab_size=100, max_watches_per_peer=2, max_held_tokens_per_peer=4
    )
    peer = zmq.Context.instance().socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.setsockopt(zmq.ROUTING_ID, b"router-a")
    peer.connect(f"tcp://127.0.0.1:{port}")

    def deliver(message):
        peer.send(encode(message))
        state.poll_control(timeout_ms=10_000)

    def reply() -> dict:
        assert peer.poll(10_000), "no reply from Main-Decode"
        return json.loads(peer.recv())

    try:
        deliver(Watch(rid="a.pdd-relayed"))
        deliver(Watch(rid="b.pdd-relayed"))
        deliver(Watch(rid="c.pdd-relayed"))
        refused = reply()
        assert refused["rid"] == "c.pdd-relayed" and "MAX_WATCHES_PER_PEER" in refused["message"]
        deliver(Handoff(rid="a.pdd-relayed", token_ids=[1, 2, 3], final=False))
        deliver(Handoff(rid="b.pdd-relayed", token_ids=[1, 2], final=False))
        refused = reply()
        assert "MAX_HELD_HANDOFF_TOKENS_PER_PEER" in refused["message"], refused
        assert state.requests.watches.handoffs == {"a.pdd-relayed": ([1, 2, 3], False)}
        # A handoff replacing the peer's own held one counts only the difference.
        deliver(Handoff(rid="a.pdd-relayed", token_ids=[1, 2, 3, 4], final=True))
        assert state.requests.watches.handoffs["a.pdd-relayed"] == ([1, 2, 3, 4], True)
        assert state.requests.watches.held_tokens[b"router-a"] == 4
    finally:
        peer.close()
        state.socket.close()
