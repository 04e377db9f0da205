"""Encode and decode the control channel's messages (``messages.py``), with their limits.

Decoding is typed (msgspec): a payload that is not JSON, not an object, lacks a field, has a
field of the wrong type or out of range, or names an unknown ``op`` or ``event`` raises
``ValueError`` with a message that names what is wrong. Nothing else escapes: a caller inside
SGLang's scheduler can turn every refusal into a reply.
"""

from __future__ import annotations

import msgspec

from sglang_pdd.wire.messages import (
    EVENTS,
    MAX_MESSAGE_BYTES,
    MAX_RID_CHARS,
    OPS,
    ControlMessage,
    Event,
    Handoff,
)

_encoder = msgspec.json.Encoder()
_control_decoder = msgspec.json.Decoder(ControlMessage)
_event_decoder = msgspec.json.Decoder(Event)


class _RidOnly(msgspec.Struct):
    rid: str


_rid_decoder = msgspec.json.Decoder(_RidOnly)


def encode(message: msgspec.Struct) -> bytes:
    """The JSON bytes of a control message or event (its tag included)."""
    return _encoder.encode(message)


def _explain(exc: Exception, known: tuple[str, ...], tag: str) -> str:
    text = str(exc)
    if "Invalid value" in text and f"`$.{tag}`" in text:
        return f"unknown {tag}; accepted: {', '.join(known)}"
    if "Object missing required field `" + tag + "`" in text:
        return f"missing '{tag}'; accepted: {', '.join(known)}"
    return text


def decode_control(payload: bytes, vocab_size: int | None = None) -> ControlMessage:
    """A control message from a router; ``ValueError`` for anything malformed.

    ``vocab_size``: when given, handed-off token ids must lie in ``[0, vocab_size)`` (an id
    outside the embedding would crash the model's forward)."""
    if len(payload) > MAX_MESSAGE_BYTES:
        raise ValueError(f"control message of {len(payload)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        message = _control_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise ValueError(f"bad control message: {_explain(exc, OPS, 'op')}") from exc
    except RecursionError as exc:  # msgspec's own depth limit is far above what is sane here
        raise ValueError("bad control message: nested too deeply") from exc
    if isinstance(message, Handoff) and vocab_size is not None and message.token_ids:
        if max(message.token_ids) >= vocab_size:
            raise ValueError(f"handoff 'token_ids' must lie in [0, {vocab_size})")
    return message


def decode_event(payload: bytes) -> Event:
    """An event from Main-Decode; ``ValueError`` for anything malformed."""
    if len(payload) > MAX_MESSAGE_BYTES:
        raise ValueError(f"event of {len(payload)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        return _event_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise ValueError(f"bad event: {_explain(exc, EVENTS, 'event')}") from exc
    except RecursionError as exc:
        raise ValueError("bad event: nested too deeply") from exc


def rid_of(payload: bytes) -> str | None:
    """The rid of a refused message when it has a usable one (to tell its sender), else None."""
    try:
        rid = _rid_decoder.decode(payload).rid
    except (msgspec.DecodeError, RecursionError):
        return None
    return rid if 0 < len(rid) <= MAX_RID_CHARS else None
