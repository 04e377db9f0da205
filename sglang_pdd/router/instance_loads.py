"""What an instance's ``GET /v1/loads`` says about it, as the planner reads it.

SGLang's ``/v1/loads`` gives, per scheduler, its running and waiting requests, its KV use, the
uncached prompt tokens waiting for prefill compute, and two counters that only grow: prompt
tokens prefilled and microseconds spent prefilling. Pure: the router's poller feeds it JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_pdd.policy.planner import MovingAverage


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

    def note(self, loads: dict) -> None:
        """Fold in one ``/v1/loads`` answer."""
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

    @property
    def seconds(self) -> float:
        rate = self.rate.value
        return self.waiting_tokens / rate if rate else 0.0
