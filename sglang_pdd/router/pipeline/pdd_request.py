"""``PddRequestRun``: one request through P-MD, P-RLD-MD or P-RLD, as a stream of token deltas.

P-MD and P-RLD are here; P-RLD-MD (One-Shot or Catch-Up) is ``relayed.RelayedPipeline``, which
runs on this class as its ``relayed_context.RelayedContext``. No
token is sent twice: the router forwards Relay-Decode's tokens only up to the final handoff, and
Main-Decode's only past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

from sglang_pdd.policy import PIPELINE_P_MD, PIPELINE_P_RLD
from sglang_pdd.policy.placement import PACE_MIN_GAPS
from sglang_pdd.router.pipeline import transfer_claims
from sglang_pdd.router.pipeline.record import Finished, PddRecord, TokenDelta, token_logprobs
from sglang_pdd.router.pipeline.relayed import RelayedPipeline, prefill_failure
from sglang_pdd.router.pipeline.relayed_release import take_ready_event
from sglang_pdd.router.state import RoutedRequest, RouterState
from sglang_pdd.router.upstream.calls import UpstreamError, abort, post_prefill, stream_sse
from sglang_pdd.router.upstream.chunk_queue import END as _END
from sglang_pdd.router.upstream.chunk_queue import InlineStream, PumpedStream
from sglang_pdd.router.upstream.chunk_queue import pump as _pump
from sglang_pdd.router.upstream.chunks import ChunkMeta
from sglang_pdd.wire.messages import Ready
from sglang_pdd.wire.rids import SubRids

logger = logging.getLogger("sglang_pdd.router")

# How long a finished answer waits for P's reply to the first send (for usage's cached_tokens)
# when the decoder's last token came first; P replies as its KV is sent, so a reply still
# missing after this is a fault the request does not wait on (its usage then reports 0).
PREFILL_ANSWER_WAIT_S = 2.0


class _Gaps:
    """Mean and largest gap between a source's chunks as the router forwarded them."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.total = 0.0
        self.count = 0
        self.largest = 0.0

    def note(self, now: float) -> None:
        if self.last is not None:
            gap = now - self.last
            self.total += gap
            self.count += 1
            self.largest = max(self.largest, gap)
        self.last = now

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


