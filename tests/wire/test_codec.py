"""The control channel's wire format: what decodes, what is refused and why, and that no input
makes the decoders raise anything but ``ValueError`` (property-based, with hypothesis)."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.wire import codec
from sglang_pdd.wire.messages import (
    MAX_MESSAGE_BYTES,
    MAX_RID_CHARS,
    Deferred,
    Error,
    Expire,
    Extended,
    Handoff,
    Ready,
    Release,
    Watch,
)


def test_every_message_round_trips_with_its_tag():
    for message in (Watch(rid="r"), Release(rid="r"), Handoff("r.pdd-relayed", [1, 2, 3], False)):
        assert codec.decode_control(codec.encode(message)) == message
    for event in (
        Ready(rid="r", t=1.5, prompt_tokens=5, received_tokens=3, cached_tokens=2, kv_bytes=9),
        Extended(rid="r", tokens=4, final=True, t=2.0),
        Deferred(rid="r", message="no room"),
        Error(rid="r", message="refused"),
    ):
        assert codec.decode_event(codec.encode(event)) == event
    assert json.loads(codec.encode(Watch(rid="r"))) == {"op": "watch", "rid": "r"}
    assert json.loads(codec.encode(Deferred(rid="r", message="m")))["event"] == "deferred"


def test_messages_survive_the_broadcast_to_tensor_parallel_ranks():
    """Control items ride SGLang's request broadcast (pickled) to every TP rank."""
    for message in (Handoff("r", [1], True), Expire(rid="r"), Ready(rid="r", kv_bytes=3)):
        assert pickle.loads(pickle.dumps(message)) == message


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{oops", "bad control message"),
        (b"[1, 2]", "bad control message"),
        (b'{"op": "watch"}', "rid"),
        (b'{"op": "steal", "rid": "r"}', "unknown op; accepted: watch, handoff, release"),
        (b'{"rid": "r"}', "missing 'op'"),
        (b'{"op": "expire", "rid": "r"}', "unknown op"),
        (b'{"op": "handoff", "rid": "r"}', "token_ids"),
        (b'{"op": "handoff", "rid": "r", "token_ids": [1, "2"]}', "token_ids"),
        (b'{"op": "handoff", "rid": "r", "token_ids": [true]}', "token_ids"),
        (b'{"op": "handoff", "rid": "r", "token_ids": [-1]}', "token_ids"),
        (b'{"op": "handoff", "rid": "r", "token_ids": [1], "final": "yes"}', "final"),
        (b'{"op": "watch", "rid": ""}', "rid"),
        (b'{"op": "watch", "rid": "' + b"x" * (MAX_RID_CHARS + 1) + b'"}', "rid"),
        (b"\xff\xfe", "bad control message"),
    ],
)
def test_malformed_messages_are_refused_naming_what_is_wrong(payload, reason):
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        codec.decode_control(payload)


def test_token_ids_outside_the_vocabulary_are_refused():
    ok = codec.encode(Handoff("r", [0, 511]))
    assert codec.decode_control(ok, vocab_size=512).token_ids == [0, 511]
    with pytest.raises(ValueError, match=r"\[0, 512\)"):
        codec.decode_control(codec.encode(Handoff("r", [512])), vocab_size=512)


def test_oversized_messages_are_refused():
    with pytest.raises(ValueError, match="exceeds"):
        codec.decode_control(b" " * (MAX_MESSAGE_BYTES + 1))


def test_events_are_validated_for_the_router():
    assert isinstance(codec.decode_event(b'{"event": "ready", "rid": "r"}'), Ready)
    for bad in (
        b"nope",
        b"[]",
        b'{"event": "ready"}',
        b'{"event": "boom", "rid": "r"}',
        b'{"event": "extended", "rid": "r"}',
        b'{"op": "watch", "rid": "r"}',
    ):
        with pytest.raises(ValueError):
            codec.decode_event(bad)


def test_the_rid_of_a_refused_message_is_recovered_when_usable():
    assert codec.rid_of(b'{"op": "steal", "rid": "r1"}') == "r1"
    for payload in (b"{oops", b'{"rid": 5}', b'{"rid": ""}', b"[]"):
        assert codec.rid_of(payload) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)
shaped = st.fixed_dictionaries(
    {},
    optional={
        "op": st.sampled_from(["watch", "handoff", "release", "expire", "x"]) | json_values,
        "event": st.sampled_from(["ready", "extended", "deferred", "error"]) | json_values,
        "rid": st.text(max_size=600) | json_values,
        "token_ids": st.lists(st.integers(-(2**70), 2**70), max_size=8) | json_values,
        "final": json_values,
        "tokens": json_values,
        "kv_bytes": json_values,
        "t": json_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=200), shaped.map(lambda d: json.dumps(d).encode())))
def test_no_payload_makes_a_decoder_raise_anything_but_value_error(payload):
    """MD reads control messages inside SGLang's scheduler loop, which exits on an exception:
    any payload either decodes to a well-formed message or raises ValueError."""
    for decode in (lambda p: codec.decode_control(p, vocab_size=1000), codec.decode_event):
        try:
            message = decode(payload)
        except ValueError:
            continue
        assert message.rid and len(message.rid) <= MAX_RID_CHARS
        if isinstance(message, Handoff):
            assert all(isinstance(t, int) and 0 <= t < 1000 for t in message.token_ids)
    rid = codec.rid_of(payload)
    assert rid is None or 0 < len(rid) <= MAX_RID_CHARS


@given(st.integers(min_value=1, max_value=200_000))
@settings(max_examples=20, deadline=None)
def test_deeply_nested_payloads_are_refused_not_crashing(depth):
    payload = b'{"op": "watch", "rid": "r", "x": ' + b"[" * depth + b"]" * depth + b"}"
    try:
        assert codec.decode_control(payload) == Watch(rid="r")
    except ValueError:
        pass


def test_sub_rids_name_every_instance_request_once():
    from sglang_pdd.wire.rids import SubRids, is_relayed, twin_of

    ids = SubRids("abc")
    every = ids.on_prefill() + ids.on_main() + [ids.relay]
    assert len(set(every)) == 6 and all(r.startswith("abc.") for r in every)
    assert is_relayed(ids.relayed) and not is_relayed(ids.main)
    assert twin_of(ids.prefill_for_main) == ids.prefill_for_relay


def test_fresh_sub_rids_are_the_routers_own_and_never_repeat():
    from sglang_pdd.wire.rids import SubRids, is_relayed

    first, second = SubRids.fresh(), SubRids.fresh()
    assert first.rid != second.rid and first.rid.startswith("pdd-")
    assert is_relayed(first.relayed) and first.relayed.startswith(first.rid + ".")
