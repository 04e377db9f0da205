"""``RelayGate``: an HTTP proxy to Relay-Decode that holds a stream after a chosen token count.

The router reads Relay-Decode's tokens through the gate. Armed with a limit, the gate forwards
the next ``/generate`` stream until it has carried that many output ids, then forwards nothing
more of it until the test raises the limit or releases it: the router sees exactly the ids the
test chose and cannot see RLD finish, however fast RLD decodes. Every other call (loads, abort,
server info) passes straight through, so an abort reaches RLD even while its stream is held.
"""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
from aiohttp import web

from sglang_pdd.testbed.ports import free_port

_HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive", "host"}


class RelayGate:
    """Run in a background thread of the test process; ``url`` is what the router dials."""

    def __init__(self, target_url: str, incremental: bool = False) -> None:
        """``incremental``: RLD streams only new ids per chunk (--incremental-streaming-output),
        so the gate adds them up; else each chunk carries every id so far."""
        self.target = target_url.rstrip("/")
        self.incremental = incremental
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._limit: int | None = None  # armed: the next stream holds at this many ids
        self._armed_for_next = False
        self._on_hold = None  # arm's callback, run once when the armed stream first holds
        self._open = asyncio.Event()  # set: a held stream may go on (checked on each chunk)
        self._open.set()
        self._every: int | None = None  # hold_every's limit, for every stream
        self._every_open = asyncio.Event()
        self.holding = threading.Event()  # a stream is held at the limit
        self.held_ids = 0  # ids the held stream had carried when it stopped
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-gate", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the relay gate did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- control, from the test thread ----------------------------------------------------------
    def arm(self, limit: int, on_hold=None) -> None:
        """The next ``/generate`` stream holds once it has carried ``limit`` output ids.

        ``on_hold``: called (in the gate's thread) the moment the stream first holds, before
        the gate reads anything more of it: e.g. ``relay.pause`` freezes RLD there, so that a
        test can kill it mid-answer however fast it decodes and however slowly the test looks.
        """
        self._call(self._arm, limit, on_hold)

    def advance(self, limit: int) -> None:
        """Let the held stream go on until it has carried ``limit`` ids, then hold again."""
        self._call(self._advance, limit)

    def hold_every(self, limit: int) -> None:
        """Every ``/generate`` stream from now on holds once it has carried ``limit`` ids,
        until ``release``: a request through the gate can then end only by a handoff."""
        self._call(self._hold_every, limit)

    def release(self) -> None:
        """Disarm and let every held stream run to its end."""
        self._call(self._release)

    def _call(self, fn, *args) -> None:
        asyncio.run_coroutine_threadsafe(fn(*args), self._loop).result(30)

    async def _arm(self, limit: int, on_hold) -> None:
        self._limit, self._armed_for_next, self._on_hold = limit, True, on_hold

    async def _advance(self, limit: int) -> None:
        self._limit = limit
        self.holding.clear()
        self._open.set()

    async def _hold_every(self, limit: int) -> None:
        self._every, self._every_open = limit, asyncio.Event()

    async def _release(self) -> None:
        self._limit, self._armed_for_next, self._every = None, False, None
        self._on_hold = None
        self.holding.clear()
        self._open.set()
        self._every_open.set()

    # -- the proxy ------------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self._ready.set()
        await asyncio.Event().wait()  # serve until the process ends (daemon thread)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        every, every_open = self._every, self._every_open
        gated = request.path == "/generate" and self._armed_for_next
        if gated:
            self._armed_for_next = False
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        async with self._session.request(
            request.method, self.target + request.path_qs, data=body, headers=headers
        ) as upstream:
            out_headers = {
                k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS
            }
            if request.path != "/generate":
                return web.Response(
                    status=upstream.status, body=await upstream.read(), headers=out_headers
                )
            # Every /generate streams through as it comes; only the armed one (or, after
            # hold_every, each one) may be held.
            resp = web.StreamResponse(status=upstream.status, headers=out_headers)
            await resp.prepare(request)
            ids = 0
            try:
                async for line in upstream.content:
                    await resp.write(line)
                    ids = ids + _ids_in(line) if self.incremental else max(ids, _ids_in(line))
                    while gated and self._limit is not None and ids >= self._limit:
                        self.held_ids = ids
                        self._open.clear()
                        on_hold, self._on_hold = self._on_hold, None
                        if on_hold is not None:
                            on_hold()
                        self.holding.set()
                        await self._open.wait()
                    if request.path == "/generate" and every is not None and ids >= every:
                        await every_open.wait()
            except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
                # RLD died mid-stream: the router's connection breaks too, as it would without
                # the gate (a clean end here would read as RLD's answer ending).
                if request.transport is not None:
                    request.transport.abort()
            except (ConnectionResetError, aiohttp.ClientError):
                pass  # the router closed its side (it handed off and aborted RLD)
            return resp


def _ids_in(line: bytes) -> int:
    """Output ids one SSE line of SGLang's stream carries (so far, or new ones)."""
    line = line.strip()
    if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
        return 0
    try:
        chunk = json.loads(line[5:])
    except ValueError:
        return 0
    return len(chunk.get("output_ids") or ()) if isinstance(chunk, dict) else 0
