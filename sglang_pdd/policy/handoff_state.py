"""``RelayedHandoff``: where one P-RLD-MD request stands in its handoff, and what to do next.

The router feeds it what happens (RLD streamed more ids, MD reported its KV ready, MD finished
extending a Catch-Up chunk) and asks ``next_step`` after each; the answer is to wait, to send MD
a Catch-Up chunk (RLD keeps decoding), or to make the final handoff (RLD stops). No I/O, so
every transition is unit-tested without servers.

Rules:
* nothing goes to MD before its KV is ready, nor while a chunk's extend is pending;
* MD needs at least one id it has not been handed (the client's newest), so a handoff waits
  for RLD's first id even when MD is ready before it, and a Catch-Up chunk keeps the newest id
  back for the final handoff;
* once the final handoff is made nothing else is sent; RLD finishing first ends the request
  on RLD whatever was handed before.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_pdd.policy.handoff import HandoffPolicy

CHUNK, FINAL = "chunk", "final"


@dataclass(frozen=True)
class HandoffStep:
    """Send MD the first ``upto`` relayed ids; ``kind`` is ``chunk`` or ``final``."""

    kind: str
    upto: int


class RelayedHandoff:
    """The handoff state of one relayed request."""

    def __init__(self, policy: HandoffPolicy) -> None:
        self.policy = policy
        self.relayed = 0  # ids RLD has streamed to the router
        self.handed = 0  # ids MD has been given
        self.ready = False  # MD reported the prompt's KV in place
        self.chunk_in_flight = False  # a Catch-Up chunk was sent; its "extended" is pending
        self.chunks = 0  # handoff messages sent (chunks and the final one)
        self.mode: str | None = None  # the mode in force at the first step
        self.done = False  # the final handoff was made

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

    def next_step(self, relay_load: float) -> HandoffStep | None:
        """What to send MD now (and record it as sent), or None to wait."""
        if self.done or not self.ready or self.chunk_in_flight or self.relayed <= self.handed:
            return None
        backlog = self.relayed - self.handed
        plan = self.policy.plan(backlog, relay_load)
        self.mode = self.mode or plan.mode
        chunk = min(plan.tokens_now, backlog - 1)
        self.chunks += 1
        if plan.relay_continues and chunk > 0:
            self.handed += chunk
            self.chunk_in_flight = True
            return HandoffStep(CHUNK, self.handed)
        self.handed = self.relayed
        self.done = True
        return HandoffStep(FINAL, self.handed)
