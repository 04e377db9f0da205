"""``PddRequestRun``: one request through P-MD, P-RLD-MD or P-RLD, as a stream of token deltas.

P-RLD-MD (One-Shot or Catch-Up): P prefills once for Relay-Decode (room 1, intra-datacenter),
then again for Main-Decode (room 2: a radix hit on P, sent over the WAN); Relay-Decode's tokens
go to the client at once; when Main-Decode reports the KV landed, the router hands it the token
ids the client already has and stops (One-Shot) or keeps (Catch-Up) Relay-Decode; Main-Decode
extends over them and its later tokens follow. No token is sent twice: the router forwards
Relay-Decode's tokens only up to the final handoff, and Main-Decode's only past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time

import aiohttp

from sglang_pdd.cache.prefix_blocks import block_hashes
from sglang_pdd.main_decode.protocol import SubRids
from sglang_pdd.policy import PIPELINE_P_MD, PIPELINE_P_RLD
from sglang_pdd.policy.handoff_state import CHUNK, RelayedHandoff
from sglang_pdd.router.record import Finished, PddRecord, TokenDelta, token_logprobs
from sglang_pdd.router.transfers import DEFERRED, DROPPED
from sglang_pdd.router.upstream import UpstreamError, abort, post_json, stream_sse
from sglang_pdd.router.upstream_queue import END as _END
from sglang_pdd.router.upstream_queue import pump as _pump

logger = logging.getLogger("sglang_pdd.router")
# How long a request waits for a transfer of its prefix already on MD's link before sending
# its own (a transfer that never lands must not hold every later request of its prefix).
DEPENDENCY_TIMEOUT_S = 60


class PddRequestRun:
    """Drive one request; iterate ``events()`` for ``TokenDelta``s and a final ``Finished``."""

    def __init__(self, router, body: dict, rid: str, decision, instances, main_plan=None) -> None:
        self.router = router
        self.body = body  # /generate body with input_ids and sampling_params
        self.rid = rid
        self.ids = SubRids(rid)  # this request's rid on each instance
        self.decision = decision
        self.prefill_url, self.relay_url, self.main = instances
        self.site = router.site(self.main)
        self.main_plan = main_plan  # how the KV reaches MD (None: P-RLD)
        self.record = PddRecord(pipeline=decision.pipeline, reason=decision.reason,
                                main=self.main.url, est_main_ready_s=decision.est_main_ready_s
                                if decision.est_main_ready_s != float("inf") else None)  # fmt: skip
        self.t0 = time.monotonic()
        self._tasks: list[asyncio.Task] = []
        self.prompt_tokens = len(body["input_ids"])
        self._released = False  # finished on RLD; MD still receives (and caches) the KV
        self._transfer = None  # this request's registered transfer to MD
        self._last_relay_s = 0.0
        self._handed_off = False  # the final handoff was sent to MD
        self.site.active += 1
        router.prefill_active[self.prefill_url] += 1
        self._counted = True

    # -- helpers ----------------------------------------------------------------------------
    def _since(self) -> float:
        return time.monotonic() - self.t0

    def _sub_body(self, rid: str, room: int) -> dict:
        prefill = self.router.bootstrap[self.prefill_url]
        return {**self.body, "rid": rid, "bootstrap_host": prefill[0],
                "bootstrap_port": prefill[1], "bootstrap_room": room}  # fmt: skip

    def _prefill(self, rid: str, room: int):
        """P's sub-request ``rid`` (a coroutine answering when P has sent the KV)."""
        return post_json(self.router.session, f"{self.prefill_url}/generate",
                         self._sub_body(rid, room))  # fmt: skip

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        return task

    def _stream_into_queue(self, url: str, body: dict, parked: bool = False) -> asyncio.Queue:
        """Stream ``url``'s answer to ``body`` into a queue. ``parked``: a relayed MD stream,
        silent until the final handoff, when its idle limit starts."""
        queue: asyncio.Queue = asyncio.Queue()
        incremental = self.router.incremental_streams.get(url, False)
        limit = self.router.config.upstream_idle_timeout_s
        stream = stream_sse(self.router.session, f"{url}/generate", body, incremental)
        # A parked MD stream is silent by design until the final handoff, or until the release
        # of a request that finished on RLD (MD then ends it once its KV has landed).
        idle = ((lambda: limit if self._handed_off or self._released else None) if parked
                else (lambda: limit))  # fmt: skip
        queue.task = self._spawn(_pump(stream, queue, url, idle))
        return queue

    def _detach(self, *tasks: asyncio.Task) -> None:
        """Let ``tasks`` run to their end after this request is answered (not cancelled)."""
        for task in tasks:
            if task in self._tasks:
                self._tasks.remove(task)
            self.router.keep_in_background(task)

    def _delta(self, token_ids: list[int], source: str, meta: dict) -> TokenDelta:
        now = self._since()
        if self.record.first_token_s is None and token_ids:
            self.record.first_token_s = now
        if source == "relay":
            self.record.relay_tokens += len(token_ids)
            self._last_relay_s = now
        else:
            if self.record.main_tokens == 0 and self.record.relay_tokens:
                self.record.handoff_stall_s = now - self._last_relay_s
            self.record.main_tokens += len(token_ids)
        if not self.body.get("return_logprob"):
            return TokenDelta(token_ids, source)
        return TokenDelta(token_ids, source, *token_logprobs(meta, len(token_ids)))

    def sub_rids(self) -> dict[str, list[str]]:
        """Each instance's rids for this request (SGLang aborts by exact rid only)."""
        rids = {self.prefill_url: self.ids.on_prefill(), self.main.url: self.ids.on_main()}
        if self.relay_url:
            rids[self.relay_url] = [self.ids.relay]
        return rids

    async def abort_everywhere(self) -> None:
        """Abort this request's sub-requests on every instance, each by its exact rid."""
        pairs = [(url, rid) for url, rids in self.sub_rids().items() for rid in rids]
        await asyncio.gather(*(abort(self.router.session, url, rid) for url, rid in pairs))

    def _prefill_done(self, _task=None) -> None:
        if self._counted:
            self._counted = False
            self.router.prefill_active[self.prefill_url] -= 1

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._prefill_done()
        self.site.active -= 1
        if self._transfer is not None and not self._released:
            self.site.transfers.drop(self._transfer)  # never landed: nothing to wait for
        if not self._released:  # else the background task reading MD's late events forgets it
            self.router.control_for(self.main).forget(self.ids.relayed)
        self.router.control_for(self.main).forget(self.ids.main)

    # -- the transfer to Main-Decode ----------------------------------------------------------
    def _try_claim(self, main_rid: str, *, learn: bool):
        """Register this request's transfer to MD unless a transfer carrying part of its prompt
        is on the link: ``(transfer, None)`` or ``(None, what to wait for)``. Synchronous, so
        no other request can slip in between the check and the registration."""
        ids = self.body["input_ids"]
        mp = self.router.main_plan(self.site, ids, self._hashes())
        dep = mp.dependency
        if dep is not None and mp.carries_dependency and dep.state == DEFERRED:
            self.site.transfers.drop(dep)  # this request's KV carries the warm's prompt too
            self.record.reason += f"; carries the deferred warm of {dep.rid}"
            dep = None
        if dep is not None:
            return None, dep
        return self._start_transfer(main_rid, warming=self._released, learn=learn), None

    async def _claim(self, main_rid: str, *, learn: bool):
        """Wait until no transfer on MD's link carries this prompt's prefix, then register this
        request's own (MD then asks P only for what it still lacks)."""
        started = None
        while True:
            transfer, dep = self._try_claim(main_rid, learn=learn)
            if transfer is not None:
                if started is not None:
                    self.record.waited_s = round(self._since() - started, 4)
                return transfer
            if started is None:
                started = self._since()
                self.site.transfers.stats.waited += 1
            self.site.transfers.promote(dep)  # a deferred warm we need goes now
            try:
                await asyncio.wait_for(dep.off_link.wait(), DEPENDENCY_TIMEOUT_S)
            except TimeoutError:
                # MD never reported that KV: stop waiting and send this prompt's own.
                logger.warning("sglang-pdd router: %s: transfer %s did not land in %ds; "
                               "sending this request's KV anyway", self.rid, dep.rid,
                               DEPENDENCY_TIMEOUT_S)  # fmt: skip
                self.site.transfers.drop(dep)

    def _hashes(self) -> list[int]:
        if self.main_plan is not None:
            return self.main_plan.hashes
        return block_hashes(self.body["input_ids"], self.router.config.cache_block_tokens)

    def _start_transfer(self, main_rid: str, *, warming: bool = False, learn: bool = True):
        """Register the KV this request is about to send to MD (what MD's cache lacks now)."""
        ids = self.body["input_ids"]
        hashes = self._hashes()
        cached = self.site.cached_tokens(ids, hashes)
        nbytes = (len(ids) - cached) * self.router.kv_bytes_per_token
        self._transfer = self.site.transfers.start(
            main_rid, hashes, cached // self.router.config.cache_block_tokens, nbytes,
            warming=warming, learn=learn)  # fmt: skip
        return self._transfer

    def _main_ended(self, output_ids=()) -> None:
        """MD's request ended normally: SGLang inserted its KV into MD's radix tree."""
        self.site.confirm_cached(list(self.body["input_ids"]) + list(output_ids))

    # -- pipelines --------------------------------------------------------------------------
    async def events(self):
        """Yield ``TokenDelta``s then one ``Finished``; raise ``UpstreamError`` on bad input."""
        if self.decision.pipeline == PIPELINE_P_MD:
            async for event in self._main_only():
                yield event
        elif self.decision.pipeline == PIPELINE_P_RLD:
            async for event in self._relay_only():
                yield event
        else:
            async for event in self._relayed():
                yield event

    async def _main_only(self):
        rid = self.ids.main
        control = self.router.control_for(self.main)
        events = await control.watch(rid)
        await self._claim(rid, learn=False)  # its time to MD includes P's prefill
        room = random.getrandbits(63)
        prefill = self._spawn(self._prefill(self.ids.prefill, room))
        prefill.add_done_callback(self._prefill_done)
        main_q = self._stream_into_queue(self.main.url, self._sub_body(rid, room))
        async for event in self._follow_main(main_q, events, already_sent=0):
            yield event

    async def _relay_only(self):
        room = random.getrandbits(63)
        prefill = self._spawn(self._prefill(self.ids.prefill, room))
        prefill.add_done_callback(self._prefill_done)
        relay_q = self._stream_into_queue(self.relay_url, self._sub_body(self.ids.relay, room))
        sent = 0
        while (chunk := await relay_q.get()) is not _END:
            if isinstance(chunk, Exception):
                await self._raise_prefill_error(prefill, chunk)
            ids = chunk["output_ids"]
            if len(ids) > sent:
                yield self._delta(ids[sent:], "relay", chunk["meta_info"])
                sent = len(ids)
            if chunk["meta_info"].get("finish_reason"):
                self.record.finished_on = "relay"
                yield Finished(chunk["meta_info"]["finish_reason"], self.prompt_tokens, self.record)
                return

    async def _report_late_transfer(self, events: asyncio.Queue, main_rid: str, until):
        """After MD's released request ends (``until``), log the KV it received for it: the
        client's record was sent before that KV landed."""
        try:
            result = await until
        finally:
            self.router.control_for(self.main).forget(main_rid)
            if self._transfer is not None:  # never landed (MD failed): free its waiters
                self.site.transfers.drop(self._transfer)
        ready = _take_ready(events)
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
        try:
            await control.release(main_rid)
        except UpstreamError as exc:
            logger.warning("sglang-pdd router: %s: Main-Decode not warmed: %s", self.rid, exc)
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

    async def _raise_prefill_error(self, prefill_task: asyncio.Task, fallback: Exception):
        """Prefer the prefill server's error (it validates the prompt) over a decode-side one."""
        if prefill_task.done() and prefill_task.exception() is not None:
            raise prefill_task.exception()
        raise fallback

    async def _relayed(self):
        relay_rid, main_rid = self.ids.relay, self.ids.relayed
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
                    replay.extend(held)
                    held.clear()
                elif kind == "main":
                    early_main.append(value)
                    state.final_taken()
                elif value.get("event") == "ready":
                    state.main_ready()
                    self._note_ready(value)
                    # A ready re-sent after a reconnect says how far MD extended: an
                    # "extended" lost in the reconnect is re-derived from it.
                    if state.chunk_in_flight and value.get("extended_tokens", 0) >= state.handed:
                        state.chunk_extended()
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
                    replay.extend(held)
                    held.clear()
                elif value.get("event") == "error":
                    # MD refused a handoff: RLD, still serving, finishes the request.
                    self._stay_on_relay(state, str(value.get("message")))
                    replay.extend(held)
                    held.clear()
            if state.done:
                break
            for value in replay:
                if value is _END:
                    raise UpstreamError(502, {"error": {"message": "relay stream ended"}},
                                        self.relay_url)  # fmt: skip
                if isinstance(value, Exception):
                    await self._raise_prefill_error(prefill1, value)
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

    def _stay_on_relay(self, state: RelayedHandoff, reason: str) -> None:
        """MD cannot take the request (it refused a handoff, or its stream failed before it
        answered one): RLD, which is still serving it, finishes it."""
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

    async def _release_main(self, main_q, main_rid: str) -> None:
        if main_q is None:
            return
        try:
            await self.router.control_for(self.main).release(main_rid)
        except UpstreamError as exc:  # MD ends it after --pdd-parked-ttl-s instead
            logger.warning("sglang-pdd router: %s: release not sent: %s", self.rid, exc)

    def _note_ready(self, event: dict) -> None:
        if self.record.main_ready_s is None:
            self.record.main_ready_s = self._since()
            self.record.wan_bytes = int(event.get("kv_bytes", 0))
            self.record.main_cached_tokens = event.get("cached_tokens")

    async def _follow_main(self, main_q, events, already_sent: int, expected_prefix=(),
                           early=()):  # fmt: skip
        """Forward Main-Decode's tokens past ``already_sent``; check it kept the handed prefix.
        ``early``: chunks of MD's stream already read from ``main_q``."""
        sent = already_sent
        early = list(early)
        while (chunk := early.pop(0) if early else await main_q.get()) is not _END:
            if isinstance(chunk, Exception):
                raise chunk
            ids = chunk["output_ids"]
            if expected_prefix and ids[: len(expected_prefix)] != list(expected_prefix):
                raise UpstreamError(500, {"error": {"message": "Main-Decode diverged from the "
                                                              "handed-off tokens"}})  # fmt: skip
            if self.record.main_ready_s is None:
                self._drain_ready(events)
            if len(ids) > sent:
                yield self._delta(ids[sent:], "main", chunk["meta_info"])
                sent = len(ids)
            if chunk["meta_info"].get("finish_reason"):
                self.record.finished_on = "main"
                self._drain_ready(events)
                self._main_ended(ids)
                yield Finished(chunk["meta_info"]["finish_reason"], self.prompt_tokens, self.record)
                return
        raise UpstreamError(502, {"error": {"message": "Main-Decode stream ended early"}},
                            self.main.url)  # fmt: skip

    def _drain_ready(self, events: asyncio.Queue) -> None:
        if (ready := _take_ready(events)) is not None:
            self._note_ready(ready)


def _take_ready(events: asyncio.Queue) -> dict | None:
    """Empty ``events``; return the "ready" event among them, if any."""
    ready = None
    while not events.empty():
        event = events.get_nowait()
        if event.get("event") == "ready":
            ready = ready or event
    return ready
