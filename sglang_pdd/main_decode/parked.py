"""``ParkedRequests``: Main-Decode's parked requests and their control state, kept pure.

A relayed request parks on MD when its KV lands, until its router (the peer that watches it)
hands it off or releases it. This class holds all of that state for one scheduler rank: which
requests are parked, who watches each, the handoffs and releases waiting for them, and the
per-peer bounds. It performs no I/O and reads no clock: each method takes what happened (a
control message, a request's arrival, an abort, an extend) with the time, and returns the
``Action`` list that ``MainDecodeState`` executes on the control socket. Every TP rank feeds
it the same inputs in the same iteration, so all ranks park, hand off and release alike.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sglang_pdd.main_decode.idle_clock import IdleClock
from sglang_pdd.main_decode.watches import (
    MAX_HELD_HANDOFF_TOKENS_PER_PEER,
    MAX_WATCHES_PER_PEER,
    Watches,
)
from sglang_pdd.request_record import request_record
from sglang_pdd.wire.messages import (
    ControlMessage,
    Deferred,
    Error,
    Event,
    Expire,
    Extended,
    Handoff,
    Ready,
    Release,
    Watch,
)
from sglang_pdd.wire.rids import is_relayed

logger = logging.getLogger("sglang_pdd")
# How many scheduler iterations an abort that found nothing parked is remembered (covers an
# abort that overtook its request across the WAN). Counted in iterations, not seconds, so that
# every TP rank forgets it in the same iteration and all ranks park the same requests.
ABORT_MEMORY_ITERATIONS = 20_000


@dataclass(frozen=True)
class Notify:
    """Send ``event`` to ``identity``, the peer that watches its request."""

    identity: bytes
    event: Event


@dataclass(frozen=True)
class Refuse:
    """Tell the sender ``identity`` that its message about ``rid`` changed nothing, and why."""

    identity: bytes
    rid: str
    reason: str


Action = Notify | Refuse


@dataclass(frozen=True)
class HandoffDeferred:
    """An admission verdict: the final handoff has no room now; the router sends it again."""

    reason: str


class ParkedRequests:
    """One scheduler rank's parked requests and control state; see the module docstring."""

    def __init__(
        self,
        ttl_s: float = 600.0,
        max_watches_per_peer: int = MAX_WATCHES_PER_PEER,
        max_held_tokens_per_peer: int = MAX_HELD_HANDOFF_TOKENS_PER_PEER,
    ) -> None:
        """``ttl_s``: a request with no control activity that long is ended
        (``--pdd-parked-ttl-s``); the bounds are ``Watches``'."""
        # KV bytes a token takes in the pool; learnt from the scheduler when the first request
        # parks, so a "ready" sent again (to a late watch) still says what crossed the WAN.
        self.token_kv_bytes = 0
        self.idle = IdleClock(ttl_s)
        self.watches = Watches(max_watches_per_peer, max_held_tokens_per_peer)
        self.parked: dict[str, object] = {}  # rid -> Req with its prompt KV in place
        self.parked_at: dict[str, float] = {}  # rid -> wall-clock time it parked
        self.releases: set[str] = set()  # finished on Relay-Decode: end once the KV is in
        # Aborts that found nothing parked, by rid prefix: a relayed request whose KV lands
        # after its abort (the abort raced the transfer's last step) is ended, not parked.
        self.recent_aborts: dict[str, int] = {}  # rid prefix -> iteration of the abort
        self.iteration = 0  # scheduler iterations seen (next_iteration counts them)
        self.kv_waits: set[str] = set()  # rids whose handoff waited for memory (logged once)

    # -- control messages -----------------------------------------------------------------
    def apply(self, identity: bytes, message: ControlMessage | Expire, now: float) -> list[Action]:
        """Act on one control message from peer ``identity`` (``now``: monotonic seconds)."""
        rid = message.rid
        if isinstance(message, Expire):  # made by rank 0 (the socket never accepts it)
            return self._expire(rid)
        self.idle.touch(rid, now)
        owner = self.watches.watchers.get(rid)
        if owner is not None and owner != identity:
            # A peer acts only on requests it watched first: no other peer may redirect their
            # events, release them or hand them tokens.
            logger.warning(
                "sglang-pdd: %s for %s from a peer that does not own it refused", _op(message), rid
            )
            return [Refuse(identity, rid, "another peer owns this request")]
        if isinstance(message, Watch):
            if (refusal := self.watches.watch(rid, identity)) is not None:
                return [Refuse(identity, rid, refusal)]
            return self._notify(self._ready_event(self.parked[rid])) if rid in self.parked else []
        if owner is None:
            return [Refuse(identity, rid, f"{_op(message)} before watch")]
        if isinstance(message, Release):
            self.releases.add(rid)
        elif isinstance(message, Handoff):
            if (refusal := self.watches.hold(message, identity, now)) is not None:
                return [Refuse(identity, rid, refusal)]
        return []

    def expired(self, now: float) -> list[str]:
        """Rids idle past the TTL, for rank 0 to turn into ``Expire`` items (forgotten here)."""
        return self.idle.expired(now)

    def _expire(self, rid: str) -> list[Action]:
        """No control activity for ``idle.ttl_s``: end a parked request (its KV is cached, as
        for a release) and drop what the control state holds for the rid."""
        self.idle.forget(rid)
        self.watches.drop_handoff(rid)
        actions = []
        if rid in self.parked:
            logger.warning(
                "sglang-pdd: %s parked %.0f s without a handoff or release: ending it "
                "(--pdd-parked-ttl-s)",
                rid,
                self.idle.ttl_s,
            )
            why = "parked past --pdd-parked-ttl-s without a handoff or release"
            actions = self._notify(Error(rid=rid, message=why))
            self.releases.add(rid)
        else:
            self.releases.discard(rid)
        self.watches.unwatch(rid)
        return actions

    # -- parking ----------------------------------------------------------------------------
    def next_iteration(self) -> None:
        """A scheduler iteration begins (the abort memory counts them)."""
        self.iteration += 1

    def arrive(self, req, wall: float, now: float) -> list[Action]:
        """``req``'s KV has landed: announce it; park it if relayed (``parked`` then holds it),
        else (a P-MD request, which decodes on) forget it."""
        rid = req.rid
        self.parked_at[rid] = wall
        self.idle.touch(rid, now)
        actions = self._notify(self._ready_event(req))
        if is_relayed(rid):
            self.parked[rid] = req
            if self._aborted_before_parking(rid):
                self.releases.add(rid)  # ends through SGLang's abort, KV cached
        else:
            self.parked_at.pop(rid, None)
            self.watches.unwatch(rid)  # a P-MD request: nothing more to report
            self.idle.forget(rid)
        return actions

    def unpark_for_abort(self, rid_prefix: str, abort_all: bool) -> list:
        """Unpark what an abort names; returns those requests, each to go back to the head of
        the waiting queue in turn, where SGLang's abort releases them."""
        named = [r for r in self.parked if abort_all or r.startswith(rid_prefix)]
        unparked = []
        for rid in named:
            unparked.append(self.parked.pop(rid))
            self.parked_at.pop(rid, None)
            self.idle.forget(rid)
            self.watches.unwatch(rid)
            self.kv_waits.discard(rid)
        if not named and rid_prefix and not abort_all:
            self._forget_old_aborts()  # also here: an MD serving only P-MD never parks
            self.recent_aborts[rid_prefix] = self.iteration
        for rid in [r for r in self.releases if abort_all or r.startswith(rid_prefix)]:
            self.releases.discard(rid)
        return unparked

    def _forget_old_aborts(self) -> None:
        cutoff = self.iteration - ABORT_MEMORY_ITERATIONS
        for prefix in [p for p, t in self.recent_aborts.items() if t < cutoff]:
            del self.recent_aborts[prefix]

    def _aborted_before_parking(self, rid: str) -> bool:
        self._forget_old_aborts()
        return any(rid.startswith(prefix) for prefix in self.recent_aborts)

    def take_releases(self) -> list[str]:
        """Parked requests that finished on Relay-Decode, to end through SGLang's abort."""
        due = [r for r in self.releases if r in self.parked]
        for rid in due:
            self.releases.discard(rid)
        return due

    # -- handoffs ---------------------------------------------------------------------------
    def take_ready_handoffs(self, admit) -> tuple[list[tuple], list[Action]]:
        """Parked requests whose handoff has arrived and ``admit`` lets through now, as
        ``(req, token_ids, final, verdict)``, and the actions to execute.

        ``admit(req, token_ids, final)`` answers True (run it now), False (leave it for a
        later iteration), ``HandoffDeferred`` (drop it and tell the router, which sends it again
        later; the request stays parked) or a reason to refuse it (returned with that reason,
        the handoff dropped). A final handoff taken leaves ``parked`` (it decodes on); a
        Catch-Up chunk stays parked, to be extended while Relay-Decode keeps generating.
        """
        taken, actions = [], []
        for rid in [r for r in self.watches.handoffs if r in self.parked]:
            token_ids, final = self.watches.handoffs[rid]
            req = self.parked[rid]
            verdict = admit(req, token_ids, final)
            if verdict is False:
                continue
            self.watches.drop_handoff(rid)
            if isinstance(verdict, HandoffDeferred):
                actions += self._notify(Deferred(rid=rid, message=verdict.reason))
                continue
            if verdict is True and final:
                del self.parked[rid]
                self.parked_at.pop(rid, None)
                self.idle.forget(rid)
            taken.append((req, token_ids, final, verdict))
        return taken, actions

    def handoff_runnable(self) -> bool:
        """A handoff the next extend batch can take (its request parked, not waiting for KV
        memory): the scheduler must not wait on the control socket before running it."""
        handoffs = self.watches.handoffs
        return any(rid in self.parked and rid not in self.kv_waits for rid in handoffs)

    def note_kv_wait(self, rid: str) -> None:
        """A handoff waits for KV memory (logged once per request)."""
        if rid not in self.kv_waits:
            self.kv_waits.add(rid)
            logger.info("sglang-pdd: %s: handoff waits for KV memory", rid)

    def refuse(self, req, reason: str) -> list[Action]:
        """A handoff was refused: the request stays parked until aborted; tell its router."""
        logger.error("sglang-pdd: %s: handoff refused: %s", req.rid, reason)
        self.parked.setdefault(req.rid, req)
        return self._notify(Error(rid=req.rid, message=f"handoff refused: {reason}"))

    def note_extend_started(self, rid: str, now: float) -> None:
        """The extend batch carrying ``rid``'s handoff was built (it runs next)."""
        if (times := self.watches.handoff_times.get(rid)) is not None:
            times[1] = now

    def notify_extended(
        self, rid: str, tokens: int, final: bool, now: float, wall: float
    ) -> list[Action]:
        """MD holds KV for ``tokens`` handed-off ids: the "extended" event, with how long the
        handoff waited on MD and how long its extend batch ran (0 if none ran)."""
        arrived, started = self.watches.handoff_times.pop(rid, None) or (None, None)
        waited = extend = None
        if arrived is not None:
            waited = (started or now) - arrived
            extend = now - started if started is not None else 0.0
        event = Extended(
            rid=rid, t=wall, tokens=tokens, final=final, waited_s=waited, extend_s=extend
        )
        actions = self._notify(event)
        if final:
            self.watches.unwatch(rid)
            self.kv_waits.discard(rid)
        return actions

    # -- events -----------------------------------------------------------------------------
    def _notify(self, event: Event) -> list[Action]:
        """``event`` for the router that watches its rid now (none: nobody to tell)."""
        identity = self.watches.watchers.get(event.rid)
        return [] if identity is None else [Notify(identity, event)]

    def _ready_event(self, req) -> Ready:
        prompt = len(req.origin_input_ids)
        # match_kv_cache set prefix_len to the decode-side radix hit; P sent the rest.
        cached = int(req.prefix_len or 0)
        return Ready(
            rid=req.rid,
            t=self.parked_at[req.rid],
            prompt_tokens=prompt,
            cached_tokens=cached,
            received_tokens=prompt - cached,
            kv_bytes=(prompt - cached) * self.token_kv_bytes,
            # Handed-off ids whose KV is built (Catch-Up chunks): a router that lost an
            # "extended" event in a reconnect learns it from the "ready" its new watch brings.
            extended_tokens=request_record(req).extended_ids,
        )


def _op(message: ControlMessage) -> str:
    """The wire tag of a control message (``watch``, ``handoff``, ``release``), for logs."""
    return type(message).__struct_config__.tag
