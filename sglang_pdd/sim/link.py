"""Network paths with fair sharing: the cross-datacenter WAN and the intra-datacenter RDMA path.

A path is a fluid processor-sharing server: n concurrent transfers each get
min(per-flow cap, bandwidth / n), as TCP's fairness (or an RDMA fabric's) settles to. Every
transfer also pays a start-up latency of one RTT plus a random jitter.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import simpy

from sglang_pdd.policy import LinkEstimate

# Up to this many concurrent transfers the router-side estimate is computed exactly.
EXACT_ESTIMATE_FLOWS = 256


@dataclass(frozen=True)
class LinkConfig:
    """A network path.

    bandwidth_gbps: capacity in gigabits per second.
    rtt_s: round-trip time; each transfer waits one RTT before data flows (handshake).
    jitter_s: mean of an exponential extra delay per transfer (queueing, retransmits).
    max_flow_gbps: cap on one transfer's rate (0 = none).
    cost_per_gbps_hour: what a gigabit per second of this path costs per hour.
    fifo: transfers cross one at a time in the order they were sent, each landing half an RTT
        after its last byte left, as the testbed's emulated links do
        (``sglang_pdd.transfer.wan_link``); ``jitter_s`` and ``max_flow_gbps`` are then unused.
    """

    bandwidth_gbps: float = 100.0
    rtt_s: float = 0.03
    jitter_s: float = 0.02
    max_flow_gbps: float = 0.0
    cost_per_gbps_hour: float = 0.0
    fifo: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.fifo, bool):
            raise ValueError(f"link.fifo must be true or false, got {self.fifo!r}")
        for f in ("bandwidth_gbps", "rtt_s", "jitter_s", "max_flow_gbps", "cost_per_gbps_hour"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"link.{f} must be a finite number, got {v!r}")
            if v < 0 or (f == "bandwidth_gbps" and v == 0):
                raise ValueError(f"link.{f} must be {'> 0' if f == 'bandwidth_gbps' else '>= 0'}")

    @property
    def bytes_per_s(self) -> float:
        """Capacity in bytes per second."""
        return self.bandwidth_gbps * 1e9 / 8


class FairShareLink:
    """One path shared fairly by its concurrent transfers, simulated on a simpy Environment."""

    def __init__(self, env: simpy.Environment, config: LinkConfig, rng: random.Random) -> None:
        self.env, self.config, self.rng = env, config, rng
        self._cap = config.bytes_per_s
        self._flow_cap = config.max_flow_gbps * 1e9 / 8 if config.max_flow_gbps > 0 else math.inf
        # Virtual clock: bytes every active flow has received since the path was created.
        self._served = 0.0
        self._last = 0.0
        self._flows: dict[int, tuple[float, Callable[[float], None]]] = {}
        self._heap: list[tuple[float, int]] = []
        self._ids = itertools.count()
        self._version = 0
        self.bytes_sent = 0.0
        self.busy_s = 0.0
        self.transfers = 0

    def _rate(self) -> float:
        n = len(self._flows)
        return min(self._flow_cap, self._cap / n) if n else 0.0

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0 and self._flows:
            rate = self._rate()
            self._served += rate * dt
            self.bytes_sent += rate * dt * len(self._flows)
            self.busy_s += dt
        self._last = now

    def estimate(self, nbytes: float) -> LinkEstimate:
        """What a transfer of nbytes started now should expect, ignoring future arrivals.

        Under fair sharing a new flow waits for every active flow's bytes up to its own size.
        """
        self._advance()
        n = len(self._flows)
        if n <= EXACT_ESTIMATE_FLOWS:
            backlog = 0.0
            for finish, _ in self._flows.values():
                backlog += min(finish - self._served, nbytes)
        else:
            # A congested path: every flow is assumed to outlast this one (an upper bound that
            # keeps the estimate O(1) when thousands of transfers queue).
            backlog = n * nbytes
        if self._flow_cap < self._cap:
            # A capped flow cannot use the whole path: finishing takes at least nbytes / cap,
            # expressed as extra backlog on the full-capacity path.
            backlog = max(backlog, nbytes * (self._cap / self._flow_cap - 1))
        return LinkEstimate(self._cap, self.config.rtt_s + self.config.jitter_s, backlog)

    def send(self, nbytes: float, on_done: Callable[[float], None]) -> None:
        """Start a transfer; on_done(now) runs when its last byte arrives."""
        self.transfers += 1
        delay = self.config.rtt_s
        if self.config.jitter_s > 0:
            delay += self.rng.expovariate(1.0 / self.config.jitter_s)
        if nbytes <= 0:
            self.env.timeout(delay).callbacks.append(lambda _e: on_done(self.env.now))
            return
        self.env.timeout(delay).callbacks.append(lambda _e: self._start(nbytes, on_done))

    def _start(self, nbytes: float, on_done: Callable[[float], None]) -> None:
        self._advance()
        fid = next(self._ids)
        finish = self._served + nbytes
        self._flows[fid] = (finish, on_done)
        heapq.heappush(self._heap, (finish, fid))
        self._reschedule()

    def _reschedule(self) -> None:
        self._version += 1
        if not self._heap:
            return
        version = self._version
        delay = max(0.0, (self._heap[0][0] - self._served) / self._rate())
        self.env.timeout(delay).callbacks.append(lambda _e: self._complete(version))

    def _complete(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        done = []
        # Finish every flow due within a nanosecond (or a byte): smaller gaps are float noise on
        # a virtual clock that reaches terabytes.
        tol = max(1.0, self._rate() * 1e-9) if self._flows else 1.0
        while self._heap and self._heap[0][0] <= self._served + tol:
            _, fid = heapq.heappop(self._heap)
            done.append(self._flows.pop(fid)[1])
        self._reschedule()
        for cb in done:
            cb(self.env.now)

    @property
    def active_transfers(self) -> int:
        """Transfers currently moving data."""
        return len(self._flows)

    def utilization(self, duration_s: float) -> float:
        """Average fraction of capacity used over duration_s."""
        return self.bytes_sent / (self._cap * duration_s) if duration_s > 0 else 0.0


class FifoLink:
    """One path that carries transfers one at a time in the order they were sent
    (``LinkConfig.fifo``); the same interface as ``FairShareLink``."""

    def __init__(self, env: simpy.Environment, config: LinkConfig) -> None:
        self.env, self.config = env, config
        self._cap = config.bytes_per_s
        self._free_at = 0.0  # when the last queued byte leaves
        self._in_flight = 0
        self.bytes_sent = 0.0
        self.busy_s = 0.0
        self.transfers = 0

    def estimate(self, nbytes: float) -> LinkEstimate:
        """What a transfer of nbytes started now should expect: every queued byte first."""
        backlog = max(0.0, self._free_at - self.env.now) * self._cap
        return LinkEstimate(self._cap, self.config.rtt_s / 2, backlog)

    def send(self, nbytes: float, on_done: Callable[[float], None]) -> None:
        """Queue a transfer; on_done(now) runs when its last byte arrives."""
        now = self.env.now
        self.transfers += 1
        start = max(now, self._free_at)
        self._free_at = start + max(nbytes, 0.0) / self._cap
        self.bytes_sent += max(nbytes, 0.0)
        self.busy_s += self._free_at - start
        self._in_flight += 1

        def landed(_e) -> None:
            self._in_flight -= 1
            on_done(self.env.now)

        delay = self._free_at + self.config.rtt_s / 2 - now
        self.env.timeout(delay).callbacks.append(landed)

    @property
    def active_transfers(self) -> int:
        """Transfers queued or moving data."""
        return self._in_flight

    def utilization(self, duration_s: float) -> float:
        """Average fraction of capacity used over duration_s."""
        return self.bytes_sent / (self._cap * duration_s) if duration_s > 0 else 0.0


def make_link(env: simpy.Environment, config: LinkConfig, rng: random.Random):
    """The path ``config`` describes: fair-shared, or first in first out."""
    return FifoLink(env, config) if config.fifo else FairShareLink(env, config, rng)
