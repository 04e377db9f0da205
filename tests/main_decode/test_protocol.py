"""The Main-Decode control protocol: what parses, and what is refused with a reason."""

from __future__ import annotations

import pytest

from sglang_pdd.main_decode import protocol


def test_round_trip():
    message = {"op": "handoff", "rid": "r.pdd-relayed", "token_ids": [1, 2, 3], "final": False}
    assert protocol.decode(protocol.encode(message)) == message
    event = {"event": "ready", "rid": "r", "prompt_tokens": 5}
    assert protocol.decode(protocol.encode(event)) == event


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{oops", "not JSON"),
        (b"[1, 2]", "string 'rid'"),
        (b'{"op": "watch"}', "string 'rid'"),
        (b'{"op": "steal", "rid": "r"}', "unknown op 'steal'; accepted: watch, handoff, release"),
        (b'{"op": "handoff", "rid": "r"}', "token_ids"),
        (b'{"op": "handoff", "rid": "r", "token_ids": [1, "2"]}', "token_ids"),
    ],
)
def test_malformed_messages_are_refused(payload, reason):
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        protocol.decode(payload)
