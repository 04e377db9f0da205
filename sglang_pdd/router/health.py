"""``InstanceHealth``: instances out of rotation, after failing a request or while draining.

An instance that failed or went silent while serving a request (the request then migrated, or
ended with its error) is taken out of rotation: new requests are planned without it, as long as
that leaves a prefill and a decoding instance. A probe asks each such instance's ``/health``
every ``interval_s`` and puts it back once it answers 200. A draining instance (``POST
/pdd/drain``) stays out until the operator puts it back (``POST /pdd/undrain``).

Instances in rotation are asked for ``/ready`` (cheap: no generation) every
``--instance-check-interval-s``. One that answers 503 is stopping: SGLang answers so from the
moment it gets SIGTERM (its graceful shutdown, which waits for its requests to end) or while it
is paused. It is drained like ``POST /pdd/drain`` (its requests move elsewhere, so the shutdown
completes without dropping a stream) and put back once ``/ready`` answers 200 again (restarted).
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

logger = logging.getLogger("sglang_pdd.router")


class InstanceHealth:
    """The instances out of rotation, and the probe that brings them back."""

    def __init__(self) -> None:
        self.down: dict[str, float] = {}  # URL -> when it was taken out (monotonic)
        self.draining: set[str] = set()  # taken out by the operator
        self.stopping: set[str] = set()  # answered /ready with 503 (SIGTERM'd or paused)

    def mark_down(self, url: str) -> None:
        if url not in self.down:
            logger.warning("sglang-pdd router: %s out of rotation (it failed a request)", url)
            self.down[url] = time.monotonic()

    def mark_up(self, url: str) -> None:
        if self.down.pop(url, None) is not None:
            logger.info("sglang-pdd router: %s back in rotation (/health answers)", url)

    def is_draining(self, url: str) -> bool:
        """Taken out on purpose (by the operator, or stopping): its requests move elsewhere."""
        return url in self.draining or url in self.stopping

    def drain_cause(self, url: str) -> str:
        return "POST /pdd/drain" if url in self.draining else "stopping: /ready answers 503"

    def out_of_rotation(self) -> frozenset[str]:
        return frozenset(self.down) | frozenset(self.draining) | frozenset(self.stopping)

    async def probe(self, session: aiohttp.ClientSession, interval_s: float = 1.0) -> None:
        """Forever: probe each instance out of rotation; put back those that answer."""
        while True:
            for url in list(self.down):
                if await _answers(session, f"{url}/health") == 200:
                    self.mark_up(url)
            await asyncio.sleep(interval_s)

    async def watch_ready(
        self, session: aiohttp.ClientSession, instances: list[str], interval_s: float, on_stopping
    ) -> None:
        """Forever: ask each instance for ``/ready``; an instance answering 503 is stopping
        (``on_stopping(url)`` drains it), and comes back once it answers 200."""
        while True:
            for url in instances:
                if url in self.down or url in self.draining:
                    continue
                status = await _answers(session, f"{url}/ready")
                if status == 503 and url not in self.stopping:
                    logger.warning(
                        "sglang-pdd router: %s is stopping (/ready answers 503): "
                        "moving its requests elsewhere",
                        url,
                    )
                    self.stopping.add(url)
                    on_stopping(url)
                elif status == 200 and url in self.stopping:
                    logger.info("sglang-pdd router: %s is ready again: back in rotation", url)
                    self.stopping.discard(url)
            await asyncio.sleep(interval_s)


async def _answers(session: aiohttp.ClientSession, url: str) -> int | None:
    """The status ``url`` answers with, or None when it cannot be reached."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            return resp.status
    except (aiohttp.ClientError, TimeoutError):
        return None
