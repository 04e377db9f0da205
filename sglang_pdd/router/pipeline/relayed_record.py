"""``RelayedRecorder``: what a relayed request's handoff puts into its ``PddRecord`` and log.

``RelayedPipeline`` feeds the handoff core and executes what it answers; the facts those inputs
and actions carry for the record (MD's wait and extend times, when it answered, each handoff
sent, deferrals, why the request stayed on RLD) are written here, in one place, not as side
effects of the loop's I/O.
"""

from __future__ import annotations

import logging
import time

from sglang_pdd.handoff.signals import (
    AbandonMain,
    FollowMain,
    KeepOnRelay,
    ResendLostHandoff,
    RetryLater,
    SendToMain,
    StayOnRelay,
    TakeOverFromLostRelay,
)
from sglang_pdd.router.pipeline.record import PddRecord
from sglang_pdd.wire.messages import Extended

logger = logging.getLogger("sglang_pdd.router")


class RelayedRecorder:
    """Writes one relayed request's handoff facts into ``record`` (times in seconds since
    ``t0``, the ``time.monotonic()`` the router received the request at) and logs them under
    ``rid``."""

    def __init__(self, record: PddRecord, t0: float, rid: str) -> None:
        self.record = record
        self.t0 = t0
        self.rid = rid

    def switch(self, overlap: bool) -> None:
        """How the client moves to MD's ids (``--handoff-switch``, as this request allows)."""
        self.record.handoff_switch = "overlap" if overlap else "hold"

    def main_event(self, event) -> None:
        """One of MD's control events: a final ``Extended`` carries its wait and extend times."""
        if isinstance(event, Extended) and event.final:
            self.record.main_waited_s = event.waited_s
            self.record.main_extend_s = event.extend_s

    def main_answered(self) -> None:
        """A chunk of MD's stream came (its first is its answer to the final handoff)."""
        if self.record.main_answer_s is None:
            self.record.main_answer_s = time.monotonic() - self.t0

    def handoff(self, action: SendToMain) -> None:
        """A handoff is about to go to MD."""
        self.record.handoff_mode = action.mode
        self.record.handoff_chunks = action.chunks
        if action.final:
            self.record.handoff_s = time.monotonic() - self.t0
            self.record.handoff_tokens = len(action.token_ids)

    def followed_main(self, action: FollowMain) -> None:
        """MD took the final handoff: the RLD ids held back are never sent."""
        self.record.relay_ids_dropped = action.dropped_ids

    def finished_on_relay(self) -> None:
        self.record.finished_on = "relay"

    def note(self, action) -> None:
        """Log and record an action that needs no I/O of its own."""
        rid = self.rid
        if isinstance(action, RetryLater):
            logger.info(
                "sglang-pdd router: %s: Main-Decode deferred the handoff (%s); "
                "Relay-Decode serves on",
                rid,
                action.message,
            )
            self.record.handoff_deferrals = action.deferrals
        elif isinstance(action, ResendLostHandoff):
            logger.info(
                "sglang-pdd router: %s: the final handoff was lost in a control "
                "reconnect; making it again",
                rid,
            )
        elif isinstance(action, KeepOnRelay):
            logger.info("sglang-pdd router: %s: %s; finishing on Relay-Decode", rid, action.reason)
            self.record.kept_on_relay = action.reason
        elif isinstance(action, StayOnRelay):
            logger.warning(
                "sglang-pdd router: %s: no handoff to Main-Decode (%s); finishing on Relay-Decode",
                rid,
                action.reason,
            )
            self.record.main_refused = action.reason
        elif isinstance(action, TakeOverFromLostRelay):
            logger.warning(
                "sglang-pdd router: %s: Relay-Decode failed (%s); Main-Decode, "
                "ready, takes over at once",
                rid,
                action.error,
            )
            self.record.relay_failed = str(action.error)[:300]
        elif isinstance(action, AbandonMain):
            logger.warning(
                "sglang-pdd router: %s: Main-Decode abandoned after the overlapped handoff (%s); "
                "Relay-Decode finishes",
                rid,
                action.reason,
            )
            self.record.main_refused = action.reason
        else:
            raise TypeError(f"no handler for {type(action).__name__}")
