"""``LedgerService``: Prefill's transfer ledger, the claims every router makes before KV leaves.

It runs beside the scheduler that sends the KV (rank 0 of a Prefill started with
``--pdd-ledger-port``), on a thread of its own with its own ZeroMQ context and ROUTER socket,
so the scheduler's loop never waits for it. ``handle`` turns one received frame list into the
replies to send; it never raises: a malformed message is answered ``Refused``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sglang_pdd.transfer.claims import ClaimTable, Reply
from sglang_pdd.wire import ledger as wire

logger = logging.getLogger("sglang_pdd")
EXPIRE_EVERY_S = 1.0
POLL_MS = 100  # how soon close() is noticed


def handle(
    table: ClaimTable, frames: list[bytes], now: float, sending: float | None = None
) -> list[Reply]:
    """The replies to one message (``[peer identity, payload]`` from the ROUTER socket);
    ``sending``: the WAN-bound bytes Prefill has in hand now, told to a claiming router."""
    if len(frames) != 2:
        if frames:
            return [(frames[0], wire.Refused(None, "one frame per message"))]
        return []
    peer, payload = frames
    try:
        message = wire.decode_op(payload)
    except ValueError as exc:
        return [(peer, wire.Refused(wire.rid_of(payload), str(exc)[:500]))]
    if isinstance(message, wire.Claim):
        return table.claim(peer, message, now, sending)
    return table.drop(peer, message.rid)


class LedgerService:
    """The ledger's socket and thread (``start``; ``close`` to stop)."""

    def __init__(
        self, host: str, port: int, ttl_s: float, sending: Callable[[], float] | None = None
    ) -> None:
        """``sending``: the bytes Prefill's WAN-bound writes have in hand now (None: Prefill
        has no WAN hosts and reports none)."""
        import zmq

        self.table = ClaimTable(ttl_s)
        self._sending = sending
        self._context = zmq.Context()
        self.socket = self._context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, wire.MAX_LEDGER_MESSAGE_BYTES)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.socket.bind(f"tcp://{host}:{port}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pdd-ledger", daemon=True)
        logger.info("sglang-pdd: transfer ledger on %s:%d", host, port)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close(0)
        self._context.term()

    def _run(self) -> None:
        next_expiry = time.monotonic() + EXPIRE_EVERY_S
        while not self._stop.is_set():
            try:
                next_expiry = self._serve_once(next_expiry)
            except Exception:  # a bug here must not end the ledger: routers would time out
                logger.exception("sglang-pdd: transfer ledger iteration failed")

    def _serve_once(self, next_expiry: float) -> float:
        """Answer what arrived within one poll, then end the claims past their TTL."""
        import zmq

        replies: list[Reply] = []
        if self.socket.poll(POLL_MS):
            while True:
                try:
                    frames = self.socket.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                sending = self._sending() if self._sending is not None else None
                replies += handle(self.table, frames, time.monotonic(), sending)
        if (now := time.monotonic()) >= next_expiry:
            replies += self.table.expire(now)
            next_expiry = now + EXPIRE_EVERY_S
        for peer, event in replies:
            try:
                self.socket.send_multipart([peer, wire.encode(event)], zmq.NOBLOCK)
            except zmq.ZMQError as exc:
                # The peer is gone or full: its claim times out and it sends anyway.
                logger.debug("sglang-pdd: ledger reply to %r not sent: %s", peer, exc)
        return next_expiry
