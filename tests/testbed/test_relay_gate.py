"""``RelayGate`` against a small SSE server standing in for Relay-Decode (real sockets)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
import requests
from aiohttp import web

from sglang_pdd.testbed.ports import free_port
from sglang_pdd.testbed.relay_gate import RelayGate


class _Upstream:
    """Streams ``total`` SGLang-style cumulative chunks; ``die`` breaks the stream after the
    chunk carrying ``die_after`` ids, as a killed server would."""

    def __init__(self, total: int, die_after: int | None = None) -> None:
        self.total, self.die_after = total, die_after
        self.sent = 0
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self.die = threading.Event()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        assert ready.wait(30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, ready: threading.Event) -> None:
        async def serve():
            app = web.Application()
            app.router.add_post("/generate", self._generate)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            ready.set()
            await asyncio.Event().wait()

        self._loop.run_until_complete(serve())

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for n in range(1, self.total + 1):
            chunk = {"output_ids": list(range(n)), "meta_info": {"finish_reason": None}}
            # Counted before the write: a write may yield, and the gate may see this chunk
            # (and run on_hold) before the count would move after it.
            self.sent = n
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if self.die_after is not None and n >= self.die_after:
                while not self.die.is_set():
                    await asyncio.sleep(0.01)
                request.transport.abort()  # killed: no end of stream, no [DONE]
                return resp
            await asyncio.sleep(0)
        await resp.write(b"data: [DONE]\n\n")
        return resp


def _ids_seen(resp) -> int:
    seen = 0
    for line in resp.iter_lines():
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            seen = len(json.loads(line[5:])["output_ids"])
    return seen


def test_on_hold_runs_once_when_the_armed_stream_first_holds():
    upstream = _Upstream(total=40)
    gate = RelayGate(upstream.url)
    calls = []
    gate.arm(10, on_hold=lambda: calls.append(upstream.sent))
    result = {}

    def client():
        with requests.post(f"{gate.url}/generate", json={}, stream=True, timeout=30) as resp:
            result["ids"] = _ids_seen(resp)

    thread = threading.Thread(target=client)
    thread.start()
    assert gate.holding.wait(30)
    assert len(calls) == 1 and calls[0] >= 10 and gate.held_ids == 10
    gate.release()
    thread.join(30)
    assert result["ids"] == 40 and len(calls) == 1


def test_an_upstream_that_dies_mid_stream_breaks_the_clients_connection():
    """A killed RLD behind the gate must look killed to the router, not like an answer that
    ended: the gate aborts its side of the connection instead of ending the stream."""
    upstream = _Upstream(total=100, die_after=12)
    gate = RelayGate(upstream.url)
    gate.arm(10, on_hold=upstream.die.set)
    # Released once it holds, from a thread of its own: a client that checked between lines
    # could read the last line before the hold and then wait for one that never comes.
    release = threading.Thread(target=lambda: gate.holding.wait(30) and gate.release())
    release.start()
    with requests.post(f"{gate.url}/generate", json={}, stream=True, timeout=30) as resp:
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            for _ in resp.iter_lines():
                pass
    release.join(30)
