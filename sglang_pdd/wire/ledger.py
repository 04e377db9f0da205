"""The transfer ledger's messages: routers claiming KV blocks on their way to a Main-Decode.

Two or more routers in front of one cluster must not send the same prefix across the WAN twice
at once. Each asks Prefill's ledger (``--pdd-ledger-port``, ZeroMQ DEALER -> ROUTER) before a
transfer leaves, and the ledger answers from every router's open claims:

Router -> ledger, tagged ``"op"``:

* ``Claim``: ``rid``'s KV to Main-Decode ``main`` is about to carry ``blocks`` (the router's
  chained block hashes, ``cache/prefix_blocks.py``: a hash names its whole prefix) and about
  ``nbytes``.
* ``Drop``: the claim is over (its KV landed on MD, or it never will).

Ledger -> router, tagged ``"event"``:

* ``Granted``: the claim is open; ``others_bytes``: bytes other routers' open claims put on the
  same Main-Decode's link (the queue ahead this router cannot see); ``sending_bytes``: the bytes
  Prefill's writes to the other datacenter (``--pdd-wan-hosts``) have in hand now, waiting for
  the WAN or on it, as Prefill measures them (the rank serving the ledger's bytes times the TP
  size: every rank sends its share of the heads); None where Prefill has no WAN hosts.
* ``Busy``: another router's open claim ``holder`` carries one of these blocks; nothing was
  claimed. ``Ended`` for ``holder`` follows when that claim ends. The byte fields as above.
* ``Ended``: a claim this router was told to wait for is over (dropped or expired).
* ``Refused``: the message was malformed (``rid``: its rid when one could be read).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from sglang_pdd.wire import codec
from sglang_pdd.wire.messages import Rid

MAX_LEDGER_MESSAGE_BYTES = 8 << 20  # a claim of ~500k blocks; anything larger is refused
MAX_MAIN_CHARS = 1024
Main = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MAIN_CHARS)]
BlockHash = Annotated[int, msgspec.Meta(ge=0)]  # 63-bit: blake2b >> 1
Bytes = Annotated[float, msgspec.Meta(ge=0)]


class _Op(msgspec.Struct, frozen=True, tag_field="op"):
    rid: Rid


class Claim(_Op, frozen=True, tag="claim"):
    main: Main
    blocks: list[BlockHash]
    nbytes: Bytes = 0.0


class Drop(_Op, frozen=True, tag="drop"):
    pass


class _Event(msgspec.Struct, frozen=True, tag_field="event"):
    rid: Rid


class Granted(_Event, frozen=True, tag="granted"):
    others_bytes: Bytes = 0.0
    sending_bytes: Bytes | None = None


class Busy(_Event, frozen=True, tag="busy"):
    holder: Rid
    others_bytes: Bytes = 0.0
    sending_bytes: Bytes | None = None


class Ended(_Event, frozen=True, tag="ended"):
    pass


class Refused(msgspec.Struct, frozen=True, tag_field="event", tag="refused"):
    rid: str | None = None
    message: str = ""


LedgerOp = Claim | Drop
LedgerEvent = Granted | Busy | Ended | Refused
LEDGER_OPS = ("claim", "drop")

_encoder = msgspec.json.Encoder()
_op_decoder = msgspec.json.Decoder(LedgerOp)
_event_decoder = msgspec.json.Decoder(LedgerEvent)


def encode(message: msgspec.Struct) -> bytes:
    """The JSON bytes of a ledger message (its tag included)."""
    return _encoder.encode(message)


def _decode(decoder: msgspec.json.Decoder, payload: bytes, what: str):
    if len(payload) > MAX_LEDGER_MESSAGE_BYTES:
        raise ValueError(f"{what} of {len(payload)} bytes exceeds {MAX_LEDGER_MESSAGE_BYTES}")
    try:
        return decoder.decode(payload)
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "`$.op`" in text or "missing required field `op`" in text:
            text = f"unknown or missing 'op'; accepted: {', '.join(LEDGER_OPS)}"
        raise ValueError(f"bad {what}: {text}") from exc
    except RecursionError as exc:
        raise ValueError(f"bad {what}: nested too deeply") from exc


def decode_op(payload: bytes) -> LedgerOp:
    """A router's message to the ledger; ``ValueError`` naming what is wrong."""
    return _decode(_op_decoder, payload, "ledger message")


def decode_event(payload: bytes) -> LedgerEvent:
    """The ledger's answer to a router; ``ValueError`` naming what is wrong."""
    return _decode(_event_decoder, payload, "ledger event")


# A refused message's rid (to tell its sender): the control codec reads it the same way.
rid_of = codec.rid_of
