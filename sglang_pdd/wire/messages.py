"""The Main-Decode control channel's messages, as tagged ``msgspec.Struct`` classes.

Router -> Main-Decode (ZeroMQ DEALER -> ROUTER on ``--pdd-control-port``), tagged ``"op"``:

* ``Watch``: send me this rid's events (again after a reconnect: MD answers ``Ready`` if parked).
* ``Handoff``: the ids the client already has (P's first token and RLD's); MD extends over them
  and decodes on (``final``), or only builds their KV and stays parked (a Catch-Up chunk).
* ``Release``: the request finished on Relay-Decode: let its KV land, cache it, end it.

Main-Decode -> router (to the peer that watched the rid), tagged ``"event"``:

* ``Ready``: the prompt's KV is in place and the request is parked (sent again for each watch;
  ``extended_tokens`` says how many handed-off ids MD holds KV for).
* ``Extended``: a handoff's extend ran (``final``: MD decodes the request now).
* ``Deferred``: no KV room for the final handoff now; the request stays parked, RLD streams on.
* ``Error``: a message was refused or the request ended on MD without a handoff.

``Expire`` never crosses the socket: rank 0 makes it for a rid idle past the TTL, and it rides
SGLang's broadcast to every TP rank with the messages read in that iteration.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

MAX_MESSAGE_BYTES = 16 << 20  # a handoff of a million ids fits; anything larger is refused
MAX_RID_CHARS = 512

Rid = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_RID_CHARS)]
TokenId = Annotated[int, msgspec.Meta(ge=0)]
Count = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]


class _Op(msgspec.Struct, frozen=True, tag_field="op"):
    rid: Rid


class Watch(_Op, frozen=True, tag="watch"):
    pass


class Handoff(_Op, frozen=True, tag="handoff"):
    token_ids: list[TokenId]
    final: bool = True


class Release(_Op, frozen=True, tag="release"):
    pass


class Expire(_Op, frozen=True, tag="expire"):
    pass


class _Event(msgspec.Struct, frozen=True, tag_field="event"):
    rid: Rid


class Ready(_Event, frozen=True, tag="ready"):
    t: float | None = None  # unix time MD parked the request (its KV in place)
    prompt_tokens: Count = 0
    received_tokens: Count = 0  # prompt tokens whose KV crossed from P
    cached_tokens: Count = 0  # prompt tokens MD's radix cache already held
    kv_bytes: Count | None = None  # bytes received (only in the first Ready of a request)
    extended_tokens: Count = 0  # handed-off ids whose KV MD has built


class Extended(_Event, frozen=True, tag="extended"):
    tokens: Count
    final: bool
    t: float | None = None
    # MD's side of the handoff, in seconds: from its arrival to the extend batch that carried it
    # (MD waited for a batch or KV room), and that batch's run (the extend forward).
    waited_s: Seconds | None = None
    extend_s: Seconds | None = None


class Deferred(_Event, frozen=True, tag="deferred"):
    message: str = ""


class Error(_Event, frozen=True, tag="error"):
    message: str = ""


ControlMessage = Watch | Handoff | Release  # what a peer may send MD
Event = Ready | Extended | Deferred | Error
OPS = ("watch", "handoff", "release")
EVENTS = ("ready", "extended", "deferred", "error")
