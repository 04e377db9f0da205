"""``InstanceHealth``: instances out of rotation, after failing a request or while draining.

An instance that failed or went silent while serving a request (the request then migrated, or
ended with its error) is taken out of rotation: new requests are planned without it, as long as
that leaves a prefill and a decoding instance. A probe asks each such instance's ``/health``
every ``interval_s`` and puts it back once it answers 200. A draining instance (``POST
/pdd/drain``) stays out until the operator puts it back (``POST /pdd/undrain``).
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

    def mark_down(self, url: str) -> None:
        if url not in self.down:
            logger.warning("sglang-pdd router: %s out of rotation (it failed a request)", url)
            self.down[url] = time.monotonic()

    def mark_up(self, url: str) -> None:
        if self.down.pop(url, None) is not None:
            logger.info("sglang-pdd router: %s back in rotation (/health answers)", url)

    def out_of_rotation(self) -> frozenset[str]:
        return frozenset(self.down) | frozenset(self.draining)

    async def probe(self, session: aiohttp.ClientSession, interval_s: float = 1.0) -> None:
        """Forever: probe each instance out of rotation; put back those that answer."""
        timeout = aiohttp.ClientTimeout(total=5)
        while True:
            for url in list(self.down):
                try:
                    async with session.get(f"{url}/health", timeout=timeout) as resp:
                        healthy = resp.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    healthy = False
                if healthy:
                    self.mark_up(url)
            await asyncio.sleep(interval_s)
