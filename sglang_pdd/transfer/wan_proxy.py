"""``WanProxy``: a TCP proxy that carries each direction over an emulated ``WanLink``.

Control traffic to Main-Decode (the router's HTTP requests and the handoff socket) goes through
one of these, so it pays the link's bandwidth and one-way delay as it would between datacenters.
Bytes keep their order: each chunk is scheduled on its direction's link and written out once it
would have arrived. With ``--control`` the link can be stalled, dropped and reset on command
(``link_faults.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiohttp import web

from sglang_pdd.transfer.link_faults import LinkFaults, control_app
from sglang_pdd.transfer.wan_link import WanLink, WanLinkConfig

logger = logging.getLogger("sglang_pdd")


async def _pump(reader, writer, link: WanLink, faults: LinkFaults) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def read_side() -> None:
        try:
            while data := await reader.read(65536):
                if not faults.dropping:  # a partition loses what is sent into it
                    queue.put_nowait((link.reserve(len(data)), data))
        finally:
            # EOF, or a reset (a peer killed with kill -9): either way the other side must see
            # this connection end, after the bytes already on the link.
            queue.put_nowait((None, b""))

    async def write_side() -> None:
        while True:
            arrival, data = await queue.get()
            if arrival is None:
                break
            delay = arrival - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await faults.wait_flowing()  # stalled: the bytes wait in the link
            if faults.dropping:
                continue  # lost in flight
            writer.write(data)
            await writer.drain()

    reading = asyncio.create_task(read_side())
    try:
        await write_side()
    finally:
        reading.cancel()
        with contextlib.suppress(Exception):
            writer.close()


class WanProxy:
    """Listen on ``listen_host:listen_port``; forward to ``target`` over the emulated link."""

    def __init__(
        self,
        listen_host: str,
        listen_port: int,
        target_host: str,
        target_port: int,
        config: WanLinkConfig,
    ) -> None:
        self.listen = (listen_host, listen_port)
        self.target = (target_host, target_port)
        self.config = config
        # One link per direction, shared by all connections: flows share the bottleneck.
        self.uplink = WanLink(config)
        self.downlink = WanLink(config)
        self.faults = LinkFaults()

    async def _handle(self, client_reader, client_writer) -> None:
        if self.faults.dropping:  # a partition: the connection reaches nothing
            self.faults.track((client_writer,))
            try:
                while await client_reader.read(65536):
                    pass
            finally:
                self.faults.untrack((client_writer,))
                client_writer.close()
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError as exc:
            logger.warning("sglang-pdd wan-link: cannot reach %s:%d: %s", *self.target, exc)
            client_writer.close()
            return
        writers = (client_writer, server_writer)
        self.faults.track(writers)
        try:
            await asyncio.gather(
                _pump(client_reader, server_writer, self.uplink, self.faults),
                _pump(server_reader, client_writer, self.downlink, self.faults),
                return_exceptions=True,
            )
        finally:
            self.faults.untrack(writers)

    async def serve_forever(self, control: tuple[str, int] | None = None) -> None:
        """Forward connections forever; with ``control``, also serve the link's command API
        (``link_faults.py``) on that address."""
        if control is not None:
            runner = web.AppRunner(control_app(self.faults), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, *control).start()
        server = await asyncio.start_server(self._handle, *self.listen)
        async with server:
            await server.serve_forever()


def main(argv: list[str]) -> int:
    """``sglang-pdd wan-link``: run one emulated-WAN TCP proxy until interrupted."""
    import argparse

    parser = argparse.ArgumentParser(prog="sglang-pdd wan-link", description=__doc__)
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--target", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--bandwidth-mbps", type=float, default=100.0)
    parser.add_argument("--delay-ms", type=float, default=20.0, help="one-way delay")
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument(
        "--control",
        default=None,
        help="HOST:PORT for the link's command API: POST /stall, /drop, /reset, "
        "/restore; GET /state (default: none)",
    )
    args = parser.parse_args(argv)
    try:
        config = WanLinkConfig(args.bandwidth_mbps, args.delay_ms, args.jitter_ms)
        listen_host, listen_port = _host_port(args.listen, "--listen")
        target_host, target_port = _host_port(args.target, "--target")
        control = _host_port(args.control, "--control") if args.control else None
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    proxy = WanProxy(listen_host, listen_port, target_host, target_port, config)
    logger.info("sglang-pdd wan-link %s -> %s (%s)", args.listen, args.target, config)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(proxy.serve_forever(control))
    return 0


def _host_port(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{flag} must be HOST:PORT, got {text!r}")
    return host, int(port)
