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
        (b'{"op": "handoff", "rid": "r", "token_ids": [true]}', "token_ids"),
        (b'{"op": "handoff", "rid": "r", "token_ids": [1], "final": "yes"}', "final"),
        (b'{"op": "watch", "rid": ""}', "rid"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_malformed_messages_are_refused(payload, reason):
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        protocol.decode(payload)


def test_token_ids_outside_the_vocabulary_are_refused():
    ok = protocol.encode({"op": "handoff", "rid": "r", "token_ids": [0, 511]})
    assert protocol.decode(ok, vocab_size=512)["token_ids"] == [0, 511]
    for bad in ([512], [-1]):
        payload = protocol.encode({"op": "handoff", "rid": "r", "token_ids": bad})
        with pytest.raises(ValueError, match=r"\[0, 512\)"):
            protocol.decode(payload, vocab_size=512)


def test_oversized_messages_are_refused():
    with pytest.raises(ValueError, match="exceeds"):
        protocol.decode(b" " * (protocol.MAX_MESSAGE_BYTES + 1))
