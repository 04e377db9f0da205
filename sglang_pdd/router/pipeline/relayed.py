"""``RelayedPipeline``: P-RLD-MD, the pipeline that relays and hands off.

P prefills once for Relay-Decode (room 1, intra-datacenter), then again for Main-Decode (room 2: a
radix hit on P, sent over the WAN); Relay-Decode's tokens go to the client at once; when
Main-Decode reports the KV landed, the router hands it the token ids the client already has and
either keeps Relay-Decode going (Catch-Up chunks) or makes the final handoff. How the client
then moves to MD's ids (``handoff/core.py``): a deterministic request keeps RLD streaming until
MD's ids, checked against RLD's, are ahead (``--handoff-switch overlap``); any other holds RLD's
newer ids until MD answers, which reach the client only if MD defers or refuses it. A request that
finishes on Relay-Decode first is released on MD, which caches its KV (``relayed_release.py``).

The pipeline runs one request, given as a ``RelayedContext`` (``PddRequestRun`` composes it);
what the handoff puts into the request's record is a ``RelayedRecorder``'s job.
"""

from __future__ import annotations

import asyncio
import random
import time

from sglang_pdd.handoff.core import HandoffCore
from sglang_pdd.handoff.signals import (
    AbandonMain,
    EmitRelayIds,
    Fail,
    FinishOnRelay,
    FollowMain,
    MainChunk,
    MainLost,
    NoteReady,
    RelayChunk,
    RelayEnded,
    SendToMain,
    TakeOverFromLostRelay,
    Tick,
)
from sglang_pdd.router.pipeline.relayed_context import RelayedContext
from sglang_pdd.router.pipeline.relayed_record import RelayedRecorder
from sglang_pdd.router.pipeline.relayed_release import finish_on_relay
from sglang_pdd.router.pipeline.request_fields import deterministic, max_new_tokens
from sglang_pdd.router.upstream.calls import UpstreamError, abort
from sglang_pdd.router.upstream.chunk_queue import END as _END
from sglang_pdd.router.upstream.chunk_queue import PumpedStream

_READ_ORDER = ("prefill", "relay", "main", "event")


