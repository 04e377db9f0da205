"""``InstanceHealth``: instances out of rotation, after failing a request or while draining.

An instance that failed or went silent while serving a request (the request then migrated, or
ended with its error) counts a failure on its circuit breaker (``breaker.py``); an open breaker
takes it out of rotation: new requests are planned without it, as long as that leaves a prefill
and a decoding instance. Once the breaker has been open long enough, a probe asks the
instance's ``/health`` (every ``interval_s``) and puts it back, half-open, once it answers 200;
requests it then serves close the breaker, a failure opens it again for longer. A draining
instance (``POST /pdd/drain``) stays out until the operator puts it back (``POST
/pdd/undrain``).

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

from sglang_pdd.router.instances.breaker import CLOSED, HALF_OPEN, OPEN, Breaker, BreakerConfig

logger = logging.getLogger("sglang_pdd.router")


class InstanceHealth:
    """The instances out of rotation, and the probe that brings them back."""

    def __init__(self, breaker: BreakerConfig | None = None) -> None:
        self.breaker_config = breaker or BreakerConfig()
        self.breakers: dict[str, Breaker] = {}  # URL -> its breaker, from its first failure on
        self.draining: set[str] = set()  # taken out by the operator
        self.stopping: set[str] = set()  # answered /ready with 503 (SIGTERM'd or paused)

    @property
    def down(self) -> set[str]:
        """The instances whose breaker is open."""
        return {url for url, b in self.breakers.items() if b.state == OPEN}

    def breaker_state(self, url: str) -> str:
        breaker = self.breakers.get(url)
        return CLOSED if breaker is None else breaker.state

    def mark_down(self, url: str) -> None:
        """``url`` failed (or went silent on) a request."""
        breaker = self.breakers.setdefault(url, Breaker(self.breaker_config))
        before = breaker.state
        if breaker.failed(time.monotonic()) == OPEN and before != OPEN:
            logger.warning(
                "sglang-pdd router: %s out of rotation (it failed a request%s; probed again "
                "in %.0f s)",
                url,
                " while on trial" if before == HALF_OPEN else "",
                breaker.open_for,
            )

    def mark_served(self, url: str) -> None:
        """``url`` served its part of a request to the end."""
        breaker = self.breakers.get(url)
        if breaker is None:
            return  # never failed: nothing to count
        before = breaker.state
        if breaker.succeeded(time.monotonic()) == CLOSED and before == HALF_OPEN:
            logger.info("sglang-pdd router: %s serves again: its breaker is closed", url)

    def mark_up(self, url: str) -> None:
        """``url``'s ``/health`` answered 200: back in rotation (half-open) if its breaker has
        been open long enough."""
        breaker = self.breakers.get(url)
        if breaker is not None and breaker.probe_answered(time.monotonic()) == HALF_OPEN:
            logger.info("sglang-pdd router: %s back in rotation, on trial (/health answers)", url)

    def due_for_probe(self) -> list[str]:
        now = time.monotonic()
        return [url for url, b in self.breakers.items() if b.may_probe(now)]

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
            for url in self.due_for_probe():
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


def cannot_serve(
    prefill: list[str], relay: list[str], mains: list[str], enable_relay: bool, healthy: set[str]
) -> str | None:
    """Why the router cannot serve a request with only the ``healthy`` instances, or None.

    A request needs a prefill server and a decoding instance: a Main-Decode (P-MD), or a
    Relay-Decode (P-RLD) unless relaying is off. The router's ``/health`` answers 503 with this
    reason, and 200 while one pipeline is left (a load balancer keeps a degraded router)."""
    if not any(url in healthy for url in prefill):
        return f"no prefill server answers /health ({', '.join(prefill)})"
    decoders = [*mains, *(relay if enable_relay else [])]
    if not any(url in healthy for url in decoders):
        return f"no decoding instance answers /health ({', '.join(decoders)})"
    return None
