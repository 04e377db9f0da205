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


def test_router_messages_are_what_main_decode_accepts():
    from sglang_pdd.main_decode import protocol

    assert protocol.decode(protocol.watch("r")) == {"op": "watch", "rid": "r"}
    assert protocol.decode(protocol.handoff("r", [1, 2], final=False), vocab_size=8) == {
        "op": "handoff", "rid": "r", "token_ids": [1, 2], "final": False}  # fmt: skip
    assert protocol.decode(protocol.release("r"))["op"] == "release"


def test_events_are_validated_for_the_router():
    import pytest

    from sglang_pdd.main_decode import protocol

    assert protocol.decode_event(b'{"event": "ready", "rid": "r"}')["event"] == "ready"
    for bad in (b"nope", b"[]", b'{"event": "ready"}', b'{"event": "boom", "rid": "r"}'):
        with pytest.raises(ValueError):
            protocol.decode_event(bad)


def test_sub_rids_name_every_instance_request_once():
    from sglang_pdd.main_decode import is_relayed
    from sglang_pdd.main_decode.protocol import SubRids
    from sglang_pdd.prefill import twin_of

    ids = SubRids("abc")
    every = ids.on_prefill() + ids.on_main() + [ids.relay]
    assert len(set(every)) == 6 and all(r.startswith("abc.") for r in every)
    assert is_relayed(ids.relayed) and not is_relayed(ids.main)
    assert twin_of(ids.prefill_for_main) == ids.prefill_for_relay


def test_fresh_sub_rids_are_the_routers_own_and_never_repeat():
    from sglang_pdd.main_decode import is_relayed
    from sglang_pdd.main_decode.protocol import SubRids

    first, second = SubRids.fresh(), SubRids.fresh()
    assert first.rid != second.rid and first.rid.startswith("pdd-")
    assert is_relayed(first.relayed) and first.relayed.startswith(first.rid + ".")
