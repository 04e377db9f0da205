"""``pump`` and ``InlineStream``: an upstream stream as a queue of chunks, with an idle limit."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from sglang_pdd.router.upstream.calls import UpstreamError
from sglang_pdd.router.upstream.chunk_queue import END, InlineStream, PumpedStream, pump


async def _silent():
    await asyncio.Event().wait()  # never yields
    yield {}


async def _chunks(n):
    for i in range(n):
        yield {"i": i}


def test_chunks_then_the_end_mark():
    async def run():
        queue = asyncio.Queue()
        await pump(_chunks(3), queue, "http://x", lambda: None, poll_s=0.01)
        return [queue.get_nowait() for _ in range(4)]

    assert asyncio.run(run()) == [{"i": 0}, {"i": 1}, {"i": 2}, END]


def test_a_limit_set_late_counts_silence_from_when_it_applies():
    # Silent well past the limit before it applies (a parked MD before the handoff): the 504
    # must still wait the whole limit from the last check without one, not fire at the first
    # check with it. Measured against the checks themselves, not the test's own clock.
    async def run():
        limit = [None]
        polls = []  # (monotonic time, limit returned) of each check

        def idle_limit():
            polls.append((time.monotonic(), limit[0]))
            return limit[0]

        queue = asyncio.Queue()
        task = asyncio.create_task(pump(_silent(), queue, "http://md", idle_limit, poll_s=0.01))
        while len(polls) < 30:  # silent for 30 checks with no limit
            await asyncio.sleep(0.01)
        limit[0] = 0.2
        error = await queue.get()
        fired = time.monotonic()
        await task
        last_unlimited = max(t for t, lim in polls if lim is None)
        return error, fired - last_unlimited, queue.get_nowait()

    error, waited, end = asyncio.run(run())
    assert isinstance(error, UpstreamError) and error.status == 504
    assert "--upstream-idle-timeout-s" in str(error.body)
    assert waited >= 0.2 and end is END


def test_a_pump_cancelled_by_its_owner_stays_cancelled():
    """Cancelling the pump (the request ended) is not a silent instance: nothing is queued."""

    async def run():
        queue = asyncio.Queue()
        task = asyncio.create_task(pump(_silent(), queue, "http://x", lambda: 5.0, poll_s=0.01))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return queue.empty(), task.cancelled()
        return None

    assert asyncio.run(run()) == (True, True)


def test_a_failing_stream_is_queued_as_its_error_then_the_end():
    async def broken():
        yield {"i": 0}
        raise ConnectionResetError("peer gone")

    async def run():
        queue = PumpedStream()
        await pump(broken(), queue, "http://x", lambda: None, poll_s=0.01)
        return [queue.get_nowait() for _ in range(3)], queue

    (first, error, end), queue = asyncio.run(run())
    assert first == {"i": 0} and end is END
    # Kept for whoever acts on the failure once nobody reads the queue (relayed.py).
    assert isinstance(error, ConnectionResetError) and queue.error is error


# -- InlineStream: the same answers, read by the consumer's own task ---------------------------


def _drain(stream, n):
    async def run():
        return [await stream.get() for _ in range(n)]

    return run()


def test_inline_chunks_then_the_end_mark_for_good():
    async def run():
        stream = InlineStream(_chunks(2), "http://x", idle_limit_s=None)
        return await _drain(stream, 4)

    assert asyncio.run(run()) == [{"i": 0}, {"i": 1}, END, END]


def test_inline_a_failing_stream_answers_its_error_then_the_end():
    async def broken():
        yield {"i": 0}
        raise ConnectionResetError("peer gone")

    async def run():
        stream = InlineStream(broken(), "http://x", idle_limit_s=None)
        return await _drain(stream, 3), stream

    (first, error, end), stream = asyncio.run(run())
    assert first == {"i": 0} and end is END
    assert isinstance(error, ConnectionResetError)


def test_inline_an_unreachable_instance_is_a_502_naming_it():
    async def refused():
        raise aiohttp.ClientConnectionError("connection refused")
        yield {}

    async def run():
        return await InlineStream(refused(), "http://md:1", idle_limit_s=None).get()

    error = asyncio.run(run())
    assert isinstance(error, UpstreamError) and error.status == 502
    assert error.instance == "http://md:1" and "connection refused" in str(error.body)


def test_inline_fail_interrupts_a_waiting_get_and_closes_the_stream():
    closed = asyncio.Event()

    async def silent_then_note_close():
        try:
            await asyncio.Event().wait()
            yield {}
        finally:
            closed.set()

    async def run():
        stream = InlineStream(silent_then_note_close(), "http://md", idle_limit_s=None)
        waiting = asyncio.create_task(stream.get())
        while stream._reader is None:  # the get() is waiting on the instance
            await asyncio.sleep(0)
        error = UpstreamError(503, {"error": {"message": "draining"}}, "http://md")
        stream.fail(error)
        stream.fail(UpstreamError(500, {}))  # a second failure changes nothing
        got = await waiting
        return got is error, waiting.cancelled(), closed.is_set(), await stream.get()

    assert asyncio.run(run()) == (True, False, True, END)


def test_inline_fail_between_gets_is_answered_by_the_next():
    async def run():
        stream = InlineStream(_chunks(5), "http://x", idle_limit_s=None)
        first = await stream.get()
        error = UpstreamError(503, {})
        stream.fail(error)
        return first, await stream.get() is error, await stream.get()

    assert asyncio.run(run()) == ({"i": 0}, True, END)


def test_inline_a_consumer_cancelled_by_its_owner_stays_cancelled_even_when_failed_too():
    async def run():
        stream = InlineStream(_silent(), "http://x", idle_limit_s=None)
        waiting = asyncio.create_task(stream.get())
        while stream._reader is None:
            await asyncio.sleep(0)
        waiting.cancel()  # the client left
        stream.fail(UpstreamError(503, {}))  # and a drain came in the same turn
        try:
            await waiting
        except asyncio.CancelledError:
            return waiting.cancelled()
        return None

    assert asyncio.run(run()) is True


def test_inline_silence_past_the_limit_while_waiting_is_a_504():
    async def run():
        stream = InlineStream(_silent(), "http://md", idle_limit_s=0.05)
        started = time.monotonic()
        error = await stream.get()
        return error, time.monotonic() - started, await stream.get()

    error, waited, end = asyncio.run(run())
    assert isinstance(error, UpstreamError) and error.status == 504
    assert error.instance == "http://md" and "--upstream-idle-timeout-s" in str(error.body)
    assert waited >= 0.05 and end is END


def test_inline_the_consumers_own_time_is_not_the_instances_silence():
    # A consumer slower than the limit between reads (a slow client) of a stream that answers
    # at once: no 504. Paced by the stream's timer itself, not a fixed sleep: the consumer
    # waits until the timer has fired at least twice while it was away.
    async def run():
        stream = InlineStream(_chunks(3), "http://x", idle_limit_s=0.01)
        got = []
        while (chunk := await stream.get()) is not END:
            got.append(chunk)
            fired = 0
            while fired < 2:
                timer = stream._timer
                while stream._timer is timer:
                    await asyncio.sleep(0.005)
                fired += 1
        return got

    assert asyncio.run(run()) == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_inline_a_stream_that_breaks_while_closing_after_a_failure_still_answers_the_error():
    async def breaks_on_close():
        try:
            yield {"i": 0}
            yield {"i": 1}
        finally:
            raise aiohttp.ClientPayloadError("connection lost while releasing")

    async def run():
        stream = InlineStream(breaks_on_close(), "http://md", idle_limit_s=None)
        first = await stream.get()
        error = UpstreamError(503, {})
        stream.fail(error)
        return first, await stream.get() is error, await stream.get()

    assert asyncio.run(run()) == ({"i": 0}, True, END)
