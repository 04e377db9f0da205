"""Messages on the Main-Decode control socket (ZeroMQ ROUTER on --pdd-control-port).

Router -> Main-Decode:
  {"op": "watch", "rid": R}              send me R's events
  {"op": "handoff", "rid": R, "token_ids": [...], "final": bool}
                                         the tokens the client already has (P's first token and
                                         Relay-Decode's); extend over them and decode on (final)
                                         or only build their KV and stay parked (Catch-Up chunk)
  {"op": "release", "rid": R}            R finished on Relay-Decode: let its KV land, keep it
                                         in the radix cache, and end the request
Main-Decode -> router (to the peer that sent "watch"):
  {"event": "ready", "rid": R, "t": unix_time, "prompt_tokens": n, "received_tokens": n,
   "cached_tokens": n, "kv_bytes": n, "extended_tokens": n}
                                         R's KV has arrived; R is parked (sent again for each
                                         watch: extended_tokens says how many handed-off ids
                                         MD has built KV for)
  {"event": "extended", "rid": R, "t": unix_time, "tokens": k, "final": bool}
                                         the handoff extend ran (final: R decodes on MD now)
  {"event": "deferred", "rid": R, "message": text}
                                         no KV room for R's final handoff now: it was dropped,
                                         R stays parked; send it again later (RLD streams on)
  {"event": "error", "rid": R, "message": text}
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from sglang_pdd.main_decode import RELAYED_RID_SUFFIX
from sglang_pdd.prefill import MAIN_PREFILL_SUFFIX, RELAY_PREFILL_SUFFIX

OPS = ("watch", "handoff", "release")
EVENTS = ("ready", "extended", "deferred", "error")
MAX_MESSAGE_BYTES = 16 << 20  # a handoff of a million ids fits; anything larger is refused
MAX_RID_CHARS = 512


def encode(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _load(payload: bytes, what: str) -> dict:
    """A JSON object with a string 'rid' (both directions); ValueError otherwise."""
    try:
        obj = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("rid"), str):
        raise ValueError(f"{what} needs a string 'rid'")
    return obj


def decode(payload: bytes, vocab_size: int | None = None) -> dict:
    """Parse a control message; raise ValueError for anything malformed.

    ``vocab_size``: when given, handed-off token ids must lie in ``[0, vocab_size)`` (an id
    outside the embedding would crash the model's forward)."""
    if len(payload) > MAX_MESSAGE_BYTES:
        raise ValueError(f"control message of {len(payload)} bytes exceeds {MAX_MESSAGE_BYTES}")
    message = _load(payload, "control message")
    if not message["rid"] or len(message["rid"]) > MAX_RID_CHARS:
        raise ValueError(f"'rid' must have 1..{MAX_RID_CHARS} characters")
    if "op" in message:
        if message["op"] not in OPS:
            raise ValueError(f"unknown op {message['op']!r}; accepted: {', '.join(OPS)}")
        if message["op"] == "handoff":
            ids = message.get("token_ids")
            if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in ids
            ):
                raise ValueError("handoff needs 'token_ids', a list of ints")
            if vocab_size is not None and any(not 0 <= t < vocab_size for t in ids):
                raise ValueError(f"handoff 'token_ids' must lie in [0, {vocab_size})")
            if not isinstance(message.get("final", True), bool):
                raise ValueError("handoff 'final' must be true or false")
    return message


# -- router -> Main-Decode ---------------------------------------------------------------------
def watch(rid: str) -> bytes:
    return encode({"op": "watch", "rid": rid})


def handoff(rid: str, token_ids: list[int], final: bool) -> bytes:
    return encode({"op": "handoff", "rid": rid, "token_ids": list(token_ids), "final": final})


def release(rid: str) -> bytes:
    return encode({"op": "release", "rid": rid})


# -- Main-Decode -> router ---------------------------------------------------------------------
def decode_event(payload: bytes) -> dict:
    """Parse an event from Main-Decode; raise ValueError for anything malformed."""
    event = _load(payload, "event")
    if event.get("event") not in EVENTS:
        raise ValueError(f"unknown event {event.get('event')!r}; known: {', '.join(EVENTS)}")
    return event


@dataclass(frozen=True)
class SubRids:
    """The rids one run of a client request takes on each instance (one place names them all).

    ``rid`` is the router's own, new for every run (``SubRids.fresh()``): a client's rid is a
    label only. A client reusing its rid as soon as the request ended, or a rid that is the
    prefix of another client's, then never meets state an instance or the control channel
    still holds for the earlier request."""

    rid: str

    @classmethod
    def fresh(cls) -> SubRids:
        return cls(f"pdd-{uuid.uuid4().hex}")

    @property
    def prefill(self) -> str:  # P for P-MD and P-RLD
        return self.rid + ".p"

    @property
    def prefill_for_relay(self) -> str:  # P's send to RLD (P-RLD-MD)
        return self.rid + RELAY_PREFILL_SUFFIX

    @property
    def prefill_for_main(self) -> str:  # P's send to MD (P-RLD-MD), a radix hit on P
        return self.rid + MAIN_PREFILL_SUFFIX

    @property
    def relay(self) -> str:
        return self.rid + ".relay"

    @property
    def main(self) -> str:  # MD in P-MD
        return self.rid + ".main"

    @property
    def relayed(self) -> str:  # MD in P-RLD-MD: parked until the handoff
        return self.rid + RELAYED_RID_SUFFIX

    def on_prefill(self) -> list[str]:
        return [self.prefill, self.prefill_for_relay, self.prefill_for_main]

    def on_main(self) -> list[str]:
        return [self.main, self.relayed]
