"""``LinkFaults``: the failures an emulated WAN link can be told to have, and its command API.

An operator or a test cuts the link on command (``sglang-pdd wan-link --control HOST:PORT``):

* ``POST /stall``: nothing crosses, in either direction; connections stay open and the bytes
  wait (a congested or flapping link). ``POST /restore`` delivers them, in order.
* ``POST /drop``: a partition. Bytes sent meanwhile are lost, and new connections reach
  nothing; open connections stay open, so the peers only notice through their own timeouts
  or heartbeats. ``POST /restore`` ends it (a stream that lost bytes stays broken, as it
  would).
* ``POST /reset``: every open connection is reset at once (both ends see it end); the link
  itself stays up, so the peers can reconnect.
* ``GET /state``: ``{"state": "up" | "stalled" | "dropping", "connections": n, "resets": n}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct

from aiohttp import web

logger = logging.getLogger("sglang_pdd")

UP, STALLED, DROPPING = "up", "stalled", "dropping"


class LinkFaults:
    """The link's fault state, shared by every connection of one proxy."""

    def __init__(self) -> None:
        self.state = UP
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._connections: set[tuple[asyncio.StreamWriter, ...]] = set()
        self.resets = 0

    @property
    def dropping(self) -> bool:
        return self.state == DROPPING

    async def wait_flowing(self) -> None:
        """Return once bytes may cross (at once unless stalled)."""
        await self._flowing.wait()

    def track(self, writers: tuple[asyncio.StreamWriter, ...]) -> None:
        self._connections.add(writers)

    def untrack(self, writers: tuple[asyncio.StreamWriter, ...]) -> None:
        self._connections.discard(writers)

    def set_state(self, state: str) -> None:
        if state not in (UP, STALLED, DROPPING):
            raise ValueError(
                f"link state {state!r}: accepted values are {UP}, {STALLED}, {DROPPING}"
            )
        self.state = state
        if state == STALLED:
            self._flowing.clear()
        else:
            self._flowing.set()  # dropping: the pumps discard what they read
        logger.warning("sglang-pdd wan-link: link %s", state)

    def reset_all(self) -> int:
        """Reset every open connection (RST to both ends); return how many."""
        count = len(self._connections)
        for writers in list(self._connections):
            for writer in writers:
                with contextlib.suppress(Exception):
                    # Linger 0: closing sends RST, as a reset link would, not an orderly FIN.
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                with contextlib.suppress(Exception):
                    writer.transport.abort()
        self._connections.clear()
        self.resets += count
        logger.warning("sglang-pdd wan-link: reset %d connection(s)", count)
        return count

    def describe(self) -> dict:
        return {"state": self.state, "connections": len(self._connections), "resets": self.resets}


def control_app(faults: LinkFaults) -> web.Application:
    """The HTTP command API of one link (see the module docstring)."""

    async def set_to(state: str) -> web.Response:
        faults.set_state(state)
        return web.json_response(faults.describe())

    async def stall(_request):
        return await set_to(STALLED)

    async def drop(_request):
        return await set_to(DROPPING)

    async def restore(_request):
        return await set_to(UP)

    async def reset(_request):
        count = faults.reset_all()
        return web.json_response({**faults.describe(), "reset": count})

    async def state(_request):
        return web.json_response(faults.describe())

    app = web.Application()
    app.router.add_post("/stall", stall)
    app.router.add_post("/drop", drop)
    app.router.add_post("/restore", restore)
    app.router.add_post("/reset", reset)
    app.router.add_get("/state", state)
    return app
