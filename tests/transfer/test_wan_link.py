"""``WanLink`` arithmetic and a real ``WanProxy`` carrying bytes over loopback TCP."""

from __future__ import annotations

import asyncio
import time

import pytest

from sglang_pdd.transfer.wan_link import WanLink, WanLinkConfig
from sglang_pdd.transfer.wan_proxy import WanProxy, _host_port


def test_transfers_queue_behind_each_other():
    link = WanLink(WanLinkConfig(bandwidth_mbps=8.0, one_way_delay_ms=50.0))  # 1 MB/s
    now = time.monotonic()
    first = link.reserve(100_000)  # 0.1 s on the wire, then 50 ms of flight
    second = link.reserve(100_000)  # starts when the first has left the sender
    assert first - now == pytest.approx(0.15, abs=0.02)
    assert second - first == pytest.approx(0.1, abs=0.01)
    assert link.bytes_sent == 200_000


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"bandwidth_mbps": 0}, "--pdd-wan-bandwidth-mbps"),
        ({"one_way_delay_ms": -1}, "--pdd-wan-delay-ms"),
        ({"one_way_delay_ms": 5, "jitter_ms": 6}, "--pdd-wan-jitter-ms"),
    ],
)
def test_bad_link_values_name_the_flag(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        WanLinkConfig(**kwargs)


def test_host_port_parsing():
    assert _host_port("127.0.0.2:8000", "--listen") == ("127.0.0.2", 8000)
    for bad in ("8000", "host:", "host:99999", ":80"):
        with pytest.raises(ValueError, match="--target must be HOST:PORT"):
            _host_port(bad, "--target")


def test_proxy_delays_each_direction_and_keeps_bytes_in_order():
    async def scenario() -> tuple[bytes, float]:
        async def echo(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        target_port = server.sockets[0].getsockname()[1]
        proxy = WanProxy(
            "127.0.0.1",
            0,
            "127.0.0.1",
            target_port,
            WanLinkConfig(bandwidth_mbps=100.0, one_way_delay_ms=100.0),
        )
        listener = await asyncio.start_server(proxy._handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        payload = bytes(range(256)) * 64
        start = time.monotonic()
        writer.write(payload)
        await writer.drain()
        received = await reader.readexactly(len(payload))
        elapsed = time.monotonic() - start
        writer.close()
        listener.close()
        server.close()
        return received, elapsed

    received, elapsed = asyncio.run(scenario())
    assert received == bytes(range(256)) * 64
    assert elapsed >= 0.2  # one-way delay there and back: the link really was in the path


def test_a_reset_by_the_target_ends_the_clients_connection():
    """A target killed with kill -9 resets its connections: the client behind the proxy must see
    its connection end (after the bytes already sent), not hang on a half-dead proxy."""
    import socket
    import struct

    async def scenario() -> tuple[bytes, bytes]:
        async def send_then_reset(reader, writer):
            writer.write(b"partial answer")
            await writer.drain()
            await reader.read(1)  # wait for the client's byte, then reset (RST, not FIN)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

        server = await asyncio.start_server(send_then_reset, "127.0.0.1", 0)
        target_port = server.sockets[0].getsockname()[1]
        proxy = WanProxy(
            "127.0.0.1",
            0,
            "127.0.0.1",
            target_port,
            WanLinkConfig(bandwidth_mbps=100.0, one_way_delay_ms=5.0),
        )
        listener = await asyncio.start_server(proxy._handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        first = await reader.readexactly(len(b"partial answer"))
        writer.write(b"x")
        await writer.drain()
        rest = await asyncio.wait_for(reader.read(), timeout=60)  # EOF: the connection ended
        writer.close()
        listener.close()
        server.close()
        return first, rest

    first, rest = asyncio.run(scenario())
    assert first == b"partial answer" and rest == b""
