"""``KvEventSubscriber``: follow one instance's SGLang KV cache events into a ``KvEventCacheView``.

The instance runs with ``--kv-events-config '{"publisher": "zmq", "endpoint": "tcp://*:PORT"}'``;
its publisher sends ``(topic, 8-byte sequence number, msgpack EventBatch)`` frames, where an
EventBatch is ``[ts, [event, ...], dp_rank]`` and each event a map tagged by ``type``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec
import zmq
import zmq.asyncio

from sglang_pdd.cache.kv_event_view import KvEventCacheView
from sglang_pdd.router.upstream.supervised import supervise

logger = logging.getLogger("sglang_pdd.router")


def decode_batch(payload: bytes) -> list[dict]:
    """The events of one EventBatch payload; raise ValueError when it is not one."""
    try:
        batch = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise ValueError(f"KV event batch is not msgpack: {exc}") from exc
    if not isinstance(batch, (list, tuple)) or len(batch) < 2 or not isinstance(batch[1], list):
        raise ValueError("KV event batch must be [ts, events, ...]")
    return [e for e in batch[1] if isinstance(e, dict)]


def apply_events(view: KvEventCacheView, events: list[dict], source: str) -> int:
    """Apply ``events`` to ``view``; returns how many could not be applied. A malformed event
    (whatever a peer put in it) is logged and skipped: the rest of the batch and the stream
    go on, so one bad publisher message cannot freeze the router's view of MD's cache."""
    bad = 0
    for event in events:
        try:
            view.apply(event)
        except Exception as exc:  # noqa: BLE001 - logged and counted, the event skipped
            bad += 1
            logger.warning(
                "sglang-pdd router: bad KV event from %s (%s: %s): %.200r",
                source,
                type(exc).__name__,
                exc,
                event,
            )
    return bad


class KvEventSubscriber:
    """A ZeroMQ SUB socket on one instance's KV event publisher, applied to ``view``."""

    def __init__(self, endpoint: str, view: KvEventCacheView | None = None) -> None:
        self.endpoint = endpoint
        self.view = view or KvEventCacheView()
        self._socket = zmq.asyncio.Context.instance().socket(zmq.SUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._socket.connect(endpoint)
        self._task: asyncio.Task | None = None
        self._last_seq: int | None = None
        self.batches = 0
        self.gaps = 0  # sequence numbers skipped (events lost: the view may be stale)
        self.resyncs = 0  # gaps after which the view was emptied (it holds nothing stale)
        self.bad_events = 0  # events the view could not apply (skipped, logged)
        self.listeners: list = []  # callables run after each batch (e.g. wake waiters)

    def start(self, counting_failures_of=None) -> None:
        """Start reading (``counting_failures_of(task)``: an ``on_failure`` for the loop)."""
        if self._task is None:
            name = f"KV events of {self.endpoint}"
            on_failure = counting_failures_of(name) if counting_failures_of else None
            self._task = asyncio.get_running_loop().create_task(
                supervise(name, self._run, on_failure=on_failure)
            )

    async def _run(self) -> None:
        while True:
            frames = await self._socket.recv_multipart()
            if len(frames) != 3:
                logger.warning(
                    "sglang-pdd router: KV event from %s has %d frames, expected 3",
                    self.endpoint,
                    len(frames),
                )
                continue
            _topic, seq_bytes, payload = frames
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if self._last_seq is not None and seq > self._last_seq + 1:
                self.gaps += seq - self._last_seq - 1
                # The lost batches may have removed pages the view still holds: a view that
                # claims a prefix MD evicted plans too small a transfer. Start again from
                # nothing; what MD stores from now on rebuilds it (a view that claims too
                # little only costs bytes, never a wrong answer: MD asks P for what it lacks).
                self.view.clear()
                self.resyncs += 1
                logger.warning(
                    "sglang-pdd router: %d KV event batches from %s were lost; "
                    "the cache view starts again from empty",
                    seq - self._last_seq - 1,
                    self.endpoint,
                )
            self._last_seq = seq
            try:
                events = decode_batch(payload)
            except ValueError as exc:
                logger.warning(
                    "sglang-pdd router: bad KV event batch from %s: %s", self.endpoint, exc
                )
                continue
            self.bad_events += apply_events(self.view, events, self.endpoint)
            self.batches += 1
            for listener in self.listeners:
                listener()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._socket.close()
