"""Helpers shared by the router's streaming endpoints (SGLang's /generate and OpenAI's)."""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from sglang_pdd.router.api.request_model import decode_body
from sglang_pdd.router.pipeline.fanout import SubRequest
from sglang_pdd.router.pipeline.run import ClientRun
from sglang_pdd.router.state import RouterState
from sglang_pdd.router.upstream.calls import UpstreamError

# What a handler sees when its client has gone.
DISCONNECTED = (ConnectionResetError, ConnectionError, asyncio.CancelledError)


# Bodies larger than this are decoded off the event loop, so that other streams keep flowing.
_DECODE_INLINE_BYTES = 1 << 20


async def json_body(request: web.Request) -> dict:
    """The request's JSON object; ``InvalidRequest`` (a 400) for anything else."""
    raw = await request.read()
    if len(raw) > _DECODE_INLINE_BYTES:
        return await asyncio.to_thread(decode_body, raw)
    return decode_body(raw)


# SGLang's own options for the JSON it streams (sglang.srt.utils.json_response).
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


async def sse(resp: web.StreamResponse, payload) -> None:
    """One server-sent event: ``payload`` as JSON (orjson, as SGLang streams), or a string
    (``[DONE]``) as is. Runs for every chunk of every stream."""
    data = (
        payload.encode()
        if isinstance(payload, str)
        else orjson.dumps(payload, option=_ORJSON_OPTIONS)
    )
    await resp.write(b"data: " + data + b"\n\n")


def start_runs(state: RouterState, subs: list[SubRequest]) -> list[ClientRun]:
    """A ``ClientRun`` per sub-request; none is left registered if one cannot start. Past
    ``--max-live-requests`` in flight, a 503 (as SGLang's full request queue answers)."""
    limit = state.config.max_live_requests
    if len(state.live) + len(subs) > limit:
        why = (
            f"the router has {len(state.live)} requests in flight and takes at most {limit} "
            "(--max-live-requests); retry later"
        )
        state.metrics.refused_at_capacity.inc()
        # Retry-After: requests here last seconds; a second lets some of them end.
        raise UpstreamError(
            503, {"error": {"message": why, "code": 503}}, headers={"Retry-After": "1"}
        )
    runs: list[ClientRun] = []
    try:
        for sub in subs:
            runs.append(ClientRun(state, sub.input_ids, dict(sub.sampling), dict(sub.extra)))
    except Exception:
        for run in runs:
            state.live.pop(run.rid, None)
            state.run_in_background(run.run.close())
        raise
    return runs


async def abandon(state: RouterState, events) -> None:
    """The client left: close the request's generator (its clean-up aborts it everywhere) in a
    task of its own, which a repeated cancellation of the handler cannot interrupt."""

    async def close() -> None:
        await events.aclose()

    await asyncio.shield(state.run_in_background(close()))


async def send_stream(state: RouterState, resp: web.StreamResponse, events, send):
    """Stream a request's ``events`` into the prepared ``resp`` with ``send(events)``: a client
    that leaves abandons the request everywhere (``abandon``); an upstream error ends the
    stream with SGLang's error chunk (``end_with_error``). Returns ``resp``."""
    try:
        await send(events)
    except DISCONNECTED:
        await abandon(state, events)
        raise
    except UpstreamError as exc:
        await end_with_error(resp, exc)
    return resp


async def end_with_error(resp: web.StreamResponse, exc: UpstreamError) -> None:
    """The status line is gone: like SGLang, the error travels as the stream's last chunk."""
    await sse(resp, exc.body if "error" in exc.body else {"error": exc.body})
    await sse(resp, "[DONE]")


async def chain(first, rest):
    yield first
    async for item in rest:
        yield item
