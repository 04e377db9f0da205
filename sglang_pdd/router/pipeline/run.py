"""``ClientRun``: one client request (one prompt, one sample) driven through PDD."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

from sglang_pdd.router.instances.drain import draining_error
from sglang_pdd.router.pipeline.migration import continuation, migration_refused
from sglang_pdd.router.pipeline.pdd_request import PddRequestRun
from sglang_pdd.router.pipeline.record import Finished, TokenDelta
from sglang_pdd.router.pipeline.request_fields import max_new_tokens
from sglang_pdd.router.pipeline.text import StreamingText
from sglang_pdd.router.state import RouterState
from sglang_pdd.router.upstream.calls import UpstreamError

logger = logging.getLogger("sglang_pdd.router")


class ClientRun:
    """Runs a ``PddRequestRun`` for one HTTP request; aborts everywhere if the client leaves."""

    def __init__(self, state: RouterState, input_ids: list[int], sampling: dict, extra: dict):
        self.state = state
        self.rid = extra.pop("rid", None) or uuid.uuid4().hex
        if self.rid in state.live:
            # As SGLang's own server does: a rid names one request in flight (it also keys
            # GET /pdd/requests). Instances never see it: each run has rids of its own.
            raise UpstreamError(
                400, {"error": {"message": f"Duplicate request ID: {self.rid}", "code": 400}}
            )
        if not input_ids:
            # SGLang's own answer; sent on to instances, an empty prompt breaks their streams
            # (SGLang 0.5.23's abort task reads a field the failed request never got).
            why = "input_ids cannot be empty (the prompt has no tokens)."
            raise UpstreamError(400, {"error": {"message": why, "code": 400}})
        if len(input_ids) >= state.max_prompt_tokens:
            why = (
                f"The input ({len(input_ids)} tokens) is longer than the model's context length "
                f"allows: prompts must have fewer than {state.max_prompt_tokens} tokens "
                "(--max-prompt-tokens; by default the prefill servers' max_req_input_len)."
            )
            raise UpstreamError(400, {"error": {"message": why, "code": 400}})
        if bad := out_of_vocab(input_ids, state.vocab_size):
            # A plain SGLang 0.5.23 server's scheduler dies on such an id (an IndexError in
            # the embedding): refuse it before any instance sees it.
            raise UpstreamError(400, {"error": {"message": bad, "code": 400}})
        self.body = {"input_ids": input_ids, "sampling_params": sampling, **extra}
        max_new = max_new_tokens(sampling)
        routed = state.route(input_ids, max_new)
        state.metrics.requests.labels(routed.decision.pipeline, routed.decision.rule).inc()
        self.run = PddRequestRun(state, self.body, self.rid, routed)
        state.live[self.rid] = self.run.record
        self.emitted: list[int] = []  # output ids the client has been sent
        self.migrations: list[str] = []  # why each earlier run of this request was left
        self.failed: set[str] = set()  # instances that failed this request
        state.clients[self.rid] = self
        self.text = StreamingText(
            state.tokenizer,
            bool(sampling.get("no_stop_trim")),
            bool(sampling.get("skip_special_tokens", True)),
        )
        self.finished: Finished | None = None
        self.tail = ""  # text released by the final trim of a matched stop
        self.logprobs = bool(extra.get("return_logprob"))
        self.token_logprobs: list = []  # per output token, from the instance that made it
        self.top_logprobs: list = []
        # SGLang's cached_tokens: the prompt's tokens P found in its prefix cache (0 until P
        # has answered; brought up to date at each event)
        self.cached_tokens = 0

    async def events(self):
        completed = False
        metrics = self.state.metrics
        last = None
        try:
            async for event in self._runs():
                if isinstance(event, Finished):
                    await self.run.prefill_answered()
                self.cached_tokens = self.run.record.prompt_cached_tokens or 0
                if isinstance(event, TokenDelta):
                    now = self.run.since()
                    if last is None:
                        metrics.ttft.observe(now)
                    else:
                        metrics.itl.observe(now - last)
                    last = now
                    metrics.output_tokens_of[event.source].inc(len(event.token_ids))
                    if self.logprobs:
                        self.token_logprobs.extend(event.logprobs)
                        self.top_logprobs.extend(event.top_logprobs)
                if isinstance(event, Finished):
                    record = event.record
                    if event.main_pace_s is not None:
                        self.state.note_main_itl(self.run.main.url, event.main_pace_s)
                    if event.relay_pace_s is not None:
                        self.state.note_relay_itl(event.relay_pace_s)
                    if record.main_ready_s is not None:
                        metrics.main_ready.observe(record.main_ready_s)
                        metrics.wan_bytes.inc(record.wan_bytes)
                    if record.handoff_stall_s is not None:
                        metrics.handoff_stall.observe(record.handoff_stall_s)
                    for gap in record.handoff_gaps_s:
                        metrics.handoff_gap.observe(gap)
                    if record.e2e_s is not None:
                        metrics.e2e.observe(record.e2e_s)
                    self.finished = event
                    for url in self.run.served_by():
                        self.state.health.mark_served(url)
                    self.tail = self.text.finish(event.finish_reason)
                    logger.info(
                        "pdd-record rid=%s %s", self.rid, json.dumps(event.record.as_dict())
                    )
                    # The client may reuse its rid as soon as it has the last chunk.
                    self._unlist()
                yield event
            completed = True
        except UpstreamError as exc:
            metrics.failed.labels(str(exc.status)).inc()
            raise
        finally:
            if completed:
                self._unlist()
            # The clean-up runs as its own task: a client that leaves cancels this handler
            # (perhaps more than once), and the aborts must still reach every instance. An
            # unfinished request stays listed until they have (its clean-up unlists it).
            await asyncio.shield(self.state.run_in_background(self._clean_up(completed)))

    def _unlist(self) -> None:
        if self.state.clients.get(self.rid) is self:
            self.state.live.pop(self.rid, None)
            self.state.clients.pop(self.rid, None)

    async def _runs(self):
        """The current run's events; when an instance fails or stalls, the request continues
        on others from the prompt plus the ids the client has (see ``migration.py``)."""
        while True:
            try:
                async for event in self.run.events():
                    if isinstance(event, TokenDelta):
                        self.emitted.extend(event.token_ids)
                    yield event
                return
            except UpstreamError as exc:
                if exc.instance is not None and not self.state.health.is_draining(exc.instance):
                    self.state.health.mark_down(exc.instance)
                why = migration_refused(
                    exc,
                    self.body,
                    self.emitted,
                    len(self.migrations),
                    self.state.config.migration_limit,
                )
                if why is not None:
                    if exc.instance is not None:
                        logger.warning(
                            "sglang-pdd router: %s: %s failed; not migrated: %s",
                            self.rid,
                            exc.instance,
                            why,
                        )
                    raise
                await self._migrate(exc)

    def evict(self, url: str) -> bool | None:
        """``url`` is draining: move this request off it (True), or, when it cannot migrate,
        let it finish there (False); None when it does not use ``url``."""
        error = draining_error(url, self.state.health.drain_cause(url))
        why = migration_refused(
            error, self.body, self.emitted, len(self.migrations), self.state.config.migration_limit
        )
        if why is not None:
            return False if url in self.run.sub_rids() else None
        return True if self.run.evict(error) else None

    async def _migrate(self, exc: UpstreamError) -> None:
        old = self.run
        self.failed.add(exc.instance)
        error = exc.body.get("error") if isinstance(exc.body, dict) else exc.body
        message = str(error.get("message", "") if isinstance(error, dict) else error)[:200]
        reason = f"{exc.instance} failed after {len(self.emitted)} ids: {exc.status} {message}"
        body = continuation(self.body, self.emitted)
        left = body["sampling_params"]["max_new_tokens"]
        try:
            routed = self.state.route(body["input_ids"], left, frozenset(self.failed))
        except ValueError as no_instance:
            logger.warning("sglang-pdd router: %s: %s; %s", self.rid, reason, no_instance)
            raise exc from None
        self.migrations.append(reason)
        logger.warning(
            "sglang-pdd router: %s: %s; continuing %s from %d ids (migration %d)",
            self.rid,
            reason,
            routed.decision.pipeline,
            len(self.emitted),
            len(self.migrations),
        )
        self.state.metrics.requests.labels(routed.decision.pipeline, "migration").inc()
        self.state.metrics.migrations.inc()
        await old.abort_everywhere()
        await old.close()
        run = PddRequestRun(self.state, body, self.rid, routed)
        run.prompt_tokens = len(self.body["input_ids"])  # the client's prompt, not the replay
        run.record.migrations = list(self.migrations)
        self.run = run
        self.state.live[self.rid] = run.record

    async def _clean_up(self, completed: bool) -> None:
        try:
            if not completed:
                await self.run.abort_everywhere()
            await self.run.close()
        finally:
            self._unlist()

    def meta(self, finish_reason, since: int = 0, record: bool = True) -> dict:
        """SGLang's ``meta_info``; logprob entries from output token ``since`` on; ``record``:
        with the request's ``PddRecord`` as ``pdd``."""
        meta = {
            "id": self.rid,
            "finish_reason": finish_reason,
            "prompt_tokens": self.run.prompt_tokens,
            "completion_tokens": len(self.text.ids),
            "cached_tokens": self.cached_tokens,
        }
        if record:
            meta["pdd"] = self.run.record.as_dict()
        if self.logprobs:  # input logprobs: only logprob_start_len -1 is served (none)
            meta.update(
                input_token_logprobs=[],
                input_top_logprobs=[],
                output_token_logprobs=self.token_logprobs[since:],
                output_top_logprobs=self.top_logprobs[since:],
            )
        return meta


def out_of_vocab(input_ids: list, vocab_size: int) -> str | None:
    """Why ``input_ids`` cannot be served (an id that is not an int in [0, vocab_size)), or
    None. ``vocab_size`` 0: unknown, nothing checked."""
    if not vocab_size:
        return None
    for position, token in enumerate(input_ids):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            return (
                f"input_ids[{position}] = {token!r} is outside the model's vocabulary "
                f"[0, {vocab_size})"
            )
    return None
