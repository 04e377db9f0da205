"""The router's HTTP API: SGLang's ``/generate`` and OpenAI's endpoints, served through PDD."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

from aiohttp import web

from sglang_pdd.router import openai_format as oai
from sglang_pdd.router import openai_logprobs
from sglang_pdd.router.pdd_request import PddRequestRun
from sglang_pdd.router.record import Finished, TokenDelta
from sglang_pdd.router.request_fields import (
    GENERATE_FIELDS,
    LOGPROB_FIELDS,
    OPENAI_FIELDS,
    unsupported_fields,
    unsupported_message,
    unsupported_sampling,
)
from sglang_pdd.router.state import RouterState
from sglang_pdd.router.text import StreamingText
from sglang_pdd.router.upstream import UpstreamError

logger = logging.getLogger("sglang_pdd.router")
STATE = web.AppKey("state", RouterState)
_DISCONNECTED = (ConnectionResetError, ConnectionError, asyncio.CancelledError)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status}}, status=status)


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UpstreamError(400, {"error": {"message": f"Invalid JSON body: {exc}",
                                            "code": 400}}) from exc  # fmt: skip
    if not isinstance(body, dict):
        raise UpstreamError(400, {"error": {"message": "JSON body must be an object"}})
    return body


async def _sse(resp: web.StreamResponse, payload) -> None:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    await resp.write(f"data: {data}\n\n".encode())


class _Run:
    """Runs a ``PddRequestRun`` for one HTTP request; aborts everywhere if the client leaves."""

    def __init__(self, state: RouterState, input_ids: list[int], sampling: dict, extra: dict):
        self.state = state
        self.rid = extra.pop("rid", None) or uuid.uuid4().hex
        if self.rid in state.live:
            # Every instance would see two requests under the same sub-rids.
            raise UpstreamError(400, {"error": {"message": f"Duplicate request ID: {self.rid}",
                                                "code": 400}})  # fmt: skip
        self.body = {"input_ids": input_ids, "sampling_params": sampling, **extra}
        max_new = int(sampling.get("max_new_tokens", 128) or 128)
        decision, instances, main_plan = state.plan(input_ids, max_new)
        state.metrics.requests.labels(decision.pipeline, decision.rule).inc()
        self.run = PddRequestRun(state, self.body, self.rid, decision, instances, main_plan)
        state.live[self.rid] = self.run.record
        self.text = StreamingText(state.tokenizer, bool(sampling.get("no_stop_trim")),
                                  bool(sampling.get("skip_special_tokens", True)))  # fmt: skip
        self.finished: Finished | None = None
        self.tail = ""  # text released by the final trim of a matched stop
        self.logprobs = bool(extra.get("return_logprob"))
        self.token_logprobs: list = []  # per output token, from the instance that made it
        self.top_logprobs: list = []

    async def events(self):
        completed = False
        metrics = self.state.metrics
        last = None
        try:
            async for event in self.run.events():
                if isinstance(event, TokenDelta):
                    now = self.run._since()
                    if last is None:
                        metrics.ttft.observe(now)
                    else:
                        metrics.itl.observe(now - last)
                    last = now
                    metrics.output_tokens.labels(event.source).inc(len(event.token_ids))
                    if self.logprobs:
                        self.token_logprobs.extend(event.logprobs)
                        self.top_logprobs.extend(event.top_logprobs)
                if isinstance(event, Finished):
                    record = event.record
                    if record.main_ready_s is not None:
                        metrics.main_ready.observe(record.main_ready_s)
                        metrics.wan_bytes.inc(record.wan_bytes)
                    if record.handoff_stall_s is not None:
                        metrics.handoff_stall.observe(record.handoff_stall_s)
                    self.finished = event
                    self.tail = self.text.finish(event.finish_reason)
                    logger.info("pdd-record rid=%s %s", self.rid,
                                json.dumps(event.record.as_dict()))  # fmt: skip
                yield event
            completed = True
        finally:
            self.state.live.pop(self.rid, None)
            # The clean-up runs as its own task: a client that leaves cancels this handler
            # (perhaps more than once), and the aborts must still reach every instance.
            await asyncio.shield(self.state.run_in_background(self._clean_up(completed)))

    async def _clean_up(self, completed: bool) -> None:
        if not completed:
            await self.run.abort_everywhere()
        await self.run.close()

    def meta(self, finish_reason, since: int = 0) -> dict:
        """SGLang's ``meta_info``; logprob entries from output token ``since`` on."""
        record = self.run.record.as_dict()
        meta = {"id": self.rid, "finish_reason": finish_reason,
                "prompt_tokens": self.run.prompt_tokens,
                "completion_tokens": len(self.text.ids), "pdd": record}  # fmt: skip
        if self.logprobs:  # input logprobs: only logprob_start_len -1 is served (none)
            meta.update(input_token_logprobs=[], input_top_logprobs=[],
                        output_token_logprobs=self.token_logprobs[since:],
                        output_top_logprobs=self.top_logprobs[since:])  # fmt: skip
        return meta


