"""``MainControlClient``: the router's end of a Main-Decode control socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import zmq
import zmq.asyncio

from sglang_pdd.main_decode import protocol

logger = logging.getLogger("sglang_pdd.router")


class MainControlClient:
    """A ZeroMQ DEALER to one Main-Decode; routes its events to per-request queues."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._ctx = zmq.asyncio.Context.instance()
        self._socket = self._ctx.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # A fixed identity survives reconnects: Main-Decode keeps routing this router's events
        # to it, and only this router may act on the requests it watched.
        self._socket.setsockopt(zmq.ROUTING_ID, f"pdd-router-{uuid.uuid4().hex}".encode())
        self._socket.connect(endpoint)
        self._queues: dict[str, asyncio.Queue] = {}
        self._reader: asyncio.Task | None = None
        # Called with every event before it is queued (e.g. the transfer registry notes landings
        # even for requests whose own loop reads its queue later).
        self.listeners: list = []

    def start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read_events())

    async def _read_events(self) -> None:
        while True:
            payload = await self._socket.recv()
            try:
                event = protocol.decode_event(payload)
            except ValueError as exc:
                logger.warning("sglang-pdd router: bad event from %s (%s): %r", self.endpoint,
                               exc, payload[:200])  # fmt: skip
                continue
            queue = self._queues.get(event["rid"])
            for listener in self.listeners:
                try:
                    listener(event)
                except Exception:  # a bookkeeping bug must not stop the event stream
                    logger.exception("sglang-pdd router: event listener failed on %r", event)
            if queue is not None:
                queue.put_nowait(event)

    async def watch(self, rid: str) -> asyncio.Queue:
        """Subscribe to ``rid``'s events; returns the queue they arrive on."""
        queue = self._queues.setdefault(rid, asyncio.Queue())
        await self._socket.send(protocol.watch(rid))
        return queue

    async def handoff(self, rid: str, token_ids: list[int], final: bool = True) -> None:
        """Hand the tokens the client already has to Main-Decode (``final``: RLD stops)."""
        await self._socket.send(protocol.handoff(rid, token_ids, final))

    async def release(self, rid: str) -> None:
        """``rid`` finished on Relay-Decode: MD keeps its KV (when it lands) and ends it."""
        await self._socket.send(protocol.release(rid))

    def forget(self, rid: str) -> None:
        self._queues.pop(rid, None)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._socket.close()
