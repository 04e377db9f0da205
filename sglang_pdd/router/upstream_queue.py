"""An upstream SSE stream copied into an ``asyncio.Queue``, with an idle limit that can start
late (a parked Main-Decode stream is silent by design until the handoff)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from sglang_pdd.router.upstream import UpstreamError

END = object()  # queued after the stream's last chunk (or its error)


async def pump(stream, queue: asyncio.Queue, url: str, idle_limit, poll_s: float = 1.0) -> None:
    """Copy an upstream SSE stream into ``queue``; an exception is queued (and kept as
    ``queue.error``), then the end mark.

    ``idle_limit()``: how long the stream may stay silent now (None: no limit); checked every
    ``poll_s``, so that a limit set later (at the handoff) applies to a wait already running,
    counted from when it first applied."""
    it = aiter(stream)
    try:
        while True:
            step = asyncio.ensure_future(anext(it))
            silent_since = time.monotonic()
            try:
                while not step.done():
                    await asyncio.wait({step}, timeout=poll_s)
                    limit = idle_limit()
                    if limit is None:  # the clock starts when a limit first applies
                        silent_since = time.monotonic()
                    elif not step.done() and time.monotonic() - silent_since > limit:
                        raise UpstreamError(
                            504,
                            {
                                "error": {
                                    "message": (
                                        f"{url} sent nothing for {limit:g} s "
                                        "(--upstream-idle-timeout-s)"
                                    ),
                                    "code": 504,
                                }
                            },
                            url,
                        )
            finally:
                if not step.done():
                    step.cancel()
                step.add_done_callback(_retrieve)  # an end nobody awaits is not an error
            try:
                queue.put_nowait(step.result())
            except StopAsyncIteration:
                break
    except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
        queue.error = _as_upstream_error(exc, url)  # for whoever looks after the stream ended
        queue.put_nowait(queue.error)
    queue.put_nowait(END)


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _as_upstream_error(exc: Exception, url: str) -> Exception:
    """An instance that cannot be reached or that broke its stream: a 502 naming it."""
    if isinstance(exc, aiohttp.ClientError | TimeoutError):
        return UpstreamError(
            502, {"error": {"message": f"{url}: {type(exc).__name__}: {exc}", "code": 502}}, url
        )
    return exc
