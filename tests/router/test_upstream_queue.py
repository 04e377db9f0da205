"""``pump``: an upstream stream into a queue, with an idle limit that may start late."""

from __future__ import annotations

import asyncio
import time

from sglang_pdd.router.upstream import UpstreamError
from sglang_pdd.router.upstream_queue import END, pump


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
        queue = asyncio.Queue()
        await pump(broken(), queue, "http://x", lambda: None, poll_s=0.01)
        return [queue.get_nowait() for _ in range(3)], queue

    (first, error, end), queue = asyncio.run(run())
    assert first == {"i": 0} and end is END
    assert isinstance(error, ConnectionResetError) and queue.error is error