class RelayedPipeline:
    """The P-RLD-MD pipeline of one request (``ctx``): iterate ``run()`` for its
    ``TokenDelta``s and ``Finished``."""

    def __init__(self, ctx: RelayedContext) -> None:
        self.ctx = ctx
        self.recorder = RelayedRecorder(ctx.record, ctx.t0, ctx.rid)
        self.core: HandoffCore | None = None  # made once both of P's sends are under way
        self.control = ctx.site.control  # RouterState.control_for(ctx.main)
        self.relay_rid, self.main_rid = ctx.ids.relay, ctx.ids.relayed
        self.room1, self.room2 = random.getrandbits(63), random.getrandbits(63)
        self.prefill1: asyncio.Task | None = None  # P's send to RLD
        self.prefill2: asyncio.Task | None = None  # P's send to MD
        self.gate: asyncio.Task | None = None  # room 2 waiting for P's first send and MD's link
        self.main_q: PumpedStream | None = None  # MD's parked stream, once room 2 went

    def main_answer_due(self) -> bool:
        """A parked MD stream owes tokens: the final handoff was sent (or taken), or the
        request finished on RLD and MD ends it once its KV has landed."""
        return self.ctx.released or (self.core is not None and self.core.main_answer_due)

    async def _main_gate(self):
        """Room 2 may go once P's KV for room 1 is out (room 2 is then a radix hit on P) and no
        transfer on MD's link carries this prompt's prefix; returns the registered transfer."""
        await asyncio.shield(self.prefill1)
        return await self.ctx.claim(self.main_rid, learn=True)

    async def run(self):
        """Start both of P's sends, stream RLD's ids, feed what happens to the request's
        ``HandoffCore`` and execute what it answers, until MD or RLD finishes."""
        ctx = self.ctx
        events = await self.control.watch(self.main_rid)
        self.prefill1 = ctx.spawn_first_prefill(ctx.ids.prefill_for_relay, self.room1)
        relay_q = ctx.stream_into_queue(ctx.relay_url, ctx.sub_body(self.relay_rid, self.room1))
        claimed = None
        if ctx.router.config.main_transfer_start == "with-prefill":
            claimed, _ = ctx.try_claim(self.main_rid, learn=False)
            if claimed is not None and await ctx.claim_shared(claimed) is not None:
                claimed = None  # another router's transfer carries part of it: the gate waits
        if claimed is not None:
            # Room 2 goes now: MD's bootstrap and prefix match overlap P's prefill, and P holds
            # room 2 until room 1 is prefilled (patches/prefill_twin_hold.py), so its KV leaves
            # when the prefill ends, as a radix hit.
            main_rid, transfers = self.main_rid, ctx.site.transfers
            self.prefill1.add_done_callback(lambda _t: transfers.restart_clock(main_rid))
            self._start_main_side()
        else:
            self.gate = ctx.spawn(self._main_gate())
        core = self.core = self._new_core()
        follow: FollowMain | None = None
        while follow is None:
            actions: list = []
            reads = await _next_reads(relay_q, events, self.main_q, self.gate, core.reads_main)
            for kind, value in reads:
                if kind == "prefill":
                    # P's KV for room 1 is out; room 2 is now a radix hit on P (the gate
                    # registered its transfer).
                    self._start_main_side()
                    continue
                actions += core.on(self._signal(kind, value))
            if ctx.router.health.is_draining(ctx.main.url):
                actions += core.on(MainLost(f"{ctx.main.url} is draining"))
            actions += core.on(self._tick())
            while actions:
                action = actions.pop(0)
                if isinstance(action, EmitRelayIds):
                    if action.first:
                        ctx.router.note_prefill_time(ctx.since())
                    yield ctx.delta(action.token_ids, "relay", action.meta)
                elif isinstance(action, SendToMain):
                    actions[:0] = await self._send_to_main(action)
                elif isinstance(action, FinishOnRelay):
                    self.recorder.finished_on_relay()
                    finish_on_relay(
                        ctx,
                        self.main_q,
                        self.prefill1,
                        self.gate,
                        self.prefill2,
                        self.main_rid,
                        self.room2,
                        events,
                    )
                    await self._end_main_side(action)
                    yield ctx.finished(action.finish_reason)
                    return
                elif isinstance(action, AbandonMain):
                    self.recorder.note(action)
                    self._abort_in_background(ctx.main.url, self.main_rid)
                elif isinstance(action, FollowMain):
                    follow = action
                elif isinstance(action, Fail):
                    raise action.error
                else:
                    self._note(action)
        # MD took the final handoff. RLD's abort runs beside MD's takeover: MD's next token
        # must not wait for it.
        self.recorder.followed_main(follow)
        if core.overlap:  # the client's gap at the switch: its last id (RLD's) to MD's next
            ctx.start_handoff_gap()
        self._abort_in_background(ctx.relay_url, self.relay_rid)
        async for event in ctx.follow_main(
            self.main_q,
            events,
            already_sent=len(follow.relay_ids),
            expected_prefix=follow.relay_ids,
            early=follow.early,
        ):
            yield event

    def _new_core(self) -> HandoffCore:
        """The request's handoff core; the overlapped switch only where the answer is
        deterministic (greedy, or seeded with --seeded-sampling)."""
        config, sampling = self.ctx.router.config, self.ctx.body["sampling_params"]
        overlap = config.handoff_switch == "overlap" and deterministic(
            sampling, config.seeded_sampling
        )
        self.recorder.switch(overlap)
        return HandoffCore(
            self.ctx.router.handoff_policy,
            config.handoff_retry_s,
            max_new_tokens(sampling) if config.tail_on_relay else None,
            overlap=overlap,
        )

    def _tick(self) -> Tick:
        """What the core weighs at each look: now, RLD's load and pace, the gap, MD's pace."""
        router, ctx = self.ctx.router, self.ctx
        return Tick(
            time.monotonic(),
            router.relay_load(ctx.relay_url),
            ctx.relay_itl(),
            router.handoff_gap_estimate_s,
            router.main_itl_estimate_s(ctx.main.url),
        )

    def _start_main_side(self) -> None:
        """P's second send (room 2, to MD) and MD's parked sub-request."""
        ctx = self.ctx
        self.prefill2 = ctx.spawn(ctx.prefill(ctx.ids.prefill_for_main, self.room2))
        self.prefill2.add_done_callback(ctx.main_prefill_done)
        # Silent by design until the final handoff, or until the release of a request that
        # finished on RLD (MD then ends it once its KV has landed).
        self.main_q = ctx.stream_into_queue(
            ctx.main.url, ctx.sub_body(self.main_rid, self.room2), self.main_answer_due
        )

    async def _end_main_side(self, action: FinishOnRelay) -> None:
        """The request finished on RLD: stop MD's overlapped copy, or release its parked one."""
        if action.main_running:
            self._abort_in_background(self.ctx.main.url, self.main_rid)
        elif self.main_q is not None:  # best effort: MD ends it after --pdd-parked-ttl-s else
            self.control.release_nowait(self.main_rid)

    def _abort_in_background(self, url: str, rid: str) -> None:
        router = self.ctx.router
        router.run_in_background(abort(router.session, url, rid))

    def _signal(self, kind: str, value):
        """What one item read from RLD's stream, MD's stream or MD's events is, for the core."""
        if kind == "event":  # a wire.messages event
            self.recorder.main_event(value)
            return value
        if value is _END or isinstance(value, Exception):
            if kind == "main":  # MD's stream failed before it answered the final handoff
                failure = "ended" if value is _END else repr(value)
                return MainLost(f"Main-Decode's stream failed: {failure}")
            if value is _END:
                message = {"error": {"message": "relay stream ended"}}
                value = UpstreamError(502, message, self.ctx.relay_url)
            return RelayEnded(value, prefill_failure(self.prefill1))
        if kind == "main":
            self.recorder.main_answered()
            return MainChunk(value)
        return RelayChunk(value.output_ids, value.meta_info, value.finish_reason)

    async def _send_to_main(self, action: SendToMain) -> list:
        """Send the core's handoff to MD; what the core answers if MD's socket takes nothing."""
        self.recorder.handoff(action)
        if action.final and not self.core.overlap:
            self.ctx.start_handoff_gap()  # held from here: the client's gap starts at its last id
        try:
            await self.control.handoff(self.main_rid, action.token_ids, final=action.final)
        except UpstreamError as exc:  # MD's control socket takes nothing: RLD goes on
            return self.core.on(MainLost(str(exc.body["error"]["message"])))
        return []

    def _note(self, action) -> None:
        """An action that needs no I/O: MD ready, or one the recorder logs and records."""
        if isinstance(action, NoteReady):
            self.ctx.note_ready(action.event)
            return
        self.recorder.note(action)
        if isinstance(action, TakeOverFromLostRelay):
            self.ctx.router.health.mark_down(self.ctx.relay_url)


