"""Background loops that outlive their own failures.

The router's long-lived tasks (each Main-Decode's control reader and re-watcher, each KV-event
subscriber, the load poller, the health probe, the ``/ready`` watch) run forever. An exception
escaping one of them would end that task without a word, and the part of the router it feeds
would freeze (the cache view, the events of every request on that MD). ``supervise`` runs the
loop again after a backoff instead, logging each failure with its traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger("sglang_pdd.router")

FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0


async def supervise(
    name: str,
    loop: Callable[[], Awaitable[None]],
    first_backoff_s: float = FIRST_BACKOFF_S,
    max_backoff_s: float = MAX_BACKOFF_S,
    on_failure: Callable[[BaseException], None] | None = None,
) -> None:
    """Run ``loop()`` until cancelled. When it raises, log it, call ``on_failure(exc)`` and run
    it again after a backoff that doubles per consecutive failure (up to ``max_backoff_s``)
    and starts over once a run lasted longer than the backoff it waited."""
    backoff = first_backoff_s
    while True:
        started = asyncio.get_running_loop().time()
        try:
            await loop()
            logger.warning(
                "sglang-pdd router: background task %s returned; starting it again", name
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - logged with its traceback, then restarted
            logger.exception(
                "sglang-pdd router: background task %s failed; starting it again in %.1f s",
                name,
                backoff,
            )
            if on_failure is not None:
                on_failure(exc)
        if asyncio.get_running_loop().time() - started > backoff:
            backoff = first_backoff_s
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, max_backoff_s)
