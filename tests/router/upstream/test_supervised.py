"""``supervise``: a background loop that fails is logged and run again; cancelling ends it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sglang_pdd.router.upstream.supervised import supervise


def test_a_failing_loop_is_logged_and_run_again(caplog):
    runs: list[int] = []
    failures: list[BaseException] = []
    restarted = asyncio.Event()

    async def loop():
        runs.append(len(runs))
        if len(runs) <= 2:
            raise RuntimeError(f"boom {len(runs)}")
        restarted.set()
        await asyncio.Event().wait()  # a healthy loop runs until cancelled

    async def main():
        task = asyncio.create_task(
            supervise("test loop", loop, first_backoff_s=0.001, on_failure=failures.append)
        )
        await asyncio.wait_for(restarted.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.ERROR, logger="sglang_pdd.router"):
        asyncio.run(main())
    assert len(runs) == 3
    assert [str(e) for e in failures] == ["boom 1", "boom 2"]
    failed = [r for r in caplog.records if "test loop failed" in r.getMessage()]
    assert len(failed) == 2 and all(r.exc_info for r in failed)


def test_cancelling_ends_the_loop_without_a_restart():
    runs = []

    async def loop():
        runs.append(1)
        await asyncio.Event().wait()

    async def main():
        task = asyncio.create_task(supervise("idle loop", loop))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert runs == [1]


def test_the_routers_metrics_count_each_failure_of_a_named_task():
    from sglang_pdd.router.metrics import RouterMetrics

    metrics = RouterMetrics({})
    runs: list[int] = []
    restarted = asyncio.Event()

    async def loop():
        runs.append(len(runs))
        if len(runs) <= 2:
            raise RuntimeError("boom")
        restarted.set()
        await asyncio.Event().wait()

    async def main():
        on_failure = metrics.counting_failures_of("KV events of tcp://md:1")
        task = asyncio.create_task(
            supervise("KV events", loop, first_backoff_s=0.001, on_failure=on_failure)
        )
        await asyncio.wait_for(restarted.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    text = metrics.render().decode()
    line = 'sglang_pdd:background_task_failures_total{task="KV events of tcp://md:1"} 2.0'
    assert line in text, text
