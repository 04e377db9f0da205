"""``HandoffCore``: all of one relayed request's handoff state, as a pure state machine.

The router's loop (``router/pipeline/relayed.py``) feeds it what it reads (``signals``' inputs
and MD's ``wire.messages`` events) and executes the actions it returns; it keeps no handoff
state of its own. The rules, each enforced here:

* RLD's ids go to the client as they come. How the client moves to MD's ids is the switch:

  - ``hold`` (any request): while a final handoff is pending (sent, not yet answered) RLD's
    ids are held back. MD taking the handoff drops them (MD regenerates them); MD deferring or
    refusing it, or the handoff being lost in a control reconnect, sends them in order. The
    client waits one RTT, the extend and one MD step.
  - ``overlap`` (deterministic requests only: greedy, or seeded where every instance runs the
    seeded sampler): RLD keeps streaming after the final handoff; MD's ids are checked against
    RLD's over the overlap, and the client switches to MD once MD's stream is ahead of what it
    has (no gap). If MD has not caught up one handoff gap (``Tick.handoff_gap_s``) after its
    first ids came, RLD's newer ids are held from then (the gap left is no larger than holding
    would have cost, and an MD no faster than RLD does not leave RLD serving for good) until
    MD is ahead. They are held sooner once MD's own pace (its ids per second over the ticks
    since its first) says it will not catch up RLD within that time: every id RLD streams
    meanwhile is one more the client waits for MD to remake. MD's ids disagreeing with RLD's
    abandon MD (aborted; the held ids go out, RLD finishes); RLD finishing first aborts MD's
    copy.
* What to send MD and when is ``steps.RelayedHandoff``'s: nothing before MD's KV is ready, one
  Catch-Up chunk in flight at a time, a deferred final handoff made again ``retry_s`` later.
* RLD finishing first (no final handoff pending) ends the request on RLD.
* No handoff is made for a request whose remaining ids (``max_new_tokens`` less those RLD made)
  RLD makes before the handoff's gap would end: it finishes on RLD.
* RLD failing while MD holds the KV makes MD take every id the client has at once; failing
  before that (or after MD refused) fails the request (it migrates). P's own error, when P
  failed, is the one raised.
* MD refusing, failing or draining leaves the request on RLD; if RLD has failed too, the
  request fails with RLD's error.
* After the request ended (finished on RLD, taken by MD, failed) every input is ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_pdd.handoff.signals import (
    AbandonMain,
    Action,
    EmitRelayIds,
    Fail,
    FinishOnRelay,
    FollowMain,
    KeepOnRelay,
    MainChunk,
    MainLost,
    NoteReady,
    RelayChunk,
    RelayEnded,
    ResendLostHandoff,
    RetryLater,
    SendToMain,
    StayOnRelay,
    TakeOverFromLostRelay,
    Tick,
)
from sglang_pdd.handoff.steps import CHUNK, RelayedHandoff
from sglang_pdd.policy.handoff import HANDOFF_RETRY_S, HandoffPolicy
from sglang_pdd.wire.messages import Deferred, Error, Extended, Ready

if TYPE_CHECKING:
    from sglang_pdd.router.upstream.chunks import GenerateChunk

# How long MD's ids must have been seen to trust their pace over the router's estimate.
MAIN_PACE_MIN_S = 0.1


class HandoffCore:
    """One relayed request's handoff: ``on(input) -> [actions]``."""

    def __init__(
        self,
        policy: HandoffPolicy,
        retry_s: float = HANDOFF_RETRY_S,
        max_new_tokens: int | None = None,
        overlap: bool = False,
    ) -> None:
        self.steps = RelayedHandoff(policy, retry_s)
        self.max_new_tokens = max_new_tokens  # the request's budget (None: the rule is off)
        self.overlap = overlap  # the switch: RLD streams on until MD's ids are ahead
        self.relay_ids: list[int] = []  # RLD's ids the client has
        self.early_main: list[GenerateChunk] = []  # MD's chunks read before its "extended" event
        self.relay_error: Exception | None = None  # RLD failed; MD took over for it
        self.ended = False  # finished on RLD, taken by MD, or failed: nothing more happens
        self._held: list[RelayChunk | RelayEnded] = []  # read while a final handoff pends
        self._main_seen = False  # overlap: MD's stream has answered the final handoff
        self._hold_by: float | None = None  # overlap: hold RLD's ids from then if MD is behind
        self._holding = False  # overlap: RLD's ids held until MD is ahead of the client
        self._main_len = 0  # overlap: how many ids MD's stream has (its cumulative list)
        # Overlap: MD's pace, from (tick time, MD's ids) at the first tick that saw its ids and
        # at the latest tick they had grown, and how many ticks saw them grow.
        self._main_first: tuple[float, int] | None = None
        self._main_last: tuple[float, int] | None = None
        self._main_marks = 0

    # -- what the loop reads ----------------------------------------------------------------
    @property
    def final_pending(self) -> bool:
        """A final handoff was sent and MD has not answered it (read MD's stream too)."""
        return self.steps.final_pending

    @property
    def switching(self) -> bool:
        """Overlap: MD took the final handoff; the client is still on RLD's ids."""
        return self.overlap and self.steps.done and not self.steps.refused and not self.ended

    @property
    def reads_main(self) -> bool:
        """MD's stream is an input now (its answer to a final handoff, or its ids to compare)."""
        return self.steps.final_pending or self.switching

    @property
    def main_answer_due(self) -> bool:
        """MD owes the client tokens now (its stream's idle limit runs)."""
        return self.steps.final_pending or self.steps.done

    # -- the machine ------------------------------------------------------------------------
    def on(self, signal) -> list[Action]:
        """Feed one input; return what the loop must do, in order."""
        if self.ended:
            return []
        if isinstance(signal, (RelayChunk, RelayEnded)):
            # Overlap holds only RLD's failure (MD's answer decides who serves on), and RLD's
            # ids once MD has had one handoff gap to catch up.
            overlap_chunk = self.overlap and isinstance(signal, RelayChunk) and not self._holding
            if (self.steps.final_pending or self._holding) and not overlap_chunk:
                self._held.append(signal)
                return []
            return self._relay(signal)
        if isinstance(signal, Tick):
            return self._tick(signal)
        if isinstance(signal, Ready):
            return self._ready(signal)
        if isinstance(signal, Extended):
            if not signal.final:
                self.steps.chunk_extended()
                return []
            if self.overlap and not self.steps.final_pending:
                return []  # MD's stream answered first (or MD was abandoned)
            self.steps.final_taken()
            return self._release_held() if self.overlap else self._taken()
        if isinstance(signal, MainChunk):
            if self.overlap:
                return self._compare(signal.chunk)
            if not self.steps.final_pending:
                return []
            self.early_main.append(signal.chunk)
            self.steps.final_taken()
            return self._taken()
        if isinstance(signal, Deferred):
            if not self.steps.final_pending:
                return []
            self.steps.final_deferred()
            actions: list[Action] = [RetryLater(signal.message, self.steps.deferrals)]
            return actions + self._release_held()
        if isinstance(signal, Error):
            return self._stay_on_relay(signal.message)
        if isinstance(signal, MainLost):
            if self.steps.refused:
                return []
            return self._stay_on_relay(signal.reason)
        raise TypeError(f"HandoffCore cannot take {type(signal).__name__}")

    def _relay(self, signal: RelayChunk | RelayEnded) -> list[Action]:
        if isinstance(signal, RelayEnded):
            return self._relay_ended(signal)
        actions: list[Action] = []
        ids = signal.output_ids
        if len(ids) > len(self.relay_ids):
            first = not self.relay_ids
            actions.append(EmitRelayIds(list(ids[len(self.relay_ids) :]), signal.meta, first))
            self.relay_ids = list(ids)
            self.steps.relay_progress(len(ids))
        if signal.finish_reason:
            main_running = self.switching or (self.overlap and self.steps.final_pending)
            self.ended = True
            actions.append(FinishOnRelay(signal.finish_reason, main_running))
        return actions

    def _relay_ended(self, signal: RelayEnded) -> list[Action]:
        if self.relay_error is not None:
            return []  # the dead stream's end after its failure: MD has taken over
        if signal.prefill_error is not None:
            return self._fail(signal.prefill_error)
        if self.switching:  # MD took the handoff: it serves on from what the client has
            self.relay_error = signal.error
            self.ended = True
            return [TakeOverFromLostRelay(signal.error), FollowMain(list(self.relay_ids), [], 0)]
        if not self.steps.ready or self.steps.refused:
            return self._fail(signal.error)
        self.relay_error = signal.error
        self.steps.relay_lost()
        return [TakeOverFromLostRelay(signal.error)]

    def _ready(self, event: Ready) -> list[Action]:
        again = self.steps.ready  # MD answering the watch of a redialed connection
        self.steps.main_ready()
        actions: list[Action] = [NoteReady(event)]
        # It says how far MD extended: an "extended" lost in the reconnect is re-derived from
        # it, and a handoff message lost in it is made again.
        if again and self.steps.main_rewatched(event.extended_tokens):
            actions.append(ResendLostHandoff())
            actions += self._release_held()
        return actions

    def _tick(self, tick: Tick) -> list[Action]:
        if self.switching and self._main_seen:
            if self._hold_by is None:
                self._hold_by = tick.now + (tick.handoff_gap_s or 0.0)
            if self._main_last is None or self._main_last[1] != self._main_len:
                self._main_last = (tick.now, self._main_len)
                self._main_first = self._main_first or self._main_last
                self._main_marks += 1
            if tick.now >= self._hold_by or self._main_falls_behind(tick):
                self._holding = True  # MD has not caught up: the client waits for it
            return []
        if (reason := self._finishes_sooner_on_relay(tick)) is not None:
            self.steps.main_refused()  # nothing goes to MD; RLD finishes, MD is released
            return [KeepOnRelay(reason)]
        step = self.steps.next_step(tick.relay_load, tick.now)
        if step is None:
            return []
        final = step.kind != CHUNK
        ids = list(self.relay_ids[: step.upto])
        return [SendToMain(ids, final, self.steps.mode, self.steps.chunks)]

    def _main_falls_behind(self, tick: Tick) -> bool:
        """Overlap: MD's pace will not bring it level with RLD before ``_hold_by``. Its pace:
        measured over this request's ticks once they span ``MAIN_PACE_MIN_S`` (MD's chunks
        cross the WAN in bursts), before that the router's estimate for MD, if any."""
        if tick.relay_itl_s is None or tick.relay_itl_s <= 0 or self._main_first is None:
            return False  # too little to tell: the handoff-gap bound decides
        (t0, n0), (t1, n1) = self._main_first, self._main_last
        if t1 - t0 >= MAIN_PACE_MIN_S and self._main_marks >= 3:
            main_rate = (n1 - n0) / (t1 - t0)
        elif tick.main_itl_s is not None and tick.main_itl_s > 0:
            main_rate = 1 / tick.main_itl_s
        else:
            return False
        relay_rate = 1 / tick.relay_itl_s
        if main_rate <= relay_rate:
            return True  # it never catches up
        behind = len(self.relay_ids) - n1
        return behind / (main_rate - relay_rate) > self._hold_by - tick.now

    def _finishes_sooner_on_relay(self, tick: Tick) -> str | None:
        """Why RLD should finish the request itself, or None (the tail rule)."""
        s = self.steps
        if (
            self.max_new_tokens is None
            or tick.relay_itl_s is None
            or tick.handoff_gap_s is None
            or not s.ready
            or not self.relay_ids
            or s.relay_gone
            or s.final_pending
            or s.chunk_in_flight
            or s.done
            or s.refused
        ):
            return None
        remaining = self.max_new_tokens - len(self.relay_ids)
        if remaining * tick.relay_itl_s > tick.handoff_gap_s:
            return None
        return (
            f"RLD makes the {remaining} remaining ids in {remaining * tick.relay_itl_s:.3f} s, "
            f"within a handoff's {tick.handoff_gap_s:.3f} s"
        )

    def _compare(self, chunk: GenerateChunk) -> list[Action]:
        """Overlap: MD's cumulative ids against RLD's; switch once MD is ahead of the client."""
        actions: list[Action] = []
        if self.steps.final_pending:  # MD's stream answering is MD taking the handoff
            self.steps.final_taken()
            actions += self._release_held()
        if not self.switching:
            return actions
        self._main_seen = True
        ids, have = chunk.output_ids, self.relay_ids
        self._main_len = len(ids)
        n = min(len(ids), len(have))
        if ids[:n] != have[:n]:
            at = next(i for i in range(n) if ids[i] != have[i])
            self.steps.main_refused()
            self._holding = False
            why = f"MD's id {at} ({ids[at]}) differs from RLD's ({have[at]})"
            return actions + [AbandonMain(why)] + self._release_held()
        if len(ids) > len(have):
            return actions + self._taken(early=[chunk])
        return actions

    def _taken(self, early: list[GenerateChunk] | None = None) -> list[Action]:
        self.ended = True
        newest = max(
            (len(h.output_ids) for h in self._held if isinstance(h, RelayChunk)), default=0
        )
        dropped = max(newest - len(self.relay_ids), 0)
        self._held.clear()
        chunks = list(self.early_main) if early is None else early
        return [FollowMain(list(self.relay_ids), chunks, dropped)]

    def _stay_on_relay(self, reason: str) -> list[Action]:
        if self.relay_error is not None:
            return self._fail(self.relay_error)
        running = self.switching  # overlap: MD took the handoff, then failed or erred
        self.steps.main_refused()
        self._holding = False
        if running:
            return [AbandonMain(reason)] + self._release_held()
        return [StayOnRelay(reason)] + self._release_held()

    def _release_held(self) -> list[Action]:
        held, self._held = self._held, []
        actions: list[Action] = []
        for signal in held:
            if self.ended:
                break
            actions += self._relay(signal)
        return actions

    def _fail(self, error: BaseException) -> list[Action]:
        self.ended = True
        return [Fail(error)]
