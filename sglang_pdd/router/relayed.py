"""``RelayedPipeline``: P-RLD-MD, the part of ``PddRequestRun`` that relays and hands off.

P prefills once for Relay-Decode (room 1, intra-datacenter), then again for Main-Decode (room 2: a
radix hit on P, sent over the WAN); Relay-Decode's tokens go to the client at once; when
Main-Decode reports the KV landed, the router hands it the token ids the client already has and
either keeps Relay-Decode going (Catch-Up chunks) or makes the final handoff. Relay-Decode
serves until Main-Decode has taken the final handoff; its newer tokens wait meanwhile and reach
the client only if MD defers or refuses it (``policy/handoff_state.py``). A request that
finishes on Relay-Decode first is released on MD, which caches its KV.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time

import aiohttp

from sglang_pdd.policy.handoff_state import CHUNK, RelayedHandoff
from sglang_pdd.router.record import Finished
from sglang_pdd.router.transfers import DROPPED
from sglang_pdd.router.upstream import UpstreamError, abort, post_json
from sglang_pdd.router.upstream_queue import END as _END

logger = logging.getLogger("sglang_pdd.router")


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
            late = {"wan_bytes": int(ready.get("kv_bytes", 0)),
                    "main_cached_tokens": ready.get("cached_tokens")}  # fmt: skip
            logger.info("pdd-late-transfer rid=%s %s", self.rid, json.dumps(late))
            self.router.metrics.wan_bytes.inc(late["wan_bytes"])
        if ready is not None:
            self._main_ended()
        return result

    async def _warm_main_after(self, gate: asyncio.Task, main_rid: str, room2: int,
                               events: asyncio.Queue) -> None:  # fmt: skip
        """Send room 2 (P's radix hit, over the WAN) to Main-Decode for a request that already
        finished on Relay-Decode, and release it there: MD caches the prompt's KV and ends it.

        This is cache warming, not serving: it waits while serving transfers use MD's link, and
        a later request that extends this prompt may carry it instead (the warm is dropped)."""
        control = self.router.control_for(self.main)
        try:
            transfer = await asyncio.shield(gate)
        except (UpstreamError, aiohttp.ClientError, asyncio.CancelledError) as exc:
            logger.info("sglang-pdd router: %s: prefill failed (%s); Main-Decode not warmed",
                        self.rid, exc)  # fmt: skip
            await abort(self.router.session, self.main.url, main_rid)
            control.forget(main_rid)
            return
        self.site.transfers.mark_warming(main_rid)
        await transfer.dispatch.wait()
        if transfer.state == DROPPED:  # a later request of this prefix carried it
            control.forget(main_rid)
            return
        logger.info("sglang-pdd router: %s finished on Relay-Decode before its KV left; sending "
                    "it to Main-Decode's cache now", self.rid)  # fmt: skip
        if not control.release_nowait(main_rid):
            control.forget(main_rid)
            return
        session = self.router.session
        results = await self._report_late_transfer(events, main_rid, asyncio.gather(
            self._prefill(self.ids.prefill_for_main, room2),
            post_json(session, f"{self.main.url}/generate", self._sub_body(main_rid, room2)),
            return_exceptions=True,
        ))  # fmt: skip
        for result in results:
            if isinstance(result, BaseException):
                logger.warning("sglang-pdd router: %s: warming Main-Decode failed: %s",
                               self.rid, result)  # fmt: skip

    async def _main_gate(self, prefill1: asyncio.Task, main_rid: str):
        """Room 2 may go once P's KV for room 1 is out (room 2 is then a radix hit on P) and no
        transfer on MD's link carries this prompt's prefix; returns the registered transfer."""
        await asyncio.shield(prefill1)
        return await self._claim(main_rid, learn=True)

    async def _relayed(self):
        relay_rid, main_rid = self.ids.relay, self.ids.relayed
        self._relay_lost: Exception | None = None  # RLD's failure, once MD took over for it
        control = self.router.control_for(self.main)
        events = await control.watch(main_rid)
        room1, room2 = random.getrandbits(63), random.getrandbits(63)
        session = self.router.session
        prefill1 = self._spawn(self._prefill(self.ids.prefill_for_relay, room1))
        prefill1.add_done_callback(self._prefill_done)
        relay_q = self._stream_into_queue(self.relay_url, self._sub_body(relay_rid, room1))
        main_q: asyncio.Queue | None = None
        gate = prefill2 = None
        claimed = None
        if self.router.config.main_transfer_start == "with-prefill":
            claimed, _ = self._try_claim(main_rid, learn=False)
        if claimed is not None:
            # Room 2 goes now: MD's bootstrap and prefix match overlap P's prefill, and P holds
            # room 2 until room 1 is prefilled (patches/prefill_twin_hold.py), so its KV leaves
            # when the prefill ends, as a radix hit.
            prefill1.add_done_callback(
                lambda _t: self.site.transfers.restart_clock(main_rid))  # fmt: skip
            prefill2 = self._spawn(self._prefill(self.ids.prefill_for_main, room2))
            main_q = self._stream_into_queue(self.main.url, self._sub_body(main_rid, room2),
                                             parked=True)  # fmt: skip
        else:
            gate = self._spawn(self._main_gate(prefill1, main_rid))
        relay_ids: list[int] = []  # RLD's ids the client has
        held: list = []  # RLD's chunks read while MD answers a final handoff (not yet sent)
        early_main: list = []  # MD's first chunk, when it came before its "extended" event
        state = RelayedHandoff(self.router.handoff_policy, self.router.config.handoff_retry_s)
        while not state.done:
            waiters = {asyncio.ensure_future(relay_q.get()): "relay",
                       asyncio.ensure_future(events.get()): "event"}  # fmt: skip
            if main_q is None:
                waiters[asyncio.ensure_future(asyncio.shield(gate))] = "prefill"
            elif state.final_pending:  # MD's stream answering is an answer too (or its failure)
                waiters[asyncio.ensure_future(main_q.get())] = "main"
            done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for fut in pending:
                fut.cancel()
            replay: list = []  # RLD's chunks to handle now, in order
            release_held = False  # MD did not take the final handoff: held ids go on
            # Handle in a fixed order so that a relay chunk and an event that complete
            # together are both consumed (the cancelled getter loses nothing: get() that is
            # cancelled before completing leaves the item in the queue).
            for fut in sorted(done, key=lambda f: ("prefill", "relay", "main", "event").index(
                    waiters[f])):  # fmt: skip
                kind, value = waiters[fut], fut.result()
                if kind == "prefill":
                    if main_q is None:
                        # P's KV for room 1 is out; room 2 is now a radix hit on P (the gate
                        # registered its transfer).
                        prefill2 = self._spawn(self._prefill(self.ids.prefill_for_main, room2))
                        main_q = self._stream_into_queue(
                            self.main.url, self._sub_body(main_rid, room2), parked=True
                        )
                elif kind == "relay":
                    # While MD answers a final handoff, RLD's newer ids wait: they reach the
                    # client only if MD defers or refuses it (MD then did not take them).
                    (held if state.final_pending else replay).append(value)
                elif kind == "main" and (value is _END or isinstance(value, Exception)):
                    # MD's stream failed before it answered: no MD token reached the client and
                    # RLD was not stopped, so RLD finishes the request.
                    failure = "ended" if value is _END else repr(value)
                    self._stay_on_relay(state, f"Main-Decode's stream failed: {failure}")
                    release_held = True
                elif kind == "main":
                    early_main.append(value)
                    state.final_taken()
                elif value.get("event") == "ready":
                    again = state.ready  # MD answering the watch of a redialed connection
                    state.main_ready()
                    self._note_ready(value)
                    # It says how far MD extended: an "extended" lost in the reconnect is
                    # re-derived from it, and a handoff message lost in it is made again.
                    if again and state.main_rewatched(int(value.get("extended_tokens", 0))):
                        logger.info("sglang-pdd router: %s: the final handoff was lost in a "
                                    "control reconnect; making it again", self.rid)  # fmt: skip
                        self._handed_off = False
                        release_held = True
                elif value.get("event") == "extended":
                    if value.get("final"):
                        state.final_taken()
                    else:
                        state.chunk_extended()
                elif value.get("event") == "deferred" and state.final_pending:
                    logger.info("sglang-pdd router: %s: Main-Decode deferred the handoff "
                                "(%s); Relay-Decode serves on", self.rid,
                                value.get("message"))  # fmt: skip
                    state.final_deferred(time.monotonic())
                    self.record.handoff_deferrals = state.deferrals
                    self._handed_off = False
                    release_held = True
                elif value.get("event") == "error":
                    # MD refused a handoff: RLD, still serving, finishes the request.
                    self._stay_on_relay(state, str(value.get("message")))
                    release_held = True
            if release_held:
                replay.extend(held)
                held.clear()
            if state.done:
                break
            for value in replay:
                if value is _END or isinstance(value, Exception):
                    if self._relay_lost is not None:
                        break  # the dead stream's end, after its failure: MD has taken over
                    failure = await self._relay_failure(prefill1, value)
                    if not state.ready or state.refused:
                        raise failure  # the request migrates (router/migration.py)
                    self._take_over_from_lost_relay(state, failure)
                    break
                ids = value["output_ids"]
                if ids and not relay_ids:
                    self.router.note_prefill_time(self._since())
                if len(ids) > len(relay_ids):
                    yield self._delta(ids[len(relay_ids) :], "relay", value["meta_info"])
                    relay_ids = list(ids)
                    state.relay_progress(len(relay_ids))
                if value["meta_info"].get("finish_reason"):
                    self._finish_on_relay(main_q, prefill1, gate, prefill2, main_rid, room2,
                                          events)  # fmt: skip
                    await self._release_main(main_q, main_rid)
                    yield Finished(value["meta_info"]["finish_reason"],
                                   self.prompt_tokens, self.record)  # fmt: skip
                    return
            if self.router.health.is_draining(self.main.url) and not state.refused:
                self._stay_on_relay(state, f"{self.main.url} is draining")
            step = state.next_step(self.router.relay_load(self.relay_url), time.monotonic())
            if step is None:
                continue
            self.record.handoff_mode = state.mode
            self.record.handoff_chunks = state.chunks
            final = step.kind != CHUNK
            if final:
                self.record.handoff_s = self._since()
                self.record.handoff_tokens = step.upto
                self._handed_off = True  # MD's stream answers within the idle limit from now
            try:
                await control.handoff(main_rid, relay_ids[: step.upto], final=final)
            except UpstreamError as exc:  # MD's control socket takes nothing: RLD goes on
                self._stay_on_relay(state, str(exc.body["error"]["message"]))
        # MD took the final handoff. RLD's abort runs beside MD's takeover: MD's next token
        # must not wait for it.
        self.router.run_in_background(abort(session, self.relay_url, relay_rid))
        async for event in self._follow_main(main_q, events, already_sent=len(relay_ids),
                                             expected_prefix=relay_ids,
                                             early=early_main):  # fmt: skip
            yield event

    async def _relay_failure(self, prefill1: asyncio.Task, value) -> Exception:
        """What RLD's stream ending early means: P's own error when P failed (it validates
        the prompt; raised), else the relay's."""
        if value is _END:
            value = UpstreamError(502, {"error": {"message": "relay stream ended"}},
                                  self.relay_url)  # fmt: skip
        if (failure := self._prefill_failure(prefill1)) is not None:
            raise failure
        return value

    def _take_over_from_lost_relay(self, state: RelayedHandoff, failure: Exception) -> None:
        """RLD failed while MD holds the KV ready: MD takes every id the client has at once,
        with no new prefill (a migration would start over on P)."""
        logger.warning("sglang-pdd router: %s: Relay-Decode failed (%s); Main-Decode, ready, "
                       "takes over at once", self.rid, failure)  # fmt: skip
        self._relay_lost = failure
        self.record.relay_failed = str(failure)[:300]
        self.router.health.mark_down(self.relay_url)
        state.relay_lost()

    def _stay_on_relay(self, state: RelayedHandoff, reason: str) -> None:
        """MD cannot take the request (it refused a handoff, or its stream failed before it
        answered one): RLD, which is still serving it, finishes it; if RLD failed already,
        the request migrates."""
        if self._relay_lost is not None:
            raise self._relay_lost
        logger.warning("sglang-pdd router: %s: no handoff to Main-Decode (%s); finishing on "
                       "Relay-Decode", self.rid, reason)  # fmt: skip
        self.record.main_refused = reason
        state.main_refused()
        self._handed_off = False

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

    async def _abort_prefill_if_main_failed(self, main_q: asyncio.Queue) -> None:
        """When MD's stream for this request failed (MD died), P's send to MD can never
        complete: abort it on P rather than leave it waiting for SGLang's transfer timeout."""
        await asyncio.shield(main_q.task)
        if getattr(main_q, "error", None) is not None:
            await abort(self.router.session, self.prefill_url, self.ids.prefill_for_main)

    async def _release_main(self, main_q, main_rid: str) -> None:
        if main_q is not None:  # best effort: MD ends it after --pdd-parked-ttl-s otherwise
            self.router.control_for(self.main).release_nowait(main_rid)


def take_ready_event(events: asyncio.Queue) -> dict | None:
    """Empty ``events``; return the "ready" event among them, if any."""
    ready = None
    while not events.empty():
        event = events.get_nowait()
        if event.get("event") == "ready":
            ready = ready or event
    return ready
