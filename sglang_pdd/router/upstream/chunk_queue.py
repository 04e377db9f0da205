"""An upstream SSE stream as a queue of chunks (each chunk, then its error if it failed, then
``END``), with an idle limit, two ways:

* ``pump``: copied into an ``asyncio.Queue`` by a task of its own, for streams a request waits
  on together with others (a relayed request's RLD and MD streams); its idle limit can start
  late (a parked Main-Decode stream is silent by design until the handoff).
* ``InlineStream``: read by the task that consumes it, for a stream one task reads from start
  to end (P-MD's, P-RLD's): no task, queue or wake-up per chunk (this runs for every streamed
  chunk; under load each hop also waits a turn of the event loop)."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from sglang_pdd.router.upstream.calls import UpstreamError

logger = logging.getLogger("sglang_pdd.router")

END = object()  # queued after the stream's last chunk (or its error)


class PumpedStream(asyncio.Queue):
    """The queue ``pump`` fills, with an ``InlineStream``'s ``fail`` and ``aclose`` (so that
    whoever ends a request's streams treats both kinds alike). ``task``: the pumping task;
    ``error``: what the upstream stream failed with, once it has (read after ``task`` ended,
    by whoever must act on an instance's failure when nobody consumes the queue any more)."""

    task: asyncio.Task | None = None
    error: Exception | None = None

    def fail(self, error: Exception) -> None:
        """End the stream with ``error``: its consumer gets it next (a drain evicting it)."""
        self.put_nowait(error)

    async def aclose(self) -> None:
        """Nothing to close here: the pumping task ends with the request's tasks."""


async def pump(stream, queue: PumpedStream, url: str, idle_limit, poll_s: float = 1.0) -> None:
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
        queue.error = _as_upstream_error(exc, url)
        queue.put_nowait(queue.error)
    finally:
        guard.cancel()
    queue.put_nowait(END)


class InlineStream:
    """``get()`` answers as a ``pump``ed queue's ``get()`` would: each chunk of ``chunks`` (an
    async iterator of an upstream SSE stream), then its error (an ``UpstreamError`` naming
    ``url`` for a broken or silent instance) if it failed, then ``END`` for good.

    ``fail(error)`` ends the stream with ``error`` (a drain evicting the request): a ``get()``
    waiting is interrupted, else the next one answers it. A ``get()`` that waits more than
    ``idle_limit_s`` (None: no limit) answers a 504; one timer per stream checks it, re-armed
    when it fires (not a timer per chunk). The time the consumer spends between ``get()``s
    does not count as the instance's silence."""

    def __init__(self, chunks, url: str, idle_limit_s: float | None) -> None:
        self._chunks = chunks
        self._url = url
        self._limit = idle_limit_s
        self._reader: asyncio.Task | None = None  # the task waiting in get(), if any
        self._waiting_since = 0.0
        self._interrupt: Exception | None = None  # fail()'s error, for the waiting reader
        self._failed: Exception | None = None  # fail()'s error, for the next get()
        self._over = False
        self._timer: asyncio.TimerHandle | None = None

    async def get(self):
        if self._over:
            return END
        if self._failed is not None:
            error = self._end(self._failed)
            try:
                await self._chunks.aclose()
            except Exception as exc:  # noqa: BLE001 - the stream ends with ``error`` anyway
                logger.debug("sglang-pdd router: closing %s after a failure: %r", self._url, exc)
            return error
        task = self._reader = asyncio.current_task()
        self._waiting_since = time.monotonic()
        if self._timer is None and self._limit is not None:
            self._arm(self._limit)
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            return self._end(None)
        except asyncio.CancelledError:
            # Interrupted by fail(): the consumer gets the error, unless its owner cancelled
            # it too (then the cancellation goes on).
            if self._interrupt is None or task.uncancel() > 0:
                raise
            return self._end(self._interrupt)
        except Exception as exc:  # noqa: BLE001 - answered to the consumer, which raises it
            return self._end(_as_upstream_error(exc, self._url))
        finally:
            self._reader = None

    def fail(self, error: Exception) -> None:
        """End the stream with ``error`` (see the class)."""
        if self._over or self._interrupt is not None or self._failed is not None:
            return
        if self._reader is not None:
            self._interrupt = error
            self._reader.cancel()
        else:
            self._failed = error

    async def aclose(self) -> None:
        """Close the upstream stream (the request is over). Not while a ``get()`` waits."""
        self._cancel_timer()
        self._over = True
        if self._reader is None:
            await self._chunks.aclose()

    def _end(self, error: Exception | None):
        self._cancel_timer()
        self._over = True
        return END if error is None else error

    def _arm(self, delay: float) -> None:
        self._timer = asyncio.get_running_loop().call_later(delay, self._check)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._over:
            return
        silent = time.monotonic() - self._waiting_since if self._reader is not None else 0.0
        if silent >= self._limit:
            self.fail(_silent_error(self._url, self._limit))
        else:
            self._arm(self._limit - silent)


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
