"""``RelayedPipeline``: P-RLD-MD, the part of ``PddRequestRun`` that relays and hands off.

P prefills once for Relay-Decode (room 1, intra-datacenter), then again for Main-Decode (room 2: a
radix hit on P, sent over the WAN); Relay-Decode's tokens go to the client at once; when
Main-Decode reports the KV landed, the router hands it the token ids the client already has and
either keeps Relay-Decode going (Catch-Up chunks) or makes the final handoff. How the client
then moves to MD's ids (``handoff/core.py``): a deterministic request keeps RLD streaming until
MD's ids, checked against RLD's, are ahead (``--handoff-switch overlap``); any other holds RLD's
newer ids until MD answers, which reach the client only if MD defers or refuses it. A request that
finishes on Relay-Decode first is released on MD, which caches its KV.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time

import aiohttp

from sglang_pdd.handoff.core import HandoffCore
from sglang_pdd.handoff.signals import (
    AbandonMain,
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
from sglang_pdd.router.instances.transfers import DROPPED
from sglang_pdd.router.pipeline.request_fields import deterministic, max_new_tokens
from sglang_pdd.router.upstream.calls import UpstreamError, abort, post_json
from sglang_pdd.router.upstream.chunk_queue import END as _END
from sglang_pdd.router.upstream.chunk_queue import PumpedStream
from sglang_pdd.wire.messages import Extended, Ready

logger = logging.getLogger("sglang_pdd.router")
_READ_ORDER = ("prefill", "relay", "main", "event")


class RelayedPipeline:
    """Mixed into ``PddRequestRun``: the P-RLD-MD pipeline and its clean-up paths."""

    async def _report_late_transfer(self, events: asyncio.Queue, main_rid: str, until):
        """After MD's released request ends (``until``), log the KV it received for it: the
        client's record was sent before that KV landed."""
        try:
            result = await until
        finally:
            self.router.control_for(self.main).forget(main_rid)
            if self._transfer is not None:  # never landed (MD failed): free its waiters
                self.site.transfers.drop(self._transfer)
        ready = take_ready_event(events)
        if ready is not None and self.record.main_ready_s is None:
            late = {"wan_bytes": ready.kv_bytes or 0, "main_cached_tokens": ready.cached_tokens}
            logger.info(
                "pdd-late-transfer rid=%s instance_rid=%s %s",
                self.rid,
                self.ids.rid,
                json.dumps(late),
            )
            self.router.metrics.wan_bytes.inc(late["wan_bytes"])
        if ready is not None:
            self._main_ended()
        return result

    async def _warm_main_after(
        self, gate: asyncio.Task, main_rid: str, room2: int, events: asyncio.Queue
    ) -> None:
        """Send room 2 (P's radix hit, over the WAN) to Main-Decode for a request that already
        finished on Relay-Decode, and release it there: MD caches the prompt's KV and ends it.

        This is cache warming, not serving: it waits while serving transfers use MD's link, and
        a later request that extends this prompt may carry it instead (the warm is dropped)."""
        control = self.router.control_for(self.main)
        try:
            transfer = await asyncio.shield(gate)
        except (UpstreamError, aiohttp.ClientError, asyncio.CancelledError) as exc:
            logger.info(
                "sglang-pdd router: %s: prefill failed (%s); Main-Decode not warmed", self.rid, exc
            )
            await abort(self.router.session, self.main.url, main_rid)
            control.forget(main_rid)
            return
        self.site.transfers.mark_warming(main_rid)
        await transfer.dispatch.wait()
        if transfer.state != DROPPED:
            await self._claim_shared(transfer)  # dropped if another router's carries it
        if transfer.state == DROPPED:  # a later request of this prefix carried it, or the cap
            control.forget(main_rid)
            return
        logger.info(
            "sglang-pdd router: %s finished on Relay-Decode before its KV left; sending "
            "it to Main-Decode's cache now",
            self.rid,
        )
        if not control.release_nowait(main_rid):
            control.forget(main_rid)
            return
        session = self.router.session
        results = await self._report_late_transfer(
            events,
            main_rid,
            asyncio.gather(
                self._prefill(self.ids.prefill_for_main, room2),
                post_json(
                    session,
                    f"{self.main.url}/generate",
                    self._sub_body(main_rid, room2),
                    # A partitioned MD must not hold this warm (and its transfer) for good.
                    timeout_s=self.router.config.upstream_idle_timeout_s,
                ),
                return_exceptions=True,
            ),
        )
        for result in results:
            if isinstance(result, BaseException):
                logger.warning(
                    "sglang-pdd router: %s: warming Main-Decode failed: %s", self.rid, result
                )

    async def _main_gate(self, prefill1: asyncio.Task, main_rid: str):
        """Room 2 may go once P's KV for room 1 is out (room 2 is then a radix hit on P) and no
        transfer on MD's link carries this prompt's prefix; returns the registered transfer."""
        await asyncio.shield(prefill1)
        return await self._claim(main_rid, learn=True)

    async def _relayed(self):
        """P-RLD-MD: start both of P's sends, stream RLD's ids, feed what happens to the
        request's ``HandoffCore`` and execute what it answers, until MD or RLD finishes."""
        relay_rid, main_rid = self.ids.relay, self.ids.relayed
        control = self.router.control_for(self.main)
        events = await control.watch(main_rid)
        room1, room2 = random.getrandbits(63), random.getrandbits(63)
        prefill1 = self._spawn(self._prefill(self.ids.prefill_for_relay, room1))
        prefill1.add_done_callback(self._prefill_done)
        relay_q = self._stream_into_queue(self.relay_url, self._sub_body(relay_rid, room1))
        main_q: asyncio.Queue | None = None
        gate = prefill2 = None
        claimed = None
        if self.router.config.main_transfer_start == "with-prefill":
            claimed, _ = self._try_claim(main_rid, learn=False)
            if claimed is not None and await self._claim_shared(claimed) is not None:
                claimed = None  # another router's transfer carries part of it: the gate waits
        if claimed is not None:
            # Room 2 goes now: MD's bootstrap and prefix match overlap P's prefill, and P holds
            # room 2 until room 1 is prefilled (patches/prefill_twin_hold.py), so its KV leaves
            # when the prefill ends, as a radix hit.
            prefill1.add_done_callback(lambda _t: self.site.transfers.restart_clock(main_rid))
            prefill2, main_q = self._start_main_side(main_rid, room2)
        else:
            gate = self._spawn(self._main_gate(prefill1, main_rid))
        core = self._core = self._new_core()
        follow: FollowMain | None = None
        while follow is None:
            actions: list = []
            for kind, value in await _next_reads(relay_q, events, main_q, gate, core.reads_main):
                if kind == "prefill":
                    # P's KV for room 1 is out; room 2 is now a radix hit on P (the gate
                    # registered its transfer).
                    prefill2, main_q = self._start_main_side(main_rid, room2)
                    continue
                actions += core.on(self._signal(kind, value, prefill1))
            if self.router.health.is_draining(self.main.url):
                actions += core.on(MainLost(f"{self.main.url} is draining"))
            actions += core.on(self._tick())
            while actions:
                action = actions.pop(0)
                if isinstance(action, EmitRelayIds):
                    if action.first:
                        self.router.note_prefill_time(self._since())
                    yield self._delta(action.token_ids, "relay", action.meta)
                elif isinstance(action, SendToMain):
                    actions[:0] = await self._send_to_main(control, main_rid, action)
                elif isinstance(action, FinishOnRelay):
                    self._finish_on_relay(main_q, prefill1, gate, prefill2, main_rid, room2, events)
                    await self._end_main_side(action, main_q, main_rid)
                    yield self._finished(action.finish_reason)
                    return
                elif isinstance(action, AbandonMain):
                    self._abandon_main(main_rid, action.reason)
                elif isinstance(action, FollowMain):
                    follow = action
                elif isinstance(action, Fail):
                    raise action.error
                else:
                    self._note(action)
        # MD took the final handoff. RLD's abort runs beside MD's takeover: MD's next token
        # must not wait for it.
        self.record.relay_ids_dropped = follow.dropped_ids
        if core.overlap:  # the client's gap at the switch: its last id (RLD's) to MD's next
            self._gap_from = self.record.e2e_s
        self.router.run_in_background(abort(self.router.session, self.relay_url, relay_rid))
        async for event in self._follow_main(
            main_q,
            events,
            already_sent=len(follow.relay_ids),
            expected_prefix=follow.relay_ids,
            early=follow.early,
        ):
            yield event

    def _new_core(self) -> HandoffCore:
        """The request's handoff core; the overlapped switch only where the answer is
        deterministic (greedy, or seeded with --seeded-sampling)."""
        config, sampling = self.router.config, self.body["sampling_params"]
        overlap = config.handoff_switch == "overlap" and deterministic(
            sampling, config.seeded_sampling
        )
        self.record.handoff_switch = "overlap" if overlap else "hold"
        return HandoffCore(
            self.router.handoff_policy,
            config.handoff_retry_s,
            max_new_tokens(sampling) if config.tail_on_relay else None,
            overlap=overlap,
        )

    def _tick(self) -> Tick:
        """What the core weighs at each look: now, RLD's load and pace, the gap, MD's pace."""
        return Tick(
            time.monotonic(),
            self.router.relay_load(self.relay_url),
            self._relay_itl(),
            self.router.handoff_gap_estimate_s,
            self.router.main_itl_estimate_s(self.main.url),
        )

    async def _end_main_side(self, action: FinishOnRelay, main_q, main_rid: str) -> None:
        """The request finished on RLD: stop MD's overlapped copy, or release its parked one."""
        if action.main_running:
            self.router.run_in_background(abort(self.router.session, self.main.url, main_rid))
        else:
            await self._release_main(main_q, main_rid)

    def _start_main_side(self, main_rid: str, room2: int):
        """P's second send (room 2, to MD) and MD's parked sub-request: (P's task, MD's queue)."""
        prefill2 = self._spawn(self._prefill(self.ids.prefill_for_main, room2))
        prefill2.add_done_callback(self._main_prefill_done)
        main_q = self._stream_into_queue(
            self.main.url, self._sub_body(main_rid, room2), parked=True
        )
        return prefill2, main_q

    def _abandon_main(self, main_rid: str, reason: str) -> None:
        logger.warning(
            "sglang-pdd router: %s: Main-Decode abandoned after the overlapped handoff (%s); "
            "Relay-Decode finishes",
            self.rid,
            reason,
        )
        self.record.main_refused = reason
        self.router.run_in_background(abort(self.router.session, self.main.url, main_rid))

    def _signal(self, kind: str, value, prefill1: asyncio.Task):
        """What one item read from RLD's stream, MD's stream or MD's events is, for the core
        (a final ``extended`` also puts MD's wait and extend times into the record)."""
        if kind == "event":  # a wire.messages event
            if isinstance(value, Extended) and value.final:
                self.record.main_waited_s = value.waited_s
                self.record.main_extend_s = value.extend_s
            return value
        if value is _END or isinstance(value, Exception):
            if kind == "main":  # MD's stream failed before it answered the final handoff
                failure = "ended" if value is _END else repr(value)
                return MainLost(f"Main-Decode's stream failed: {failure}")
            if value is _END:
                message = {"error": {"message": "relay stream ended"}}
                value = UpstreamError(502, message, self.relay_url)
            return RelayEnded(value, self._prefill_failure(prefill1))
        if kind == "main":
            if self.record.main_answer_s is None:
                self.record.main_answer_s = self._since()
            return MainChunk(value)
        return RelayChunk(value.output_ids, value.meta_info, value.finish_reason)

    async def _send_to_main(self, control, main_rid: str, action: SendToMain) -> list:
        """Send the core's handoff to MD; what the core answers if MD's socket takes nothing."""
        self.record.handoff_mode = action.mode
        self.record.handoff_chunks = action.chunks
        if action.final:
            self.record.handoff_s = self._since()
            self.record.handoff_tokens = len(action.token_ids)
            if not self._core.overlap:  # held from here: the client's gap starts at its last id
                self._gap_from = self.record.e2e_s  # (None: none yet)
        try:
            await control.handoff(main_rid, action.token_ids, final=action.final)
        except UpstreamError as exc:  # MD's control socket takes nothing: RLD goes on
            return self._core.on(MainLost(str(exc.body["error"]["message"])))
        return []

    def _note(self, action) -> None:
        """Log and record an action that needs no I/O."""
        if isinstance(action, NoteReady):
            self._note_ready(action.event)
        elif isinstance(action, RetryLater):
            logger.info(
                "sglang-pdd router: %s: Main-Decode deferred the handoff (%s); "
                "Relay-Decode serves on",
                self.rid,
                action.message,
            )
            self.record.handoff_deferrals = action.deferrals
        elif isinstance(action, ResendLostHandoff):
            logger.info(
                "sglang-pdd router: %s: the final handoff was lost in a control "
                "reconnect; making it again",
                self.rid,
            )
        elif isinstance(action, KeepOnRelay):
            logger.info(
                "sglang-pdd router: %s: %s; finishing on Relay-Decode", self.rid, action.reason
            )
            self.record.kept_on_relay = action.reason
        elif isinstance(action, StayOnRelay):
            logger.warning(
                "sglang-pdd router: %s: no handoff to Main-Decode (%s); finishing on Relay-Decode",
                self.rid,
                action.reason,
            )
            self.record.main_refused = action.reason
        elif isinstance(action, TakeOverFromLostRelay):
            logger.warning(
                "sglang-pdd router: %s: Relay-Decode failed (%s); Main-Decode, "
                "ready, takes over at once",
                self.rid,
                action.error,
            )
            self.record.relay_failed = str(action.error)[:300]
            self.router.health.mark_down(self.relay_url)
        else:
            raise TypeError(f"no handler for {type(action).__name__}")

    def _finish_on_relay(self, main_q, prefill1, gate, prefill2, main_rid, room2, events):
        """The request finished on RLD before MD took over: MD lets the KV land, keeps it in
        its radix cache (aligned with P's) and ends the request."""
        self.record.finished_on = "relay"
        if main_q is None:
            # P's first send has not answered yet: room 2 still goes out once it has, so that
            # MD's cache holds this prompt too.
            self._detach(prefill1, gate)
            self._released = True
            self.router.run_in_background(self._warm_main_after(gate, main_rid, room2, events))
            return
        # P's second send and MD's request must live on (cancelling either would abort the
        # transfer).
        self.site.transfers.mark_warming(main_rid)
        self._detach(prefill2, main_q.task)
        self._released = True
        self.router.run_in_background(self._report_late_transfer(events, main_rid, main_q.task))
        self.router.run_in_background(self._abort_prefill_if_main_failed(main_q))

    async def _abort_prefill_if_main_failed(self, main_q: PumpedStream) -> None:
        """When MD's stream for this request failed (MD died), P's send to MD can never
        complete: abort it on P rather than leave it waiting for SGLang's transfer timeout."""
        await asyncio.shield(main_q.task)
        if main_q.error is not None:
            await abort(self.router.session, self.prefill_url, self.ids.prefill_for_main)

    async def _release_main(self, main_q, main_rid: str) -> None:
        if main_q is not None:  # best effort: MD ends it after --pdd-parked-ttl-s otherwise
            self.router.control_for(self.main).release_nowait(main_rid)


def take_ready_event(events: asyncio.Queue) -> Ready | None:
    """Empty ``events``; return the first ``Ready`` among them, if any."""
    ready = None
    while not events.empty():
        event = events.get_nowait()
        if isinstance(event, Ready):
            ready = ready or event
    return ready


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
