"""Relays in front of a Main-Decode that do less than the router, each in a process of its own
(``router_overhead.py --bare-relay``, ``--parsing-relay``, ``--tcp-relay``): what they cost per
streamed token on the same host and load bounds the router's CPU per token from below."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import orjson


def relay(port: int, upstream: str, parse: bool = False, incremental: bool = True) -> None:
    """The bare relay: one upstream stream per client stream, each read written on, nothing
    else. ``GET /generate`` passes the query on, ``POST /generate`` the body.

    ``parse``: the least a router that hands requests off must do with each read instead
    (``--parsing-relay``): take the server-sent events out of it (a read may end inside one),
    decode each chunk's JSON for its ids, and write one chunk of its own per read (the read's
    ids, the server's text, a ``meta_info`` naming the client's request), as the router does;
    no detokenizing, record or metrics. ``incremental``: the server's chunks carry only their
    new ids (``--incremental-streaming-output``), and so do these."""
    import uvloop
    from aiohttp import web

    async def generate(request: web.Request) -> web.StreamResponse:
        session = request.app["session"]
        if request.method == "POST":
            headers = {"Content-Type": "application/json"}
            upstream_call = session.post(upstream, data=await request.read(), headers=headers)
        else:
            upstream_call = session.get(upstream, params=request.query)
        async with upstream_call as up:
            resp = web.StreamResponse(
                status=up.status, headers={"Content-Type": "text/event-stream"}
            )
            await resp.prepare(request)
            if not parse:
                async for data in up.content.iter_any():
                    await resp.write(data)
            else:
                chunks = ParsedChunks(incremental)
                async for data in up.content.iter_any():
                    if out := chunks.forward(data):
                        await resp.write(out)
        return resp

    async def open_session(app):
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await app["session"].close()

    app = web.Application(client_max_size=1 << 26)
    app.cleanup_ctx.append(open_session)
    app.router.add_get("/generate", generate)
    app.router.add_post("/generate", generate)
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    web.run_app(app, host="127.0.0.1", port=port, print=None, loop=loop)


class _Pipe(asyncio.Protocol):
    """One side of a relayed TCP connection; what it reads is written to its peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.early: list[bytes] = []  # read before the peer was connected

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.early.append(data)
        else:
            self.peer.transport.write(data)

    def connection_lost(self, exc) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    # Flow control: a peer that cannot keep up stops this side reading.
    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.transport.resume_reading()


class _ClientPipe(_Pipe):
    """A client's side: on connecting, it opens its own connection to the upstream."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        super().__init__()
        self.upstream = (upstream_host, upstream_port)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(_Pipe, *self.upstream)
        except OSError:
            self.transport.close()
            return
        upstream.peer, self.peer = self, upstream
        for data in self.early:
            upstream.transport.write(data)
        self.early.clear()
        if self.transport.is_closing():
            upstream.transport.close()


def tcp_relay(port: int, upstream_host: str, upstream_port: int) -> None:
    """The floor under any relay process on this stack: bytes piped between each client's TCP
    connection and one of its own to ``upstream`` on uvloop's protocols, with no HTTP, no
    parsing and no copy (``--tcp-relay``). A router must do at least this, and more: what it
    costs per token bounds the router's CPU per token from below on the same host and load."""
    import uvloop

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(
            lambda: _ClientPipe(upstream_host, upstream_port), "127.0.0.1", port
        )
        async with server:
            await server.serve_forever()

    uvloop.run(serve())


class ParsedChunks:
    """One stream's server-sent events, parsed for their ids (``relay(parse=True)``)."""

    def __init__(self, incremental: bool) -> None:
        self.incremental = incremental
        self.pending = b""  # the start of an event the next read completes
        self.ids: list[int] = []
        self.rid = uuid.uuid4().hex  # the client's request, as the router names it

    def forward(self, data: bytes) -> bytes:
        """What to write for one read: a chunk with the read's ids, or ``[DONE]``."""
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        new: list[int] = []
        last = None
        done = False
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            last = orjson.loads(payload)
            if self.incremental:
                new += last["output_ids"]
        out = b"" if last is None else self._chunk(last, new)
        return out + b"data: [DONE]\n\n" if done else out

    def _chunk(self, last: dict, new: list[int]) -> bytes:
        """The relay's own chunk for one read whose last event was ``last``."""
        if not self.incremental:
            new = last["output_ids"][len(self.ids) :]
        self.ids += new
        meta = last["meta_info"]
        chunk = {
            "text": last["text"],
            "output_ids": new if self.incremental else self.ids,
            "meta_info": {
                "id": self.rid,
                "finish_reason": meta.get("finish_reason"),
                "prompt_tokens": meta.get("prompt_tokens"),
                "completion_tokens": len(self.ids),
            },
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