class PddRequestRun:
    """Drive one request; iterate ``events()`` for ``TokenDelta``s and a final ``Finished``."""

    def __init__(self, router: RouterState, body: dict, rid: str, routed: RoutedRequest) -> None:
        self.router = router
        self.body = body  # /generate body with input_ids and sampling_params
        self.rid = rid  # the client's (a label, in logs and GET /pdd/requests)
        self.ids = SubRids.fresh()  # this run's rids on each instance
        self.decision = decision = routed.decision
        self.prefill_url, self.relay_url, self.main = routed.prefill, routed.relay, routed.main
        self.site = router.mains[self.main.url]  # RouterState.site
        self.main_plan = routed.main_plan  # how the KV reaches MD (None: P-RLD)
        self.record = PddRecord(
            pipeline=decision.pipeline,
            reason=decision.reason,
            rule=decision.rule,
            instance_rid=self.ids.rid,
            main=self.main.url,
            est_main_ready_s=decision.est_main_ready_s
            if decision.est_main_ready_s != float("inf")
            else None,
        )
        self.t0 = time.monotonic()
        self._tasks: list[asyncio.Task] = []
        self._first_prefill: asyncio.Task | None = None  # P's send for the first decoder
        self.prompt_tokens = len(body["input_ids"])
        self.released = False  # finished on RLD; MD still receives (and caches) the KV
        self._transfer = None  # this request's registered transfer to MD
        self._last_relay_s = 0.0
        self._gap_from: float | None = None  # when the last id before a final handoff went
        self._itl = {"relay": _Gaps(), "main": _Gaps()}  # chunk gaps per source
        # instance URL -> this run's streams from it (queues pumped by a task, inline streams)
        self._streams: dict[str, list[PumpedStream | InlineStream]] = {}
        self.site.active += 1
        router.prefill_active[self.prefill_url] += 1
        self._counted = True

    # -- helpers ----------------------------------------------------------------------------
    def since(self) -> float:
        return time.monotonic() - self.t0

    def sub_body(self, rid: str, room: int) -> dict:
        prefill = self.router.bootstrap[self.prefill_url]
        return {
            **self.body,
            "rid": rid,
            "bootstrap_host": prefill[0],
            "bootstrap_port": prefill[1],
            "bootstrap_room": room,
        }

    def prefill(self, rid: str, room: int):
        """P's sub-request ``rid`` (a coroutine answering when P has sent the KV)."""
        return post_prefill(
            self.router.session, f"{self.prefill_url}/generate", self.sub_body(rid, room)
        )

    def spawn_first_prefill(self, rid: str, room: int) -> asyncio.Task:
        """P's send for the first decoder (RLD, or MD on P-MD), whose answer ends P's part
        (``prefill_done``) and says what P's prefix cache held of the prompt."""
        task = self._first_prefill = self.spawn(self.prefill(rid, room))
        task.add_done_callback(self.prefill_done)
        return task

    async def prefill_answered(self) -> None:
        """Give P's answer to the first send a moment when the decoder ended first (P answers
        once its KV is sent, but its reply may reach the router after a short answer's last
        token): the answer's usage reports P's prefix-cache hit."""
        task = self._first_prefill
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=PREFILL_ANSWER_WAIT_S)

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(self._note_failure)
        self._tasks.append(task)
        return task

    def _note_failure(self, task: asyncio.Task) -> None:
        """Log a sub-request task's failure once, whether or not the request still awaits it
        (a room-2 prefill whose request finished on RLD is never awaited)."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.info(
                "sglang-pdd router: %s: sub-request ended with %s: %s",
                self.rid,
                type(exc).__name__,
                exc,
            )

    def stream_into_queue(self, url: str, body: dict, answer_due=None) -> PumpedStream:
        """Stream ``url``'s answer to ``body`` into a queue (a task of its own copies it), for
        a stream waited on together with others. ``answer_due``: a parked relayed MD stream's
        (silent by design until it owes tokens): its idle limit applies only while that says
        so."""
        queue = PumpedStream()
        self._streams.setdefault(url, []).append(queue)
        limit = self.router.config.upstream_idle_timeout_s
        idle = (lambda: limit if answer_due() else None) if answer_due else (lambda: limit)
        queue.task = self.spawn(_pump(self._upstream(url, body), queue, url, idle))
        return queue

    def _stream_inline(self, url: str, body: dict) -> InlineStream:
        """Stream ``url``'s answer to ``body``, read by the task that consumes it (a stream one
        task reads from start to end)."""
        # Read only when its consumer asks for the next chunk: the chunks may share the
        # reader's id list rather than copy it each time (stream_sse's ``shared_ids``).
        upstream = self._upstream(url, body, shared_ids=True)
        stream = InlineStream(upstream, url, self.router.config.upstream_idle_timeout_s)
        self._streams.setdefault(url, []).append(stream)
        return stream

    def _upstream(self, url: str, body: dict, shared_ids: bool = False):
        incremental = self.router.incremental_streams.get(url, False)
        return stream_sse(self.router.session, f"{url}/generate", body, incremental, shared_ids)

    def detach(self, *tasks: asyncio.Task) -> None:
        """Let ``tasks`` run to their end after this request is answered (not cancelled)."""
        for task in tasks:
            if task in self._tasks:
                self._tasks.remove(task)
            self.router.keep_in_background(task)

    def delta(self, token_ids: list[int], source: str, meta: ChunkMeta | None) -> TokenDelta:
        now = self.since()
        rec = self.record
        if rec.first_token_s is None and token_ids:
            rec.first_token_s = now
        if self._gap_from is not None:  # the first id after a final handoff was sent
            rec.handoff_gaps_s.append(now - self._gap_from)
            self._gap_from = None
        self._itl[source].note(now)
        if source == "relay":
            rec.relay_tokens += len(token_ids)
            self._last_relay_s = rec.relay_last_s = now
        else:
            if rec.main_tokens == 0:
                rec.main_first_s = now
                if rec.relay_tokens:
                    rec.handoff_stall_s = now - self._last_relay_s
                    if rec.handoff_s is not None:
                        rec.handoff_to_main_s = now - rec.handoff_s
                        # What a handoff takes before MD answers (an RTT, the extend, one
                        # step): overlapped, until MD's first chunk (the client may have
                        # switched later); this also sets how long an overlap may wait.
                        cost = rec.handoff_to_main_s
                        if rec.handoff_switch == "overlap" and rec.main_answer_s is not None:
                            cost = rec.main_answer_s - rec.handoff_s
                        self.router.note_handoff_gap(cost)
            rec.main_tokens += len(token_ids)
        rec.e2e_s = now
        if not self.body.get("return_logprob"):
            return TokenDelta(token_ids, source)
        return TokenDelta(token_ids, source, *token_logprobs(meta, len(token_ids)))

    def evict(self, error: UpstreamError) -> bool:
        """End this run's streams from ``error.instance`` with ``error`` (it is draining); True
        when the run had one. A parked MD stream is left alone: the handoff loop sees the
        instance draining and lets Relay-Decode finish the request."""
        streams = self._streams.get(error.instance, [])
        for stream in streams:
            stream.fail(error)
        return bool(streams)

    def sub_rids(self) -> dict[str, list[str]]:
        """Each instance's rids for this request (SGLang aborts by exact rid only)."""
        rids = {self.prefill_url: self.ids.on_prefill(), self.main.url: self.ids.on_main()}
        if self.relay_url:
            rids[self.relay_url] = [self.ids.relay]
        return rids

    def served_by(self) -> list[str]:
        """The instances that did their part of this (finished) request: P, and each decoding
        instance that streamed ids (what closes a half-open breaker)."""
        urls = [self.prefill_url]
        if self.relay_url and self.record.relay_tokens:
            urls.append(self.relay_url)
        if self.record.main_tokens:
            urls.append(self.main.url)
        return urls

    async def abort_everywhere(self) -> None:
        """Abort this request's sub-requests on every instance, each by its exact rid."""
        pairs = [(url, rid) for url, rids in self.sub_rids().items() for rid in rids]
        await asyncio.gather(*(abort(self.router.session, url, rid) for url, rid in pairs))

    def relay_itl(self) -> float | None:
        """RLD's seconds per id for this request so far (None before its second id)."""
        rec = self.record
        if rec.relay_tokens < 2 or rec.relay_last_s is None or rec.first_token_s is None:
            return None
        return (rec.relay_last_s - rec.first_token_s) / (rec.relay_tokens - 1)

    def start_handoff_gap(self) -> None:
        """The client's gap at a switch to MD starts at the last id it was sent (None: none
        yet); ``delta`` measures it at MD's first."""
        self._gap_from = self.record.e2e_s

    def drop_transfer(self) -> None:
        """This request's registered transfer to MD never landed: free its waiters."""
        if self._transfer is not None:
            self.site.transfers.drop(self._transfer)

    def finished(self, finish_reason: dict | None) -> Finished:
        """The request's end, with its record's streaming figures filled in."""
        rec = self.record
        rec.relay_itl_s = self._itl["relay"].mean
        rec.main_itl_s = self._itl["main"].mean
        rec.main_itl_max_s = self._itl["main"].largest if self._itl["main"].count else None
        paced = {k: g.count >= PACE_MIN_GAPS and g.mean is not None for k, g in self._itl.items()}
        return Finished(
            finish_reason,
            self.prompt_tokens,
            rec,
            main_pace_s=rec.main_itl_s if paced["main"] else None,
            relay_pace_s=rec.relay_itl_s if paced["relay"] else None,
        )

    def prefill_done(self, task: asyncio.Task | None = None) -> None:
        if task is not None and self.record.prefill_s is None:
            self.record.prefill_s = self.since()
            if not task.cancelled() and task.exception() is None:
                self.record.prompt_cached_tokens = task.result().meta_info.cached_tokens
        if self._counted:
            self._counted = False
            self.router.prefill_active[self.prefill_url] -= 1

    def main_prefill_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is None:
            self.record.main_prefill_s = self.since()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for streams in self._streams.values():
            for stream in streams:
                with contextlib.suppress(Exception):  # a broken stream is closed anyway
                    await stream.aclose()
        self.prefill_done()
        self.site.active -= 1
        if self._transfer is not None and not self.released:
            self.site.transfers.drop(self._transfer)  # never landed: nothing to wait for
        if not self.released:  # else the background task reading MD's late events forgets it
            self.site.control.forget(self.ids.relayed)
        self.site.control.forget(self.ids.main)

    # -- the transfer to Main-Decode (transfer_claims) ----------------------------------------
    def try_claim(self, main_rid: str, *, learn: bool):
        """Register this request's transfer to MD, or say what to wait for
        (``transfer_claims.try_claim``)."""
        return transfer_claims.try_claim(self, main_rid, learn=learn)

    async def claim(self, main_rid: str, *, learn: bool):
        """Register this request's transfer to MD once nothing on the link carries its prefix
        (``transfer_claims.claim``)."""
        return await transfer_claims.claim(self, main_rid, learn=learn)

    async def claim_shared(self, transfer, waited_s: float = 0.0) -> str | None:
        """Claim ``transfer`` on the ledger shared with other routers
        (``transfer_claims.claim_shared``)."""
        return await transfer_claims.claim_shared(self, transfer, waited_s)

    def main_ended(self, output_ids=()) -> None:
        """MD's request ended normally: SGLang inserted its KV into MD's radix tree."""
        self.site.confirm_cached(list(self.body["input_ids"]) + list(output_ids))

    # -- pipelines --------------------------------------------------------------------------
    def events(self):
        """``TokenDelta``s then one ``Finished`` (an async generator); raises ``UpstreamError``
        on bad input. The pipeline's own generator, not one wrapping it: every chunk passes
        through it."""
        if self.decision.pipeline == PIPELINE_P_MD:
            return self._main_only()
        if self.decision.pipeline == PIPELINE_P_RLD:
            return self._relay_only()
        return RelayedPipeline(self).run()

    async def _main_only(self):
        rid = self.ids.main
        control = self.site.control
        events = await control.watch(rid)
        await self.claim(rid, learn=False)  # its time to MD includes P's prefill
        room = random.getrandbits(63)
        self.spawn_first_prefill(self.ids.prefill, room)
        main_q = self._stream_inline(self.main.url, self.sub_body(rid, room))
        async for event in self.follow_main(main_q, events, already_sent=0):
            yield event

    async def _relay_only(self):
        room = random.getrandbits(63)
        prefill = self.spawn_first_prefill(self.ids.prefill, room)
        relay_q = self._stream_inline(self.relay_url, self.sub_body(self.ids.relay, room))
        sent = 0
        while (chunk := await relay_q.get()) is not _END:
            if isinstance(chunk, Exception):
                await self._raise_prefill_error(prefill, chunk)
            ids = chunk.output_ids
            if len(ids) > sent:
                yield self.delta(ids[sent:], "relay", chunk.meta_info)
                sent = len(ids)
            if chunk.finish_reason:
                self.record.finished_on = "relay"
                yield self.finished(chunk.finish_reason)
                return

    async def _raise_prefill_error(self, prefill_task: asyncio.Task, fallback: Exception):
        """Prefer the prefill server's error (it validates the prompt) over a decode-side one."""
        raise prefill_failure(prefill_task) or fallback

    def note_ready(self, event: Ready) -> None:
        if self.record.main_ready_s is None:
            self.record.main_ready_s = self.since()
            self.record.wan_bytes = event.kv_bytes or 0
            self.record.main_cached_tokens = event.cached_tokens

    async def follow_main(self, main_q, events, already_sent: int, expected_prefix=(), early=()):
        """Forward Main-Decode's tokens past ``already_sent``; check it kept the handed prefix.
        ``early``: chunks of MD's stream already read from ``main_q``."""
        sent = already_sent
        early = list(early)
        while (chunk := early.pop(0) if early else await main_q.get()) is not _END:
            if isinstance(chunk, Exception):
                raise chunk
            ids = chunk.output_ids
            if expected_prefix:
                n = min(len(ids), len(expected_prefix))  # what of the prefix this chunk covers
                if ids[:n] != list(expected_prefix[:n]):
                    why = "Main-Decode diverged from the handed-off tokens"
                    raise UpstreamError(500, {"error": {"message": why}})
            if self.record.main_ready_s is None:
                self._drain_ready(events)
            if len(ids) > sent:
                yield self.delta(ids[sent:], "main", chunk.meta_info)
                sent = len(ids)
            if chunk.finish_reason:
                self.record.finished_on = "main"
                self._drain_ready(events)
                self.main_ended(ids)
                yield self.finished(chunk.finish_reason)
                return
        raise UpstreamError(
            502, {"error": {"message": "Main-Decode stream ended early"}}, self.main.url
        )

    def _drain_ready(self, events: asyncio.Queue) -> None:
        if (ready := take_ready_event(events)) is not None:
            self.note_ready(ready)
