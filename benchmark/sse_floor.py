"""The floor under the router's CPU per streamed token: HTTP servers that do nothing else.

A bare aiohttp server on uvloop (the router's stack) streams SGLang-shaped ``/generate`` chunks
(cumulative ``output_ids``, a small ``meta_info``, orjson) to concurrent clients, one chunk per
token, paced like a decode step. In front of it, a bare proxy on the same stack reads each
chunk from it and writes it to its client, as the router does with MD's stream, and nothing
else. Their CPU per token (from /proc) is what writing (server) and relaying (proxy) one
server-sent event per token cost on this host before any routing, detokenizing or record
keeping; ``benchmark/router_overhead.py``'s router CPU per token is to be read against the
proxy's.

    bash scripts/with-env.sh python benchmark/sse_floor.py --streams 64 --tokens 256
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
import uuid
from pathlib import Path

import aiohttp
import orjson
from tqdm import tqdm

from sglang_pdd.testbed.ports import free_port


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def _serve(port: int, step_s: float) -> None:
    """The bare server: each stream sends ``tokens`` chunks, one per decode step."""
    import orjson
    import uvloop
    from aiohttp import web

    options = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY

    async def generate(request: web.Request) -> web.StreamResponse:
        tokens = int(request.query["tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        ids: list[int] = []
        for i in range(tokens):
            await asyncio.sleep(step_s)
            ids.append(1000 + i % 100)
            chunk = {
                "text": "x" * len(ids),
                "output_ids": list(ids),
                "meta_info": {"id": "r", "completion_tokens": len(ids), "finish_reason": None},
            }
            await resp.write(b"data: " + orjson.dumps(chunk, option=options) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/generate", generate)
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    web.run_app(app, host="127.0.0.1", port=port, print=None, loop=loop)


def relay(port: int, upstream: str, parse: bool = False, incremental: bool = True) -> None:
    """The bare relay: one upstream stream per client stream, each read written on, nothing
    else. ``GET /generate`` passes the query on (this script's server); ``POST /generate`` the
    body (``benchmark/router_overhead.py --bare-relay``, in front of a Main-Decode).

    ``parse``: the least a router that hands requests off must do with each read instead
    (``router_overhead.py --parsing-relay``): take the server-sent events out of it (a read
    may end inside one), decode each chunk's JSON for its ids, and write one chunk of its own
    per read (the read's ids, the server's text, a ``meta_info`` naming the client's request),
    as the router does; no detokenizing, record or metrics. ``incremental``: the server's
    chunks carry only their new ids (``--incremental-streaming-output``), and so do these."""
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
                chunks = _ParsedChunks(incremental)
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


def tcp_relay(port: int, upstream_host: str, upstream_port: int) -> None:
    """The floor under any relay process on this stack: bytes piped between each client's TCP
    connection and one of its own to ``upstream`` on uvloop's protocols, with no HTTP, no
    parsing and no copy (``benchmark/router_overhead.py --tcp-relay``). A router must do at
    least this, and more: what it costs per token bounds the router's CPU per token from
    below on the same host and load."""
    import uvloop

    class Pipe(asyncio.Protocol):
        """One side of a relayed connection; what it reads is written to its peer."""

        def __init__(self) -> None:
            self.transport: asyncio.Transport | None = None
            self.peer: Pipe | None = None
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

    class Client(Pipe):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            asyncio.get_running_loop().create_task(self._connect())

        async def _connect(self) -> None:
            loop = asyncio.get_running_loop()
            try:
                _, upstream = await loop.create_connection(Pipe, upstream_host, upstream_port)
            except OSError:
                self.transport.close()
                return
            upstream.peer, self.peer = self, upstream
            for data in self.early:
                upstream.transport.write(data)
            self.early.clear()
            if self.transport.is_closing():
                upstream.transport.close()

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Client, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    uvloop.run(serve())


class _ParsedChunks:
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
        out = b""
        if last is not None:
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
            out = b"data: " + orjson.dumps(chunk) + b"\n\n"
        return out + b"data: [DONE]\n\n" if done else out


async def _clients(url: str, streams: int, tokens: int) -> int:
    got = 0

    async def one() -> None:
        nonlocal got
        async with session.get(url, params={"tokens": str(tokens)}) as resp:
            async for raw in resp.content:
                if raw.startswith(b"data:") and b"[DONE]" not in raw:
                    got += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(one() for _ in range(streams)))
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--step-ms", type=float, default=7.0, help="seconds between a stream's chunks")
    args = ap.parse_args(argv)
    spawn = multiprocessing.get_context("spawn")
    port, proxy_port = free_port(), free_port()
    server = spawn.Process(target=_serve, args=(port, args.step_ms / 1000), daemon=True)
    url = f"http://127.0.0.1:{port}/generate"
    proxy = spawn.Process(target=relay, args=(proxy_port, url), daemon=True)
    server.start()
    proxy.start()
    proxy_url = f"http://127.0.0.1:{proxy_port}/generate"
    for _ in range(300):  # both are up once the proxy answers
        try:
            asyncio.run(_clients(proxy_url, 1, 1))
            break
        except aiohttp.ClientConnectionError:
            time.sleep(0.1)
    cpu = {"server": 0.0, "proxy": 0.0}
    chunks = 0
    for _ in tqdm(range(args.rounds), desc="rounds", unit="round"):
        before = {"server": _cpu_seconds(server.pid), "proxy": _cpu_seconds(proxy.pid)}
        chunks += asyncio.run(_clients(proxy_url, args.streams, args.tokens))
        cpu["server"] += _cpu_seconds(server.pid) - before["server"]
        cpu["proxy"] += _cpu_seconds(proxy.pid) - before["proxy"]
    proxy.terminate()
    server.terminate()
    print(
        f"{args.streams} streams x {args.tokens} tokens x {args.rounds} rounds, {chunks} chunks "
        "through a bare aiohttp+uvloop server and a bare proxy in front of it:"
    )
    for name, what in (("server", "writes each chunk"), ("proxy", "reads and writes each")):
        print(f"  {name:<6} ({what}): CPU per chunk {1e3 * cpu[name] / chunks:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
