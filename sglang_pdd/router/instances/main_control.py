"""``MainControlClient``: the router's end of a Main-Decode control socket.

The connection is watched (``--control-timeout-s``): ZeroMQ heartbeats drop a connection whose
peer stopped answering,
and ZeroMQ reconnects by itself. Events Main-Decode sent while the connection was down are lost
(its ROUTER drops what it cannot route), so on every reconnect the client sends ``watch`` again
for each request it follows: MD answers with ``ready`` for those parked, including how many
handed-off ids it has extended, from which the router re-derives what it missed. A send that
cannot go out within ``send_timeout_ms`` raises ``UpstreamError`` (502, naming MD) instead of
waiting for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from sglang_pdd.router.upstream.calls import UpstreamError
from sglang_pdd.router.upstream.supervised import supervise
from sglang_pdd.wire import codec
from sglang_pdd.wire.messages import Handoff, Release, Watch

logger = logging.getLogger("sglang_pdd.router")
SEND_TIMEOUT_MS = 5000  # default: a connection silent this long is dropped; a send, failed


class MainControlClient:
    """A ZeroMQ DEALER to one Main-Decode; routes its events to per-request queues."""

    def __init__(
        self,
        endpoint: str,
        instance: str | None = None,
        send_timeout_ms: int = SEND_TIMEOUT_MS,
        curve=None,
    ) -> None:
        """``curve``: a ``control_auth.CurveClient`` for a Main-Decode with CURVE keys."""
        self.endpoint = endpoint
        self.send_timeout_ms = send_timeout_ms
        self.instance = instance or endpoint  # named in errors (MD's HTTP URL)
        self._ctx = zmq.asyncio.Context.instance()
        self._socket = self._ctx.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # Ping five times per timeout; a connection that answers none is dropped (and redialed).
        self._socket.setsockopt(zmq.HEARTBEAT_IVL, max(send_timeout_ms // 5, 100))
        self._socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, send_timeout_ms)
        self._socket.setsockopt(zmq.SNDTIMEO, send_timeout_ms)
        # Queue only to a live connection: with MD unreachable a send waits (then fails) rather
        # than piling up messages that a reconnect would deliver late, out of their context.
        self._socket.setsockopt(zmq.IMMEDIATE, 1)
        # A completed handshake, not a TCP connect: a proxy in front of a dead MD accepts TCP.
        self._monitor = self._socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self._connections = 0  # connections made so far (the first is not a reconnect)
        # A fixed identity survives reconnects: Main-Decode keeps routing this router's events
        # to it, and only this router may act on the requests it watched.
        self._socket.setsockopt(zmq.ROUTING_ID, f"pdd-router-{uuid.uuid4().hex}".encode())
        if curve is not None:
            curve.secure(self._socket)
        self._socket.connect(endpoint)
        self._queues: dict[str, asyncio.Queue] = {}
        self._reader: asyncio.Task | None = None
        self._rewatcher: asyncio.Task | None = None
        # Called with every event before it is queued (e.g. the transfer registry notes landings
        # even for requests whose own loop reads its queue later).
        self.listeners: list = []

    def start(self, counting_failures_of=None) -> None:
        """Start the event reader and the re-watcher (``counting_failures_of(task)``: an
        ``on_failure`` for each, e.g. a metrics counter)."""
        if self._reader is None:
            loop = asyncio.get_running_loop()
            for attr, name, run in (
                ("_reader", f"control events of {self.endpoint}", self._read_events),
                ("_rewatcher", f"control re-watch of {self.endpoint}", self._rewatch_on_reconnect),
            ):
                on_failure = counting_failures_of(name) if counting_failures_of else None
                setattr(self, attr, loop.create_task(supervise(name, run, on_failure=on_failure)))

    async def _rewatch_on_reconnect(self) -> None:
        while True:
            await recv_monitor_message(self._monitor)
            self._connections += 1
            if self._connections == 1:
                continue
            rids = list(self._queues)
            logger.warning(
                "sglang-pdd router: control connection to %s re-established; "
                "watching %d requests again",
                self.endpoint,
                len(rids),
            )
            for rid in rids:
                try:
                    await self._send(codec.encode(Watch(rid=rid)))
                except UpstreamError as exc:  # the new connection went again: the next one
                    logger.warning(  # re-watches them all
                        "sglang-pdd router: re-watch of %s failed: %s", rid, exc.body["error"]
                    )
                    break

    async def _send(self, payload: bytes) -> None:
        try:
            await self._socket.send(payload)
        except zmq.Again as exc:
            why = (
                f"Main-Decode's control socket {self.endpoint} took nothing for "
                f"{self.send_timeout_ms / 1000:g} s"
            )
            raise UpstreamError(
                502, {"error": {"message": why, "code": 502}}, self.instance
            ) from exc

    async def _read_events(self) -> None:
        while True:
            payload = await self._socket.recv()
            try:
                event = codec.decode_event(payload)
            except ValueError as exc:
                logger.warning(
                    "sglang-pdd router: bad event from %s (%s): %r",
                    self.endpoint,
                    exc,
                    payload[:200],
                )
                continue
            queue = self._queues.get(event.rid)
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
        await self._send(codec.encode(Watch(rid=rid)))
        return queue

    async def handoff(self, rid: str, token_ids: list[int], final: bool = True) -> None:
        """Hand the tokens the client already has to Main-Decode (``final``: RLD stops)."""
        await self._send(codec.encode(Handoff(rid=rid, token_ids=list(token_ids), final=final)))

    def release_nowait(self, rid: str) -> bool:
        """``rid`` finished on Relay-Decode: MD keeps its KV (when it lands) and ends it. Never
        waits: with no live connection to MD it is dropped (False), and MD ends the request
        after --pdd-parked-ttl-s instead."""
        # An async socket answers a NOBLOCK send with a future that is already done.
        sent = self._socket.send(codec.encode(Release(rid=rid)), flags=zmq.NOBLOCK)
        if sent.done() and isinstance(sent.exception(), zmq.Again):
            logger.warning(
                "sglang-pdd router: release of %s not sent: no live control connection to %s",
                rid,
                self.endpoint,
            )
            return False
        return True

    def forget(self, rid: str) -> None:
        self._queues.pop(rid, None)

    async def close(self) -> None:
        for task in (self._reader, self._rewatcher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._socket.disable_monitor()
        self._monitor.close()
        self._socket.close()
