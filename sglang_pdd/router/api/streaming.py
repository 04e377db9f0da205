"""What the router's streaming endpoints (SGLang's /generate and OpenAI's) share: SSE writing,
and a client that leaves or an instance that fails while the answer streams."""

from __future__ import annotations

import asyncio
import contextlib

import orjson
from aiohttp import web

from sglang_pdd.router.state import RouterState
from sglang_pdd.router.upstream.calls import UpstreamError

# What a handler sees when its client has gone.
DISCONNECTED = (ConnectionResetError, ConnectionError, asyncio.CancelledError)


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


async def abandon(state: RouterState, events) -> None:
    """The client left: close the request's generator (its clean-up aborts it everywhere) in a
    task of its own, which a repeated cancellation of the handler cannot interrupt."""

    async def close() -> None:
        await events.aclose()

    await asyncio.shield(state.run_in_background(close()))


@contextlib.asynccontextmanager
async def client_stream(state: RouterState, events, resp: web.StreamResponse | None = None):
    """Around the reading of a request's ``events`` (``async with``): a client that leaves
    abandons the request everywhere (``abandon``); with ``resp``, a stream already begun, an
    upstream error ends it with SGLang's error chunk (``end_with_error``), else it goes on
    up (to the ``upstream_errors`` middleware)."""
    try:
        yield
    except DISCONNECTED:
        await abandon(state, events)
        raise
    except UpstreamError as exc:
        if resp is None:
            raise
        await end_with_error(resp, exc)


async def send_stream(state: RouterState, resp: web.StreamResponse, events, send):
    """Stream a request's ``events`` into the prepared ``resp`` with ``send(events)``, inside
    ``client_stream``. Returns ``resp``."""
    async with client_stream(state, events, resp):
        await send(events)
    return resp


async def end_with_error(resp: web.StreamResponse, exc: UpstreamError) -> None:
    """The status line is gone: like SGLang, the error travels as the stream's last chunk."""
    await sse(resp, exc.body if "error" in exc.body else {"error": exc.body})
    await sse(resp, "[DONE]")