async def generate(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await _json_body(request)
    text, input_ids = body.get("text"), body.get("input_ids")
    if isinstance(text, list) or (input_ids and isinstance(input_ids[0], list)):
        return _error(400, "batched /generate is not supported by the sglang-pdd router")
    if text is None and input_ids is None:
        return _error(400, "Either text or input_ids should be provided.")
    if unsupported := unsupported_fields(body, GENERATE_FIELDS):
        return _error(400, unsupported_message(unsupported))
    sampling = body.get("sampling_params") or {}
    if not isinstance(sampling, dict):
        return _error(400, "sampling_params must be a JSON object")
    if unsupported := unsupported_sampling(sampling):
        return _error(400, unsupported_message(unsupported))
    ids = state.tokenizer.encode(text) if text is not None else list(input_ids)
    passthrough = {"rid": body["rid"]} if body.get("rid") else {}
    passthrough.update({k: body[k] for k in LOGPROB_FIELDS if k in body})
    run = _Run(state, ids, dict(sampling), passthrough)
    if not body.get("stream"):
        async for event in run.events():
            if isinstance(event, TokenDelta):
                run.text.add(event.token_ids)
        reason = run.finished.finish_reason
        return web.json_response({"text": run.text.full(), "output_ids": run.text.ids,
                                  "meta_info": run.meta(reason)})  # fmt: skip
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    events = run.events()
    first = await anext(events)  # errors before the first token still get an HTTP status
    await resp.prepare(request)
    incremental = state.config.incremental_streaming_output
    try:
        async for event in _chain(first, events):
            before = len(run.text.ids)
            if isinstance(event, TokenDelta):
                delta = run.text.add(event.token_ids)
                reason, new_ids = None, event.token_ids
            else:
                reason, delta, new_ids = event.finish_reason, run.tail, []
            if incremental:  # like SGLang's --incremental-streaming-output: only what is new
                chunk = {"text": delta, "output_ids": list(new_ids)}
            else:
                chunk = {"text": run.text.sent if reason is None else run.text.full(),
                         "output_ids": list(run.text.ids)}  # fmt: skip
            meta = run.meta(reason, since=before if incremental else 0)
            await _sse(resp, {**chunk, "meta_info": meta})
        await _sse(resp, "[DONE]")
    except _DISCONNECTED:
        await _abandon(state, events)
        raise
    except UpstreamError as exc:
        await _end_with_error(resp, exc)
    return resp


async def _abandon(state: RouterState, events) -> None:
    """The client left: close the request's generator (its clean-up aborts it everywhere) in a
    task of its own, which a repeated cancellation of the handler cannot interrupt."""

    async def close() -> None:
        await events.aclose()

    await asyncio.shield(state.run_in_background(close()))


async def _end_with_error(resp: web.StreamResponse, exc: UpstreamError) -> None:
    """The status line is gone: like SGLang, the error travels as the stream's last chunk."""
    await _sse(resp, exc.body if "error" in exc.body else {"error": exc.body})
    await _sse(resp, "[DONE]")


async def _chain(first, rest):
    yield first
    async for item in rest:
        yield item


async def _openai(request: web.Request, kind: str) -> web.StreamResponse:
    state = request.app[STATE]
    body = await _json_body(request)
    if unsupported := unsupported_fields(body, OPENAI_FIELDS):
        raise oai.bad_request(unsupported_message(unsupported))
    model = body.get("model") or state.model_info.get("model_path", "default")
    if kind == "chat":
        ids = oai.chat_prompt(body, state.tokenizer)
        sampling = oai.sampling_params(body, default_max_tokens=None)
    else:
        ids = oai.completion_prompt(body, state.tokenizer)
        sampling = oai.sampling_params(body, default_max_tokens=16)
    if unsupported := unsupported_sampling(sampling, prefix=""):
        names = {"sampling_seed": "seed"}  # back to the OpenAI names the client sent
        raise oai.bad_request(unsupported_message([names.get(n, n) for n in unsupported]))
    run = _Run(state, ids, sampling, openai_logprobs.generate_fields(kind, body))
    oid = ("chatcmpl-" if kind == "chat" else "cmpl-") + run.rid
    build = openai_logprobs.chat_logprobs if kind == "chat" else openai_logprobs.completion_logprobs

    def logprobs_since(start: int) -> dict | None:
        if not run.logprobs:
            return None
        return build(run.token_logprobs[start:], run.top_logprobs[start:], state.tokenizer)

    if not body.get("stream"):
        async for event in run.events():
            if isinstance(event, TokenDelta):
                run.text.add(event.token_ids)
        fin = run.finished
        return web.json_response(oai.response(kind, oid, model, run.text.full(),
                                              fin.finish_reason, fin.prompt_tokens,
                                              len(run.text.ids), fin.record.as_dict(),
                                              logprobs_since(0)))  # fmt: skip
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    events = run.events()
    first = await anext(events)
    await resp.prepare(request)
    sent_any, logprobs_sent = False, 0  # logprobs ride the chunk that carries their text
    try:
        async for event in _chain(first, events):
            if isinstance(event, TokenDelta):
                delta = run.text.add(event.token_ids)
                if delta:
                    await _sse(resp, oai.chunk(kind, oid, model, delta, first=not sent_any,
                                               logprobs=logprobs_since(logprobs_sent)))  # fmt: skip
                    sent_any, logprobs_sent = True, len(run.token_logprobs)
            else:
                tail = run.tail
                use = oai.usage(event.prompt_tokens, len(run.text.ids))
                more = len(run.token_logprobs) > logprobs_sent
                lp = logprobs_since(logprobs_sent) if more else None
                await _sse(resp, oai.chunk(kind, oid, model, tail, event.finish_reason,
                                           first=not sent_any, usage_=use,
                                           logprobs=lp))  # fmt: skip
        await _sse(resp, "[DONE]")
    except _DISCONNECTED:
        await _abandon(state, events)
        raise
    except UpstreamError as exc:
        await _end_with_error(resp, exc)
    return resp


async def completions(request):
    return await _openai(request, "completion")


async def chat_completions(request):
    return await _openai(request, "chat")


async def models(request):
    state = request.app[STATE]
    name = state.server_info.get("served_model_name") or state.model_info.get("model_path")
    return web.json_response({"object": "list", "data": [
        {"id": name, "object": "model", "owned_by": "sglang-pdd", "root": name}]})  # fmt: skip


async def health(request):
    state = request.app[STATE]
    urls = [*state.config.prefill, *state.config.relay, *(m.url for m in state.config.main)]

    async def ok(url):
        try:
            async with state.session.get(f"{url}/health") as resp:
                return resp.status == 200
        except Exception:  # noqa: BLE001 - any failure means unhealthy
            return False

    results = await asyncio.gather(*(ok(u) for u in urls))
    bad = [u for u, good in zip(urls, results, strict=True) if not good]
    if bad:
        return _error(503, f"unhealthy instances: {', '.join(bad)}")
    return web.Response(text="")


async def health_generate(request):
    state = request.app[STATE]
    run = _Run(state, state.tokenizer.encode("health"), {"max_new_tokens": 2,
                                                          "temperature": 0.0}, {})  # fmt: skip
    async for _ in run.events():
        pass
    return web.Response(text="")


async def model_info(request):
    return web.json_response(request.app[STATE].model_info)


async def server_info(request):
    state = request.app[STATE]
    cfg = state.config
    return web.json_response({**state.server_info, "pdd_router": {
        "prefill": list(cfg.prefill), "relay": list(cfg.relay),
        "main": [m.url for m in cfg.main], "handoff_mode": cfg.handoff.mode,
        # Sub-requests still running after their client was answered (e.g. Main-Decode
        # caching the KV of a request that finished on Relay-Decode).
        "background_requests": len(state.background),
        "relay_loads": dict(state.relay_loads),
        "prefill_estimate_s": state.prefill_estimate_s,
        "mains": {url: site.describe() for url, site in state.mains.items()}}})  # fmt: skip


async def live_requests(request):
    """``GET /pdd/requests``: every request in flight and its record so far (pipeline, tokens
    from each decode instance, handoff state)."""
    live = request.app[STATE].live
    return web.json_response({rid: record.as_dict() for rid, record in list(live.items())})


async def metrics(request):
    body = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


@web.middleware
async def upstream_errors(request, handler):
    """An upstream SGLang error reaches the client with SGLang's own status and body."""
    try:
        return await handler(request)
    except UpstreamError as exc:
        return web.json_response(exc.body, status=exc.status)


def build_app(state: RouterState) -> web.Application:
    app = web.Application(middlewares=[upstream_errors], client_max_size=64 * 1024 * 1024)
    app[STATE] = state
    app.router.add_post("/generate", generate)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health_generate)
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/server_info", server_info)  # SGLang's newer name
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/pdd/requests", live_requests)

    async def on_startup(app):
        await state.start()

    async def on_cleanup(app):
        await state.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app
