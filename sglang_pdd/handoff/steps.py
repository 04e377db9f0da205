"""``RelayedHandoff``: what to send Main-Decode next for one P-RLD-MD request.

The step planner inside ``handoff.core.HandoffCore`` (the simulator drives it directly).

The router feeds it what happens (RLD streamed more ids, MD reported its KV ready, MD finished
extending a Catch-Up chunk, MD took, deferred or refused the final handoff) and asks
``next_step`` after each; the answer is to wait, to send MD a Catch-Up chunk (RLD keeps
decoding), or to make the final handoff. RLD stops only once MD has taken the final handoff:
until then the router holds RLD's newer ids back from the client, and if MD defers it (no KV
room now) they go to the client and the final handoff is made again ``retry_s`` later with
them; if MD refuses, the request finishes on RLD. No I/O, so every transition is unit-tested
without servers.

Rules:
* nothing goes to MD before its KV is ready, nor while a chunk's extend is pending;
* MD needs at least one id it has not been handed (the client's newest), so a handoff waits
  for RLD's first id even when MD is ready before it, and a Catch-Up chunk keeps the newest id
  back for the final handoff;
* once the final handoff is made nothing else is sent until MD answers it; after MD took it
  nothing more is sent; RLD finishing first (with no final handoff pending) ends the request
  on RLD whatever was handed before;
* a ``ready`` after the first is MD answering a redialed control connection: what it says MD
  holds is the truth, and a chunk or final handoff lost in the gap is made again;
* RLD failing while MD is ready makes the final handoff at once with every id the client has
  (once a chunk in flight is answered), whatever the policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_pdd.policy.handoff import HANDOFF_RETRY_S, HandoffPolicy

CHUNK, FINAL = "chunk", "final"


@dataclass(frozen=True)
class HandoffStep:
    """Send MD the first ``upto`` relayed ids; ``kind`` is ``chunk`` or ``final``."""

    kind: str
    upto: int


class RelayedHandoff:
    """The handoff state of one relayed request."""

    def __init__(self, policy: HandoffPolicy, retry_s: float = HANDOFF_RETRY_S) -> None:
        self.policy = policy
        self.retry_s = retry_s  # how long after a deferral the final handoff is made again
        self.relayed = 0  # ids RLD has streamed to the router
        self.handed = 0  # ids MD has been given
        self.ready = False  # MD reported the prompt's KV in place
        self.chunk_in_flight = False  # a Catch-Up chunk was sent; its "extended" is pending
        self.chunks = 0  # handoff messages sent (chunks and final ones)
        self.mode: str | None = None  # the mode in force at the first step
        self.final_pending = False  # a final handoff was sent; MD has not answered it
        self.done = False  # MD took the final handoff: it decodes the request now
        self.refused = False  # MD refused a handoff: the request stays on RLD
        self.deferrals = 0
        self.relay_gone = False  # RLD failed with MD ready: MD takes every id at once
        self._extended = 0  # ids MD holds KV for (Catch-Up chunks it extended)
        self._retry_at = 0.0

    def relay_progress(self, total_ids: int) -> None:
        """RLD has streamed ``total_ids`` ids in all."""
        if total_ids < self.relayed:
            raise ValueError(f"RLD's stream went back from {self.relayed} to {total_ids} ids")
        self.relayed = total_ids

    def main_ready(self) -> None:
        self.ready = True

    def chunk_extended(self) -> None:
        """MD built the KV of the last chunk."""
        self.chunk_in_flight = False
        self._extended = self.handed

    def final_taken(self) -> None:
        """MD ran the final handoff's extend: it decodes on; RLD may stop."""
        self.final_pending = False
        self.done = True

    def final_deferred(self, now: float | None = None) -> None:
        """MD had no KV room for the final handoff: make it again at ``now + retry_s``
        (``now`` None: ``retry_s`` after the next ``next_step`` call's ``now``)."""
        self.final_pending = False
        self.handed = self._extended
        self.deferrals += 1
        self._retry_at = None if now is None else now + self.retry_s

    def main_rewatched(self, extended_tokens: int) -> bool:
        """MD answered a new watch (the control connection was redialed) with ``ready``: the
        request is still parked there, with KV for ``extended_tokens`` handed-off ids. A chunk
        whose ``extended`` was lost in the gap counts as extended; a chunk or final handoff
        that was itself lost (MD holds less than was handed) is made again. Returns True if a
        final handoff was lost (the caller then lets the ids it held back go to the client)."""
        self._extended = max(self._extended, min(extended_tokens, self.handed))
        if self.chunk_in_flight:
            self.chunk_in_flight = False
            self.handed = self._extended
            return False
        if self.final_pending:  # MD would no longer be parked had it taken it
            self.final_pending = False
            self.handed = self._extended
            return True
        return False

    def relay_lost(self) -> None:
        """RLD failed while MD holds the KV: the final handoff goes as soon as nothing else is
        in flight, with every id the client has (none: MD continues from P's first token)."""
        self.relay_gone = True

    def main_refused(self) -> None:
        """MD refused a handoff (the request will finish on RLD): nothing more goes to MD."""
        self.final_pending = self.chunk_in_flight = False
        self.refused = True

    def next_step(self, relay_load: float, now: float = 0.0) -> HandoffStep | None:
        """What to send MD now (and record it as sent), or None to wait."""
        if self._retry_at is None:
            self._retry_at = now + self.retry_s
        if (
            self.done
            or self.refused
            or self.final_pending
            or not self.ready
            or self.chunk_in_flight
            or now < self._retry_at
        ):
            return None
        if self.relay_gone:
            self.mode = self.mode or "one-shot"
            return self._final()
        if self.relayed <= self.handed:
            return None
        backlog = self.relayed - self.handed
        plan = self.policy.plan(backlog, relay_load)
        self.mode = self.mode or plan.mode
        chunk = min(plan.tokens_now, backlog - 1)
        if plan.relay_continues and chunk > 0 and not self.deferrals:
            self.chunks += 1
            self.handed += chunk
            self.chunk_in_flight = True
            return HandoffStep(CHUNK, self.handed)
        return self._final()

    def _final(self) -> HandoffStep:
        self.chunks += 1
        self.handed = self.relayed
        self.final_pending = True
        return HandoffStep(FINAL, self.handed)
