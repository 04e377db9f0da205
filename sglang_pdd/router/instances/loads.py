"""What an instance's ``GET /v1/loads`` says about it, as placement reads it.

SGLang's ``/v1/loads`` gives, per scheduler, its running and waiting requests, its KV use, the
uncached prompt tokens waiting for prefill compute, and two counters that only grow: prompt
tokens prefilled and microseconds spent prefilling. Pure: the router's poller feeds it JSON.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sglang_pdd.policy.placement import MovingAverage


def decode_busy_fraction(loads: dict) -> float:
    """A decode server's busy fraction (0..1): the busier of KV use and batch slots."""
    load = loads["loads"][0]
    running = load["num_running_reqs"] / max(load["max_running_requests"], 1)
    return max(float(load["token_usage"]), running)


@dataclass
class PrefillBacklog:
    """Seconds of prefill a Prefill server has queued: its waiting uncached tokens over the
    rate it prefills at (tokens per busy second, a moving average of the counters' growth
    between two looks). 0 until a rate has been measured."""

    rate: MovingAverage = field(default_factory=MovingAverage)
    waiting_tokens: int = 0
    _counters: tuple[int, int] | None = None  # (tokens prefilled, busy us) at the last look
    # (when, seconds) of recent looks, oldest first: what ``standing_seconds`` reads.
    _looks: deque = field(default_factory=lambda: deque(maxlen=256))

    def note(self, loads: dict, now: float) -> None:
        """Fold in one ``/v1/loads`` answer, read at ``now`` (monotonic seconds)."""
        load = loads["loads"][0]
        tokens, busy_us = (
            int(load["total_prefill_uncached_tokens"]),
            int(load["total_prefill_busy_us"]),
        )
        last, self._counters = self._counters, (tokens, busy_us)
        # A restarted server's counters start again from 0: that look teaches nothing.
        if last is not None and busy_us > last[1] and tokens >= last[0]:
            self.rate.note((tokens - last[0]) / ((busy_us - last[1]) / 1e6))
        self.waiting_tokens = int(load["num_waiting_uncached_tokens"])
        self._looks.append((now, self.seconds))

    @property
    def seconds(self) -> float:
        rate = self.rate.value
        return self.waiting_tokens / rate if rate else 0.0

    def standing_seconds(self, window_s: float, now: float) -> float:
        """The least backlog of every look in the last ``window_s`` seconds: a queue that has
        stood that long, as opposed to a burst P is about to clear. 0 until the looks span the
        window; ``window_s`` 0: the last look's backlog."""
        if window_s == 0:
            return self.seconds
        since = now - window_s
        if not self._looks or self._looks[0][0] > since:
            return 0.0  # not watched for a whole window yet
        # The look at or just before the window's start counts: it held until the next one.
        start = max(i for i, (when, _) in enumerate(self._looks) if when <= since)
        return min(seconds for _, seconds in list(self._looks)[start:])
