"""``IdleClock``: when each request last saw control activity on Main-Decode.

A relayed request parks on MD until its router hands it off or releases it. If that never comes
(the router lost its control connection, or a bug), the request would hold its KV for good; a
``watch`` for a request that never parks would likewise stay in the control state. Rank 0 asks
``expired()`` each iteration and turns what it returns into ``expire`` control items, which ride
the same broadcast as the router's messages, so every TP rank ends the same requests.
"""

from __future__ import annotations

import time


class IdleClock:
    """Last activity per rid; ``expired()`` names those idle longer than ``ttl_s``."""

    def __init__(self, ttl_s: float, check_every_s: float = 1.0) -> None:
        self.ttl_s = ttl_s
        self.check_every_s = check_every_s
        self.last: dict[str, float] = {}
        self._next_check = 0.0

    def touch(self, rid: str, now: float | None = None) -> None:
        self.last[rid] = time.monotonic() if now is None else now

    def forget(self, rid: str) -> None:
        self.last.pop(rid, None)

    def expired(self, now: float | None = None) -> list[str]:
        """Rids idle past ``ttl_s`` (checked at most every ``check_every_s``), forgotten here."""
        now = time.monotonic() if now is None else now
        if now < self._next_check:
            return []
        self._next_check = now + self.check_every_s
        gone = [rid for rid, t in self.last.items() if now - t > self.ttl_s]
        for rid in gone:
            del self.last[rid]
        return gone
