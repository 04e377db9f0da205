"""The router's HTTP API: SGLang's ``/generate`` and OpenAI's endpoints, served through PDD."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
from aiohttp import web

from sglang_pdd.router.api.auth import authorized
from sglang_pdd.router.api.openai_app import serve_completion
from sglang_pdd.router.api.openai_chat import serve_chat
from sglang_pdd.router.api.openai_format import bad_request as bad_openai_request
from sglang_pdd.router.api.request_model import InvalidRequest, json_body, validate_generate
from sglang_pdd.router.api.streaming import DISCONNECTED, abandon, send_stream, sse
from sglang_pdd.router.instances.drain import drain, undrain
from sglang_pdd.router.instances.health import cannot_serve
from sglang_pdd.router.pipeline.fanout import expand_generate, merged_events, start_runs
from sglang_pdd.router.pipeline.record import TokenDelta
from sglang_pdd.router.pipeline.request_fields import (
    GENERATE_FIELDS,
    LOGPROB_FIELDS,
    unsupported_fields,
    unsupported_message,
    unsupported_sampling,
)
from sglang_pdd.router.pipeline.run import ClientRun
from sglang_pdd.router.state import STATE, RouterState
from sglang_pdd.router.upstream.calls import UpstreamError

logger = logging.getLogger("sglang_pdd.router")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status}}, status=status)


async def generate(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await json_body(request)
    validate_generate(body, state.limits)
    if body.get("text") is None and body.get("input_ids") is None:
        return _error(400, "Either text or input_ids should be provided.")
    if unsupported := unsupported_fields(body, GENERATE_FIELDS):
        return _error(400, unsupported_message(unsupported))
    sampling = body.get("sampling_params") or {}
    for params in sampling if isinstance(sampling, list) else [sampling]:
        if not isinstance(params, dict):
            return _error(400, "sampling_params must be a JSON object (or one per prompt)")
        # n > 1 is served by fanning out (router/pipeline/fanout.py); the rest must carry over.
        fields = {k: v for k, v in params.items() if k != "n"}
        if unsupported := unsupported_sampling(fields, seeded=state.config.seeded_sampling):
            return _error(400, unsupported_message(unsupported))
    extra = {k: body[k] for k in LOGPROB_FIELDS if k in body}
    subs, many = expand_generate(body, state.tokenizer, extra)
    runs = start_runs(state, subs)
    if many:
        return await _generate_many(request, state, runs, bool(body.get("stream")))
    run = runs[0]
    if not body.get("stream"):
        async for event in run.events():
            if isinstance(event, TokenDelta):
                run.text.add(event.token_ids)
        return web.json_response(_generate_answer(run))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    events = run.events()
    first = await anext(events)  # errors before the first token still get an HTTP status
    await resp.prepare(request)
    incremental = state.config.incremental_streaming_output

    async def send(events) -> None:
        await sse(resp, _generate_chunk(run, first, incremental))
        async for event in events:
            await sse(resp, _generate_chunk(run, event, incremental))
        await sse(resp, "[DONE]")

    return await send_stream(state, resp, events, send)


def _generate_answer(run: ClientRun) -> dict:
    return {
        "text": run.text.full(),
        "output_ids": run.text.ids,
        "meta_info": run.meta(run.finished.finish_reason),
    }


def _generate_chunk(run: ClientRun, event, incremental: bool) -> dict:
    """One streamed /generate chunk for ``event`` (SGLang's shape). It shares the run's lists:
    encode it before the run goes on (every caller sends it at once)."""
    before = len(run.text.ids)
    if isinstance(event, TokenDelta):
        delta = run.text.add(event.token_ids)
        reason, new_ids = None, event.token_ids
    else:
        reason, delta, new_ids = event.finish_reason, run.tail, []
    # The record rides the last chunk only: copied and encoded for every token it was the
    # largest part of the router's per-token work (docs/costs.md).
    meta = run.meta(reason, since=before if incremental else 0, record=reason is not None)
    if incremental:  # like SGLang's --incremental-streaming-output: only what is new
        return {"text": delta, "output_ids": new_ids, "meta_info": meta}
    text = run.text.sent if reason is None else run.text.full()
    return {"text": text, "output_ids": run.text.ids, "meta_info": meta}


async def _generate_many(
    request, state: RouterState, runs: list[ClientRun], stream: bool
) -> web.StreamResponse:
    """A batch or n > 1: SGLang's list of answers, or its chunks tagged with ``index``."""
    merged = merged_events(runs)
    if not stream:
        try:
            async for index, event in merged:
                if isinstance(event, TokenDelta):
                    runs[index].text.add(event.token_ids)
        except DISCONNECTED:
            await abandon(state, merged)
            raise
        return web.json_response([_generate_answer(run) for run in runs])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    incremental = state.config.incremental_streaming_output

    async def send(merged) -> None:
        async for index, event in merged:
            await sse(resp, {**_generate_chunk(runs[index], event, incremental), "index": index})
        await sse(resp, "[DONE]")

    return await send_stream(state, resp, merged, send)


async def completions(request):
    return await serve_completion(request, request.app[STATE])


async def chat_completions(request):
    return await serve_chat(request, request.app[STATE])


async def models(request):
    state = request.app[STATE]
    name = state.server_info.get("served_model_name") or state.model_info.get("model_path")
    return web.json_response(
        {
            "object": "list",
            "data": [{"id": name, "object": "model", "owned_by": "sglang-pdd", "root": name}],
        }
    )


async def health(request):
    state = request.app[STATE]
    urls = [*state.config.prefill, *state.config.relay, *(m.url for m in state.config.main)]

    timeout = aiohttp.ClientTimeout(total=state.config.health_timeout_s)

    async def ok(url):
        try:
            async with state.session.get(f"{url}/health", timeout=timeout) as resp:
                return resp.status == 200
        except Exception:  # noqa: BLE001 - any failure (or silence) means unhealthy
            return False

    results = await asyncio.gather(*(ok(u) for u in urls))
    taken_out = state.health.draining | state.health.stopping
    healthy = {u for u, good in zip(urls, results, strict=True) if good and u not in taken_out}
    config = state.config
    why = cannot_serve(
        list(config.prefill),
        list(config.relay),
        [m.url for m in config.main],
        config.pipeline.enable_relay,
        healthy,
    )
    if why is not None:
        return _error(503, f"the router cannot serve: {why}")
    # Degraded but serving: 200, as a load balancer should keep sending here.
    bad = [u for u in urls if u not in healthy]
    return web.Response(text=f"degraded: not serving: {', '.join(bad)}" if bad else "")


async def health_generate(request):
    state = request.app[STATE]
    run = ClientRun(
        state, state.tokenizer.encode("health"), {"max_new_tokens": 2, "temperature": 0.0}, {}
    )
    events = run.events()
    limit = state.config.health_timeout_s
    try:
        async with asyncio.timeout(limit):
            async for _ in events:
                pass
    except TimeoutError:
        await abandon(state, events)  # its clean-up aborts it on every instance
        return _error(503, f"no answer to a 2-token generation in {limit:g} s")
    return web.Response(text="")


async def model_info(request):
    return web.json_response(request.app[STATE].model_info)


async def server_info(request):
    state = request.app[STATE]
    cfg = state.config
    return web.json_response(
        {
            **state.server_info,
            "pdd_router": {
                "prefill": list(cfg.prefill),
                "relay": list(cfg.relay),
                "main": [m.url for m in cfg.main],
                "handoff_mode": cfg.handoff.mode,
                # Sub-requests still running after their client was answered (e.g. Main-Decode
                # caching the KV of a request that finished on Relay-Decode).
                "background_requests": len(state.background),
                "relay_loads": dict(state.relay_loads),
                # Each P's queued prefill, the least of it over the policy's window, and its
                # prefill rate (polled with --relay-shares-prefill).
                "prefill_backlogs": {
                    u: {
                        "seconds": b.seconds,
                        "standing_seconds": b.standing_seconds(
                            cfg.pipeline.prefill_backlog_window_s, time.monotonic()
                        ),
                        "tokens_per_s": b.rate.value,
                    }
                    for u, b in state.prefill_backlogs.items()
                },
                "out_of_rotation": sorted(state.health.out_of_rotation()),
                "draining": sorted(state.health.draining),
                "stopping": sorted(state.health.stopping),
                "prefill_estimate_s": state.prefill_estimate_s,
                "mains": {url: site.describe() for url, site in state.mains.items()},
                "transfer_ledger": (
                    None
                    if state.ledger is None
                    else {
                        "endpoint": state.ledger.endpoint,
                        **state.ledger.stats,
                        "wan_sending_bytes": state.ledger.sending[0],
                    }
                ),
            },
        }
    )


async def live_requests(request):
    """``GET /pdd/requests``: every request in flight and its record so far (pipeline, tokens
    from each decode instance, handoff state)."""
    live = request.app[STATE].live
    return web.json_response({rid: record.as_dict() for rid, record in list(live.items())})


async def metrics(request):
    body = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


def api_key_middleware(api_key: str | None, admin_api_key: str | None = None):
    """An aiohttp middleware answering 401 ``{"error": "Unauthorized"}`` (SGLang's answer) to a
    request ``auth.authorized`` refuses."""

    @web.middleware
    async def check(request: web.Request, handler):
        if not authorized(
            request.path,
            request.method,
            request.headers.get("Authorization"),
            api_key,
            admin_api_key,
        ):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


@web.middleware
async def upstream_errors(request, handler):
    """An upstream SGLang error reaches the client with SGLang's own status and body."""
    try:
        return await handler(request)
    except UpstreamError as exc:
        return web.json_response(exc.body, status=exc.status, headers=exc.headers)
    except InvalidRequest as exc:  # the client's input: a 400 naming the field
        if request.path.startswith("/v1/"):
            return web.json_response(bad_openai_request(str(exc)).body, status=400)
        return _error(400, str(exc))


def build_app(state: RouterState) -> web.Application:
    app = web.Application(
        middlewares=[
            api_key_middleware(state.config.api_key, state.config.admin_api_key),
            upstream_errors,
        ],
        client_max_size=int(state.config.max_body_mb * 2**20),
    )
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
    app.router.add_post("/pdd/drain", drain)
    app.router.add_post("/pdd/undrain", undrain)

    async def on_startup(app):
        await state.start()

    async def on_cleanup(app):
        await state.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app