def prefill_failure(prefill_task: asyncio.Task) -> BaseException | None:
    """P's error when its sub-request failed (P validates the prompt, so its error is the one
    a client must see), else None."""
    if prefill_task.done() and not prefill_task.cancelled():
        return prefill_task.exception()
    return None


async def _next_reads(relay_q, events, main_q, gate, reads_main: bool) -> list[tuple[str, object]]:
    """Wait for the next of: RLD's stream, MD's events, and either P's first send (``gate``,
    while MD's side has not started) or MD's stream (when the core reads it). Every read that
    completed, as (kind, value), in ``_READ_ORDER``: a relay chunk and an event that complete
    together are both consumed (a get() cancelled before completing leaves its item queued)."""
    waiters = {
        asyncio.ensure_future(relay_q.get()): "relay",
        asyncio.ensure_future(events.get()): "event",
    }
    if main_q is None:
        waiters[asyncio.ensure_future(asyncio.shield(gate))] = "prefill"
    elif reads_main:  # MD's answer to the final handoff, or its ids to compare
        waiters[asyncio.ensure_future(main_q.get())] = "main"
    done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for fut in pending:
        fut.cancel()
    return [
        (waiters[fut], fut.result())
        for fut in sorted(done, key=lambda f: _READ_ORDER.index(waiters[f]))
    ]
