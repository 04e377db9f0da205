"""Instances out of rotation after a failure, and back once /health answers (real HTTP)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from sglang_pdd.router.instances.breaker import BreakerConfig
from sglang_pdd.router.instances.health import InstanceHealth, cannot_serve
from tests.router.test_route import RLD, P, state  # noqa: F401 - the fixture


def test_planning_leaves_out_instances_out_of_rotation_unless_nothing_is_left(state):  # noqa: F811
    ids = list(range(3000))
    state.health.mark_down("http://m0:1")
    state.health.mark_down(RLD[0])
    for _ in range(4):
        r = state.route(ids, 64)
        assert (r.relay, r.main.url, r.decision.pipeline) == (RLD[1], "http://m1:1", "P-RLD-MD")
    # Every prefill out of rotation: they are tried all the same (better than no answer).
    for url in P:
        state.health.mark_down(url)
    assert state.route(ids, 64).prefill in P


def test_the_probe_puts_an_instance_back_once_its_health_answers():
    async def run():
        answers = {"status": 503}
        app = web.Application()
        app.router.add_get("/health", lambda _r: web.Response(status=answers["status"]))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        health = InstanceHealth(BreakerConfig(open_s=0.01))
        health.mark_down(url)
        health.mark_down("http://127.0.0.1:1")  # nothing listens there: stays out
        import aiohttp

        async with aiohttp.ClientSession() as session:
            probe = asyncio.create_task(health.probe(session, interval_s=0.01))
            for _ in range(5):  # several rounds of 503: still out
                await asyncio.sleep(0.02)
            still_out = url in health.out_of_rotation()
            answers["status"] = 200
            while url in health.out_of_rotation():
                await asyncio.sleep(0.01)
            probe.cancel()
        await runner.cleanup()
        return still_out, health.out_of_rotation(), health.breaker_state(url)

    still_out, left, breaker = asyncio.run(run())
    assert still_out and left == {"http://127.0.0.1:1"}
    assert breaker == "half_open"  # back, on trial until it serves requests


def test_an_instance_whose_ready_answers_503_is_drained_until_it_answers_200():
    """SGLang answers /ready with 503 from SIGTERM on (its graceful shutdown): the watch drains
    the instance once and puts it back when /ready answers 200 (restarted)."""

    async def run():
        answers = {"status": 200}
        app = web.Application()
        app.router.add_get("/ready", lambda _r: web.Response(status=answers["status"]))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        health, drained = InstanceHealth(), asyncio.Queue()
        import aiohttp

        async with aiohttp.ClientSession() as session:
            watch = asyncio.create_task(
                health.watch_ready(session, [url, "http://127.0.0.1:1"], 0.01, drained.put_nowait)
            )
            answers["status"] = 503  # SIGTERM
            first = await asyncio.wait_for(drained.get(), 60)
            out = (
                url in health.out_of_rotation(),
                health.is_draining(url),
                health.drain_cause(url),
            )
            answers["status"] = 200  # restarted
            while url in health.out_of_rotation():
                await asyncio.sleep(0.01)
            watch.cancel()
        await runner.cleanup()
        return first, out, drained.qsize(), health.out_of_rotation()

    first, out, again, left = asyncio.run(run())
    assert first.startswith("http://127.0.0.1:") and again == 0  # drained once, not per look
    assert out == (True, True, "stopping: /ready answers 503")
    assert left == frozenset()  # an unreachable instance is the failure probe's business


@pytest.mark.parametrize(
    "healthy, relay_on, serves",
    [
        ({"p", "r", "m"}, True, True),
        ({"p", "m"}, True, True),  # RLD down: P-MD is left
        ({"p", "r"}, True, True),  # MD down: P-RLD is left
        ({"p", "r"}, False, False),  # ... unless relaying is off
        ({"r", "m"}, True, False),  # no prefill server
        ({"p"}, True, False),  # nothing decodes
    ],
)
def test_the_router_serves_while_one_pipeline_is_left(healthy, relay_on, serves):
    why = cannot_serve(["p"], ["r"], ["m"], relay_on, healthy)
    assert (why is None) == serves, why
    if not serves:
        assert "answers /health" in why
