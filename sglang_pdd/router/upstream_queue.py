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
    ``poll_s`` by one watchdog per stream (not a task and a timer per chunk: this runs for
    every streamed chunk), so that a limit set later (at the handoff) applies to a wait already
    running, counted from when it first applied."""
    reader = asyncio.current_task()
    silent_since = time.monotonic()
    fired: list[float] = []  # the limit the watchdog ended the stream at

    async def watchdog() -> None:
        nonlocal silent_since
        while True:
            await asyncio.sleep(poll_s)
            limit = idle_limit()
            if limit is None:  # the clock starts when a limit first applies
                silent_since = time.monotonic()
            elif time.monotonic() - silent_since > limit:
                fired.append(limit)
                reader.cancel()
                return

    guard = asyncio.get_running_loop().create_task(watchdog())
    try:
        async for chunk in stream:
            silent_since = time.monotonic()
            queue.put_nowait(chunk)
    except asyncio.CancelledError:
        if not fired:
            raise  # cancelled by its owner, not by the watchdog
        reader.uncancel()
        queue.error = _silent_error(url, fired[0])
        queue.put_nowait(queue.error)
    except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
        queue.error = _as_upstream_error(exc, url)  # for whoever looks after the stream ended
        queue.put_nowait(queue.error)
    finally:
        guard.cancel()
    queue.put_nowait(END)


def _silent_error(url: str, limit: float) -> UpstreamError:
    message = f"{url} sent nothing for {limit:g} s (--upstream-idle-timeout-s)"
    return UpstreamError(504, {"error": {"message": message, "code": 504}}, url)


def _as_upstream_error(exc: Exception, url: str) -> Exception:
    """An instance that cannot be reached or that broke its stream: a 502 naming it."""
    if isinstance(exc, aiohttp.ClientError | TimeoutError):
        return UpstreamError(
            502, {"error": {"message": f"{url}: {type(exc).__name__}: {exc}", "code": 502}}, url
        )
    return exc
