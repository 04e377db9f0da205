"""``RelayedContext``: what the P-RLD-MD pipeline needs of the request it runs.

``RelayedPipeline`` (``relayed.py``) and the finish-on-relay paths (``relayed_release.py``) are
given one explicitly rather than inheriting it: ``PddRequestRun`` is one, and composes them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine

    from sglang_pdd.router.instances.main_site import MainSite
    from sglang_pdd.router.instances.transfers import MainTransfer
    from sglang_pdd.router.pipeline.record import Finished, PddRecord, TokenDelta
    from sglang_pdd.router.state import RouterState
    from sglang_pdd.router.upstream.chunk_queue import PumpedStream
    from sglang_pdd.router.upstream.chunks import ChunkMeta
    from sglang_pdd.wire.messages import Ready
    from sglang_pdd.wire.rids import SubRids


class RelayedContext(Protocol):
    """One request's router, instances, rids and record, and the sub-request helpers the
    relayed pipeline shares with P-MD and P-RLD."""

    router: RouterState
    rid: str  # the client's (in logs)
    t0: float  # time.monotonic() when the router received the request
    ids: SubRids
    record: PddRecord
    body: dict  # the /generate body: input_ids, sampling_params, ...
    prefill_url: str
    relay_url: str
    main: MainSite
    site: MainSite  # the router's view of MD (its cache, its link's transfers)
    released: bool  # finished on RLD; MD still receives (and caches) the KV

    def since(self) -> float:
        """Seconds since the router received the request."""

    def spawn(self, coro: Coroutine) -> asyncio.Task:
        """Run a sub-request's task, cancelled when the request ends."""

    def prefill(self, rid: str, room: int) -> Coroutine:
        """P's sub-request ``rid`` for bootstrap room ``room``."""

    def sub_body(self, rid: str, room: int) -> dict:
        """The /generate body of a sub-request for bootstrap room ``room``."""

    def stream_into_queue(
        self, url: str, body: dict, answer_due: Callable[[], bool] | None = None
    ) -> PumpedStream:
        """Stream ``url``'s answer into a queue; ``answer_due``: a parked stream's idle limit
        applies only while it says so."""

    def try_claim(self, main_rid: str, *, learn: bool) -> tuple[MainTransfer | None, object]:
        """Register the transfer to MD now, or say what it waits for."""

    async def claim(self, main_rid: str, *, learn: bool) -> MainTransfer:
        """Wait for MD's link, then register the transfer."""

    async def claim_shared(self, transfer: MainTransfer, waited_s: float = 0.0) -> str | None:
        """Claim ``transfer`` on the routers' shared ledger (None: claimed)."""

    def drop_transfer(self) -> None:
        """The registered transfer never landed: free its waiters."""

    def spawn_first_prefill(self, rid: str, room: int) -> asyncio.Task:
        """P's first send (for RLD), watched until it answers."""

    def main_prefill_done(self, task: asyncio.Task) -> None:
        """P's send to MD answered."""

    def detach(self, *tasks: asyncio.Task) -> None:
        """Let ``tasks`` outlive the request."""

    def delta(self, token_ids: list[int], source: str, meta: ChunkMeta | None) -> TokenDelta:
        """New ids for the client, recorded."""

    def finished(self, finish_reason: dict | None) -> Finished:
        """The request's end, recorded."""

    def relay_itl(self) -> float | None:
        """RLD's seconds per id for this request so far."""

    def start_handoff_gap(self) -> None:
        """The client's gap at the switch starts at its last id."""

    def note_ready(self, event: Ready) -> None:
        """MD reported the prompt's KV landed."""

    def main_ended(self, output_ids: list[int] | tuple = ()) -> None:
        """MD's request ended normally: its cache holds the prompt (and ``output_ids``)."""

    def follow_main(
        self,
        main_q: PumpedStream,
        events: asyncio.Queue,
        already_sent: int,
        expected_prefix: list[int] | tuple = (),
        early: list | tuple = (),
    ) -> AsyncIterator[TokenDelta | Finished]:
        """Forward MD's ids past ``already_sent``, then ``Finished``."""
