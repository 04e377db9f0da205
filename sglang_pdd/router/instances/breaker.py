"""``Breaker``: one instance's circuit breaker (closed, open, half-open), pure state and time.

The semantics of SGLang's gateway (smg's ``--cb-*`` flags), tuned for PDD:

* **closed**: in rotation. ``failure_threshold`` failures within ``window_s`` of each other, with
  no request served in between, open it.
* **open**: out of rotation for ``open_s``; after that the router probes its ``/health``, and
  an answer of 200 makes it half-open.
* **half-open**: back in rotation, on trial. ``success_threshold`` requests served close it; one
  failure opens it again, for twice as long as the last time (at most ``max_open_s``), so an
  instance whose ``/health`` answers but whose requests fail is tried less and less often.

PDD's default threshold is 1, not smg's 10: smg retries a failed request on another worker
before the client sees it, whereas here every failure costs the client a migration (greedy
requests) or an error (the others), so one is enough to stop sending new requests there.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_pdd.options import option

CLOSED, HALF_OPEN, OPEN = "closed", "half_open", "open"
# The gauge's value for each state (sglang_pdd:instance_breaker_state).
STATE_VALUES = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}


@dataclass(frozen=True)
class BreakerConfig:
    """When an instance's breaker opens and closes (the router's ``--cb-*`` flags)."""

    failure_threshold: int = option(
        1,
        "failures (a broken or silent stream, a refused connection) within --cb-window-s that "
        "take an instance out of rotation (smg's flag of the same name; its default is 10)",
        flag="--cb-failure-threshold",
    )
    success_threshold: int = option(
        2,
        "requests a half-open instance (back in rotation after its /health answered) must "
        "serve before its breaker closes; one failure before that opens it again",
        flag="--cb-success-threshold",
    )
    open_s: float = option(
        1.0,
        "an open breaker keeps its instance out at least this long before /health is probed; "
        "it doubles each time a half-open instance fails again",
        flag="--cb-open-s",
    )
    max_open_s: float = option(
        60.0, "the longest an open breaker waits before probing again", flag="--cb-max-open-s"
    )
    window_s: float = option(
        120.0,
        "failures further apart than this do not add up toward --cb-failure-threshold",
        flag="--cb-window-s",
    )

    def __post_init__(self) -> None:
        for flag, value in (
            ("--cb-failure-threshold", self.failure_threshold),
            ("--cb-success-threshold", self.success_threshold),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{flag} must be an integer >= 1, got {value!r}")
        for flag, value in (
            ("--cb-open-s", self.open_s),
            ("--cb-max-open-s", self.max_open_s),
            ("--cb-window-s", self.window_s),
        ):
            if not value > 0:
                raise ValueError(f"{flag} must be > 0 seconds, got {value}")
        if self.max_open_s < self.open_s:
            raise ValueError(
                f"--cb-max-open-s ({self.max_open_s}) must be >= --cb-open-s ({self.open_s})"
            )


class Breaker:
    """One instance's breaker. Every method takes the time (monotonic seconds) it happens at
    and returns the state it leaves the breaker in; nothing here reads a clock."""

    def __init__(self, config: BreakerConfig) -> None:
        self.config = config
        self.state = CLOSED
        self.failures = 0  # consecutive failures counted toward the threshold (closed)
        self.last_failure = float("-inf")
        self.successes = 0  # requests served while half-open
        self.opened_at = 0.0
        self.open_for = config.open_s

    def failed(self, now: float) -> str:
        """A request failed on this instance."""
        if self.state == HALF_OPEN:
            self._open(now, min(self.open_for * 2, self.config.max_open_s))
        elif self.state == CLOSED:
            if now - self.last_failure > self.config.window_s:
                self.failures = 0
            self.failures += 1
            self.last_failure = now
            if self.failures >= self.config.failure_threshold:
                self._open(now, self.config.open_s)
        return self.state  # open: a request already under way failed too; nothing changes

    def succeeded(self, now: float) -> str:
        """A request this instance served finished."""
        if self.state == CLOSED:
            self.failures = 0
        elif self.state == HALF_OPEN:
            self.successes += 1
            if self.successes >= self.config.success_threshold:
                self.state, self.failures = CLOSED, 0
                self.open_for = self.config.open_s
        return self.state

    def may_probe(self, now: float) -> bool:
        """Open long enough that its ``/health`` should be asked."""
        return self.state == OPEN and now - self.opened_at >= self.open_for

    def probe_answered(self, now: float) -> str:
        """Its ``/health`` answered 200 after the open time: back in rotation, on trial."""
        if self.may_probe(now):
            self.state, self.successes = HALF_OPEN, 0
        return self.state

    def _open(self, now: float, open_for: float) -> None:
        self.state, self.opened_at, self.open_for = OPEN, now, open_for
        self.failures = self.successes = 0
