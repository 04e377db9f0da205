"""Prefill's transfer ledger: any bytes from the socket get an answer, never an exception; and
a real socket serves two routers."""

from __future__ import annotations

import msgspec
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.prefill.ledger_service import LedgerService, handle
from sglang_pdd.testbed.ports import free_port
from sglang_pdd.transfer.claims import ClaimTable
from sglang_pdd.wire import ledger as wire

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
_claimish = st.fixed_dictionaries(
    {"op": st.sampled_from(["claim", "drop", "steal", 3]), "rid": _json | st.text(max_size=4)},
    optional={"main": _json, "blocks": _json, "nbytes": _json},
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.binary(max_size=64), _json.map(msgspec.json.encode)).map(lambda p: [b"x", p])
        | _claimish.map(lambda d: [b"r", msgspec.json.encode(d)])
        | st.lists(st.binary(max_size=8), max_size=3),
        max_size=20,
    )
)
def test_any_frames_get_answers_never_an_exception(messages):
    table = ClaimTable(ttl_s=60)
    for frames in messages:
        for peer, event in handle(table, frames, 0.0):
            assert peer == frames[0]
            # Every answer is a well-formed event the router can decode.
            assert wire.decode_event(wire.encode(event)) == event


def test_a_malformed_message_is_refused_naming_the_field():
    table = ClaimTable(ttl_s=60)
    [(peer, event)] = handle(table, [b"p", b'{"op": "claim", "rid": "r", "main": "m"}'], 0)
    assert isinstance(event, wire.Refused) and event.rid == "r" and "blocks" in event.message
    [(_, event)] = handle(table, [b"p", b'{"op": "steal", "rid": "r"}'], 0)
    assert "accepted: claim, drop" in event.message


def test_two_routers_over_a_real_socket():
    port = free_port()
    sending = [None]
    service = LedgerService("127.0.0.1", port, ttl_s=60, sending=lambda: sending[-1])
    service.start()
    context = zmq.Context()
    try:
        a, b = context.socket(zmq.DEALER), context.socket(zmq.DEALER)
        for sock in (a, b):
            sock.setsockopt(zmq.RCVTIMEO, 5000)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"tcp://127.0.0.1:{port}")
        a.send(wire.encode(wire.Claim(rid="a1", main="md", blocks=[1, 2], nbytes=5)))
        assert wire.decode_event(a.recv()) == wire.Granted("a1", 0.0)
        # Each answer to a claim carries what Prefill measures in hand for the WAN then.
        sending.append(2048.0)
        b.send(wire.encode(wire.Claim(rid="b1", main="md", blocks=[1, 3], nbytes=5)))
        assert wire.decode_event(b.recv()) == wire.Busy("b1", "a1", 5.0, 2048.0)
        a.send(wire.encode(wire.Drop(rid="a1")))
        assert wire.decode_event(b.recv()) == wire.Ended("a1")
        b.send(b"not json")
        assert isinstance(wire.decode_event(b.recv()), wire.Refused)
        a.close()
        b.close()
    finally:
        context.term()
        service.close()
