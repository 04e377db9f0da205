"""``LedgerClient``: the router's end of a Prefill's transfer ledger (``--transfer-ledger``).

Before a transfer to a Main-Decode leaves, the router claims its blocks there
(``wire/ledger.py``). ``Busy`` names another router's transfer carrying part of the prompt: the
router waits for its ``Ended`` (re-asking every ``RECHECK_S``, so a ledger that restarted and
forgot its claims costs at most that), then lets MD ask for what is still missing. A ledger that
does not answer within ``CLAIM_TIMEOUT_S`` or refuses never holds a request up: the transfer
goes unclaimed (counted, logged) as it would with a single router, and for ``SILENT_SKIP_S``
after a claim went unanswered the next ones go unclaimed at once (a Prefill that is down costs
one timeout, not one per request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

import zmq
import zmq.asyncio

from sglang_pdd.router.upstream.supervised import supervise
from sglang_pdd.wire import ledger as wire

logger = logging.getLogger("sglang_pdd.router")
CLAIM_TIMEOUT_S = 0.5  # the ledger is in the router's own datacenter
RECHECK_S = 2.0  # a waiter asks again this often, in case an ``Ended`` was lost
SHARED_BYTES_FRESH_S = 2.0  # how long the ledger's word on other routers' bytes is used
SILENT_SKIP_S = 2.0  # after an unanswered claim, claims go unclaimed this long without asking


class LedgerClient:
    """A ZeroMQ DEALER to one transfer ledger; claims, drops, and waits for others' claims."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._socket = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.IMMEDIATE, 1)
        self._socket.setsockopt(zmq.SNDHWM, 10000)
        # A fixed identity survives reconnects: the ledger keeps this router's claims its own.
        self._socket.setsockopt(zmq.ROUTING_ID, f"pdd-router-{uuid.uuid4().hex}".encode())
        self._socket.connect(endpoint)
        self._answers: dict[str, asyncio.Future] = {}
        self._ended: dict[str, asyncio.Event] = {}
        self._shared: dict[str, tuple[float, float]] = {}  # main -> (bytes, when learned)
        # What Prefill last measured in hand for the WAN, and when (None: never reported).
        self.sending: tuple[float | None, float] = (None, 0.0)
        self._reader: asyncio.Task | None = None
        self._silent_until = 0.0  # monotonic time until which the ledger is taken as down
        # overdue: sent unclaimed after waiting too long on others (``MainSite.claim_shared``).
        # measured: answers that carried Prefill's measured WAN bytes.
        self.stats = {
            **{"granted": 0, "busy": 0, "unanswered": 0, "refused": 0, "overdue": 0},
            "measured": 0,
        }

    def start(self, on_failure=None) -> None:
        if self._reader is None:
            name = f"transfer ledger {self.endpoint}"
            self._reader = asyncio.get_running_loop().create_task(
                supervise(name, self._read, on_failure=on_failure)
            )

    def others_bytes(self, main: str) -> float:
        """Bytes other routers have on ``main``'s link, as the ledger last said (0 when stale)."""
        nbytes, when = self._shared.get(main, (0.0, 0.0))
        return nbytes if time.monotonic() - when < SHARED_BYTES_FRESH_S else 0.0

    def sending_bytes(self) -> float | None:
        """The bytes Prefill measured in hand for the WAN at the last answer (None when it
        reports none, or that answer is stale: the routers' accounting then stands alone)."""
        nbytes, when = self.sending
        fresh = nbytes is not None and time.monotonic() - when < SHARED_BYTES_FRESH_S
        return nbytes if fresh else None

    async def claim(
        self, main: str, rid: str, blocks: list[int], nbytes: float
    ) -> wire.Granted | wire.Busy | None:
        """Claim ``blocks`` on ``main`` for ``rid``: ``Granted``, ``Busy`` (wait with
        ``wait_ended``), or None when the ledger did not answer (send unclaimed)."""
        if time.monotonic() < self._silent_until:
            self.stats["unanswered"] += 1
            return None
        future = asyncio.get_running_loop().create_future()
        self._answers[rid] = future
        message = wire.Claim(rid=rid, main=main, blocks=list(blocks), nbytes=float(nbytes))
        try:
            # One bound for both: a send waits while no connection is up (IMMEDIATE).
            answer = await asyncio.wait_for(self._ask(message, future), CLAIM_TIMEOUT_S)
        except (zmq.Again, TimeoutError) as exc:
            self.stats["unanswered"] += 1
            self._silent_until = time.monotonic() + SILENT_SKIP_S
            logger.warning(
                "sglang-pdd router: transfer ledger %s did not answer the claim of %s (%s); "
                "sending it and the next %g s of transfers unclaimed",
                self.endpoint,
                rid,
                type(exc).__name__,
                SILENT_SKIP_S,
            )
            return None
        finally:
            self._answers.pop(rid, None)
        if isinstance(answer, wire.Refused):
            self.stats["refused"] += 1
            logger.warning(
                "sglang-pdd router: transfer ledger refused the claim of %s: %s; sending it "
                "unclaimed",
                rid,
                answer.message,
            )
            return None
        self._shared[main] = (answer.others_bytes, time.monotonic())
        if answer.sending_bytes is not None:
            self.sending = (answer.sending_bytes, time.monotonic())
            self.stats["measured"] += 1
        self.stats["granted" if isinstance(answer, wire.Granted) else "busy"] += 1
        return answer

    async def _ask(self, message: wire.Claim, answer: asyncio.Future):
        await self._socket.send(wire.encode(message))
        return await answer

    async def wait_ended(self, holder: str, timeout_s: float = RECHECK_S) -> None:
        """Until the ledger says ``holder``'s claim is over, or ``timeout_s`` (ask again)."""
        event = self._ended.setdefault(holder, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)
        if event.is_set() and self._ended.get(holder) is event:
            del self._ended[holder]

    def drop(self, rid: str) -> None:
        """``rid``'s claim is over (its KV landed on MD, or never will). Never waits: if it
        cannot go out, the ledger ends the claim after its TTL."""
        sent = self._socket.send(wire.encode(wire.Drop(rid=rid)), flags=zmq.NOBLOCK)
        if sent.done() and isinstance(sent.exception(), zmq.Again):
            logger.warning("sglang-pdd router: drop of claim %s not sent to the ledger", rid)

    async def _read(self) -> None:
        while True:
            payload = await self._socket.recv()
            try:
                event = wire.decode_event(payload)
            except ValueError as exc:
                logger.warning("sglang-pdd router: bad ledger event (%s): %r", exc, payload[:200])
                continue
            if isinstance(event, wire.Ended):
                if (ended := self._ended.get(event.rid)) is not None:
                    ended.set()  # its waiters forget it once woken
                continue
            if isinstance(event, wire.Busy):
                self._ended.setdefault(event.holder, asyncio.Event())
            future = self._answers.get(event.rid) if event.rid is not None else None
            if future is not None and not future.done():
                future.set_result(event)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._socket.close()
