"""A real ``WanProxy`` over loopback TCP, stalled, dropped and reset through its command API."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from sglang_pdd.transfer.link_faults import LinkFaults
from sglang_pdd.transfer.wan_link import WanLinkConfig
from sglang_pdd.transfer.wan_proxy import WanProxy


async def _echo(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


class _Link:
    """An echo server behind a proxy whose command API listens on a port of its own."""

    async def __aenter__(self):
        self.echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
        target = self.echo.sockets[0].getsockname()[1]
        config = WanLinkConfig(bandwidth_mbps=1000.0, one_way_delay_ms=1.0)
        self.proxy = WanProxy("127.0.0.1", 0, "127.0.0.1", target, config)
        self.listener = await asyncio.start_server(self.proxy._handle, "127.0.0.1", 0)
        self.port = self.listener.sockets[0].getsockname()[1]
        from aiohttp import web

        from sglang_pdd.transfer.link_faults import control_app

        self.runner = web.AppRunner(control_app(self.proxy.faults))
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.control = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self.http = aiohttp.ClientSession()
        return self

    async def command(self, op: str) -> dict:
        method = self.http.get if op == "state" else self.http.post
        async with method(f"{self.control}/{op}") as resp:
            assert resp.status == 200
            return await resp.json()

    async def connect(self):
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def __aexit__(self, *exc):
        await self.http.close()
        await self.runner.cleanup()
        self.listener.close()
        self.echo.close()


async def _round_trip(reader, writer, payload: bytes) -> bytes:
    writer.write(payload)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(payload)), 60)


def test_a_stalled_link_holds_the_bytes_and_delivers_them_in_order_once_restored():
    async def scenario():
        async with _Link() as link:
            reader, writer = await link.connect()
            assert await _round_trip(reader, writer, b"before") == b"before"
            assert (await link.command("stall"))["state"] == "stalled"
            writer.write(b"held-1 ")
            writer.write(b"held-2")
            await writer.drain()
            pending = asyncio.ensure_future(reader.readexactly(len(b"held-1 held-2")))
            done, _ = await asyncio.wait({pending}, timeout=0.3)
            assert not done  # nothing crosses a stalled link
            assert (await link.command("restore"))["state"] == "up"
            assert await asyncio.wait_for(pending, 60) == b"held-1 held-2"
            writer.close()

    asyncio.run(scenario())


def test_a_dropping_link_loses_bytes_and_new_connections_reach_nothing():
    async def scenario():
        async with _Link() as link:
            reader, writer = await link.connect()
            await link.command("drop")
            writer.write(b"lost")
            await writer.drain()
            lost = asyncio.ensure_future(reader.read(1))
            late_reader, late_writer = await link.connect()  # accepted, but reaches nothing
            late_writer.write(b"also lost")
            await late_writer.drain()
            late = asyncio.ensure_future(late_reader.read(1))
            done, _ = await asyncio.wait({lost, late}, timeout=0.3)
            assert not done
            await link.command("restore")
            fresh_reader, fresh_writer = await link.connect()
            assert await _round_trip(fresh_reader, fresh_writer, b"after") == b"after"
            assert not lost.done()  # the bytes sent into the partition never arrive
            for w in (writer, late_writer, fresh_writer):
                w.close()

    asyncio.run(scenario())


def test_a_reset_ends_every_open_connection_and_the_link_takes_new_ones():
    async def scenario():
        async with _Link() as link:
            connections = [await link.connect() for _ in range(2)]
            for reader, writer in connections:
                assert await _round_trip(reader, writer, b"hi") == b"hi"
            answer = await link.command("reset")
            assert answer["reset"] == 2 and answer["connections"] == 0
            for reader, _writer in connections:
                with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                    await asyncio.wait_for(reader.readexactly(1), 60)
            reader, writer = await link.connect()
            assert await _round_trip(reader, writer, b"again") == b"again"
            assert (await link.command("state"))["resets"] == 2
            writer.close()

    asyncio.run(scenario())


def test_an_unknown_state_is_refused_with_the_accepted_values():
    with pytest.raises(ValueError, match="accepted values are up, stalled, dropping"):
        LinkFaults().set_state("flapping")
