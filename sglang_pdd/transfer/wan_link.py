"""``WanLink``: an emulated wide-area link (bandwidth, one-way delay, jitter) shared by senders.

A sender calls ``transmit(nbytes)`` before handing bytes to the real transport; it returns when
the bytes would have arrived at the far end: after waiting for the link to be free (transfers
queue FIFO behind each other, which is how concurrent flows share a saturated bottleneck), the
serialization time ``nbytes / bandwidth`` and the one-way propagation delay. The kernel's
``netem`` qdisc is not available on the machines this project tests on, hence a userspace model.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class WanLinkConfig:
    """Link parameters; ``bandwidth_mbps <= 0`` is refused (use no link instead)."""

    bandwidth_mbps: float = 100.0
    one_way_delay_ms: float = 20.0
    jitter_ms: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bandwidth_mbps <= 0:
            raise ValueError(f"--pdd-wan-bandwidth-mbps must be > 0, got {self.bandwidth_mbps}")
        if self.one_way_delay_ms < 0:
            raise ValueError(f"--pdd-wan-delay-ms must be >= 0, got {self.one_way_delay_ms}")
        if self.jitter_ms < 0 or self.jitter_ms > self.one_way_delay_ms:
            raise ValueError(
                f"--pdd-wan-jitter-ms must be within [0, --pdd-wan-delay-ms], got {self.jitter_ms}"
            )

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_mbps * 1e6 / 8


class WanLink:
    """A thread-safe emulated link; see the module docstring."""

    def __init__(self, config: WanLinkConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._free_at = 0.0  # monotonic time when the link finishes what is queued
        self._rng = random.Random(config.seed)
        self.bytes_sent = 0

    def _delay_s(self) -> float:
        jitter = self._rng.uniform(-self.config.jitter_ms, self.config.jitter_ms)
        return (self.config.one_way_delay_ms + jitter) / 1000.0

    def reserve(self, nbytes: int) -> float:
        """Queue ``nbytes`` on the link; return the monotonic time they arrive at the far end."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._free_at)
            self._free_at = start + nbytes / self.config.bytes_per_s
            self.bytes_sent += nbytes
            return self._free_at + self._delay_s()

    def transmit(self, nbytes: int) -> float:
        """Block until ``nbytes`` sent now would have arrived; return the seconds waited."""
        arrival = self.reserve(nbytes)
        wait = arrival - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return max(wait, 0.0)
