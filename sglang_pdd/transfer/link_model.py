"""``LiveLinkModel``: what the P->MD path is doing now, learned from the transfers that crossed it.

The pipeline policy needs "when would MD have this request's KV if it were sent now". A fixed
bandwidth and RTT (the old flags) assume an empty link; under load the answer is dominated by
the bytes already queued ahead. This model keeps, per Main-Decode:

* the transfers in flight (dispatched, KV not yet landed) and their bytes: the queue ahead;
* a fit of observed transfer times ``d ~ overhead + (bytes ahead + bytes) / throughput`` over
  recent transfers (exponentially forgotten), seeded with the operator's prior so that the first
  decisions are sane before anything was observed. The throughput is a least-squares slope; the
  overhead is the smallest residual of the recent transfers: the link's fixed cost. A transfer
  that also waited elsewhere (its room on P queued behind other prompts' prefills) took longer
  than the link alone; a mean would carry that wait into every later estimate, also when P is
  idle, and make every prompt look slow to reach MD.

It is clock-agnostic (callers pass ``now``), so the router (wall clock) and the simulator
(simulated clock) use the same object.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from sglang_pdd.policy.pipeline import LinkEstimate

# Observations the overhead (the smallest recent residual) is taken over: enough that one
# transfer which waited elsewhere cannot set it, few enough to follow a changed path.
RECENT_OBSERVATIONS = 16


@dataclass(frozen=True)
class LinkModelConfig:
    """Prior and learning rate of a ``LiveLinkModel``.

    prior_bandwidth_bytes_per_s, prior_rtt_s: what is assumed before any transfer was observed
        (the router's ``--wan-bandwidth-mbps`` and ``--wan-rtt-ms``).
    forget: weight kept by the past at each new observation (0.9: roughly the last 10 transfers).
    prior_weight: observations (forgetting counted) needed before the fitted rate replaces the
        prior's; until then only the overhead is learned.
    """

    prior_bandwidth_bytes_per_s: float
    prior_rtt_s: float
    forget: float = 0.9
    prior_weight: float = 2.0

    def __post_init__(self) -> None:
        if not (
            math.isfinite(self.prior_bandwidth_bytes_per_s) and self.prior_bandwidth_bytes_per_s > 0
        ):
            raise ValueError("prior_bandwidth_bytes_per_s must be > 0")
        if not (math.isfinite(self.prior_rtt_s) and self.prior_rtt_s >= 0):
            raise ValueError("prior_rtt_s must be >= 0")
        if not 0 < self.forget < 1:
            raise ValueError(f"forget must be in (0, 1), got {self.forget!r}")
        if not self.prior_weight > 0:
            raise ValueError(f"prior_weight must be > 0, got {self.prior_weight!r}")


@dataclass
class _InFlight:
    nbytes: float
    started: float
    ahead: float  # bytes queued ahead of it when it started
    predicted_s: float


@dataclass(frozen=True)
class LinkObservation:
    """One landed transfer: how long it took and what the model had predicted."""

    key: object
    nbytes: float
    took_s: float
    predicted_s: float

    @property
    def error_s(self) -> float:
        return self.took_s - self.predicted_s


class LiveLinkModel:
    """Queue and throughput of one WAN path, from the transfers the router started on it."""

    def __init__(self, config: LinkModelConfig) -> None:
        self.config = config
        self._inflight: dict[object, _InFlight] = {}
        # Exponentially forgotten sums of (x = bytes through the bottleneck, y = seconds).
        self._sw = self._sx = self._sy = self._sxx = self._sxy = 0.0
        self._prior_slope = 1.0 / config.prior_bandwidth_bytes_per_s
        # The last observations' (bytes through the bottleneck, seconds), for the overhead.
        self._recent: deque[tuple[float, float]] = deque(maxlen=RECENT_OBSERVATIONS)
        self.observations = 0
        # Bytes others put on this path that this model did not start (another router's, as a
        # shared transfer ledger reports them); None: this model sees every transfer.
        self.others_bytes: Callable[[], float] | None = None
        # The bytes Prefill measures in hand for the WAN now (the shared ledger's word, None
        # when it has none fresh): a floor under the queue the routers' accounting gives.
        self.measured_bytes: Callable[[], float | None] | None = None

    # -- state ----------------------------------------------------------------------------
    @property
    def queued_bytes(self) -> float:
        """Bytes dispatched on this path whose KV has not landed yet (this model's and other
        routers' claims), and never less than what Prefill measures it has in hand for the
        WAN: those bytes are on the link whatever the routers believe."""
        others = self.others_bytes() if self.others_bytes is not None else 0.0
        claimed = sum(t.nbytes for t in self._inflight.values()) + others
        measured = self.measured_bytes() if self.measured_bytes is not None else None
        return claimed if measured is None else max(claimed, measured)

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def _fit(self) -> tuple[float, float]:
        """(overhead seconds, seconds per byte): the prior until transfers of a few different
        sizes were seen, then a weighted least-squares fit of the recent ones, refitted on
        those at or below its median residual; the overhead is the smallest residual."""
        if self._sw == 0:
            return self.config.prior_rtt_s, self._prior_slope
        mean_x, mean_y = self._sx / self._sw, self._sy / self._sw
        var_x = self._sxx / self._sw - mean_x * mean_x
        if self._sw < self.config.prior_weight or var_x <= 1e-6 * max(mean_x * mean_x, 1.0):
            slope = self._prior_slope  # too little spread in sizes to tell rate from overhead
        else:
            slope = (self._sxy / self._sw - mean_x * mean_y) / var_x
            slope = _lower_half_slope(self._recent, slope)
        # A link is never faster than 20x or slower than 1/20 of the prior: keeps odd samples
        # (a transfer stuck behind a slow prefill) from wrecking the estimate.
        slope = min(max(slope, self._prior_slope / 20), self._prior_slope * 20)
        overhead = max(min(y - slope * x for x, y in self._recent), 0.0)
        return overhead, slope

    @property
    def throughput_bytes_per_s(self) -> float:
        return 1.0 / self._fit()[1]

    @property
    def overhead_s(self) -> float:
        """Fixed part of a transfer: RTT, handshakes, scheduling on both ends."""
        return self._fit()[0]

    def estimate(self) -> LinkEstimate:
        """The path as the pipeline policy sees it now (live throughput, bytes queued ahead)."""
        overhead, slope = self._fit()
        return LinkEstimate(1.0 / slope, overhead, self.queued_bytes)

    def predict_s(self, nbytes: float) -> float:
        """Seconds until ``nbytes`` dispatched now would have landed."""
        return self.estimate().transfer_time_s(nbytes)

    # -- events ---------------------------------------------------------------------------
    def start(self, key: object, nbytes: float, now: float) -> float:
        """A transfer of ``nbytes`` was dispatched at ``now``; returns its predicted duration."""
        if key in self._inflight:
            raise ValueError(f"transfer {key!r} already started")
        predicted = self.predict_s(nbytes)
        self._inflight[key] = _InFlight(float(nbytes), now, self.queued_bytes, predicted)
        return predicted

    def resize(self, key: object, nbytes: float) -> None:
        """Correct the size of an in-flight transfer (e.g. once MD reported its real cache hit)."""
        if key in self._inflight:
            self._inflight[key].nbytes = float(nbytes)

    def restart(self, key: object, now: float) -> None:
        """The transfer really begins now (e.g. P finished the prefill it was queued behind)."""
        if key in self._inflight:
            self._inflight[key].started = now

    def finish(
        self, key: object, now: float, nbytes: float | None = None, learn: bool = True
    ) -> LinkObservation | None:
        """The transfer's KV landed at ``now`` (``nbytes``: what really crossed, if known).

        ``learn``: False for transfers whose duration includes more than the link (e.g. a
        prefill that ran after dispatch): they leave the queue but teach the fit nothing."""
        t = self._inflight.pop(key, None)
        if t is None:
            return None
        if nbytes is not None:
            t.nbytes = float(nbytes)
        took = max(now - t.started, 0.0)
        if not learn:
            return LinkObservation(key, t.nbytes, took, t.predicted_s)
        x, y = t.ahead + t.nbytes, took
        f = self.config.forget
        self._sw = f * self._sw + 1.0
        self._sx = f * self._sx + x
        self._sy = f * self._sy + y
        self._sxx = f * self._sxx + x * x
        self._sxy = f * self._sxy + x * y
        self._recent.append((x, y))
        self.observations += 1
        return LinkObservation(key, t.nbytes, took, t.predicted_s)

    def cancel(self, key: object) -> None:
        """Forget a transfer that will never land (its request failed); nothing is learned."""
        self._inflight.pop(key, None)


def _lower_half_slope(points, slope: float) -> float:
    """The least-squares slope of the ``points`` at or below the median residual of ``slope``'s
    line: transfers that also waited elsewhere lie above it and would tilt the rate
    (``slope`` itself when the lower half has too little spread in sizes)."""
    residuals = sorted(y - slope * x for x, y in points)
    median = residuals[(len(residuals) - 1) // 2]
    low = [(x, y) for x, y in points if y - slope * x <= median]
    n = len(low)
    mean_x = sum(x for x, _ in low) / n
    mean_y = sum(y for _, y in low) / n
    var_x = sum((x - mean_x) ** 2 for x, _ in low) / n
    if n < 2 or var_x <= 1e-6 * max(mean_x * mean_x, 1.0):
        return slope
    return sum((x - mean_x) * (y - mean_y) for x, y in low) / n / var_x
