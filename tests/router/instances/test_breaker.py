"""The circuit breaker's transitions (pure: events and times in, states out)."""

from __future__ import annotations

import pytest

from sglang_pdd.router.instances.breaker import CLOSED, HALF_OPEN, OPEN, Breaker, BreakerConfig
from sglang_pdd.router.instances.health import InstanceHealth

CFG = BreakerConfig(
    failure_threshold=3, success_threshold=2, open_s=1.0, max_open_s=3.0, window_s=10.0
)


def _play(events, config=CFG):
    """Apply (time, event) pairs; the state after each."""
    breaker, states = Breaker(config), []
    for now, event in events:
        if event == "fail":
            states.append(breaker.failed(now))
        elif event == "ok":
            states.append(breaker.succeeded(now))
        elif event == "probe":  # /health answered 200
            states.append(breaker.probe_answered(now))
    return states


@pytest.mark.parametrize(
    "events, states",
    [
        # The threshold of failures opens it.
        ([(0, "fail"), (1, "fail"), (2, "fail")], [CLOSED, CLOSED, OPEN]),
        # A request served in between starts the count again.
        ([(0, "fail"), (1, "fail"), (2, "ok"), (3, "fail")], [CLOSED] * 4),
        # Failures further apart than the window do not add up.
        ([(0, "fail"), (5, "fail"), (16, "fail")], [CLOSED] * 3),
        # Open: /health answering before open_s has passed changes nothing; after, half-open.
        (
            [(0, "fail"), (0, "fail"), (0, "fail"), (0.5, "probe"), (1.0, "probe")],
            [CLOSED, CLOSED, OPEN, OPEN, HALF_OPEN],
        ),
        # Half-open: success_threshold requests served close it.
        (
            [(0, "fail"), (0, "fail"), (0, "fail"), (1, "probe"), (2, "ok"), (3, "ok")],
            [CLOSED, CLOSED, OPEN, HALF_OPEN, HALF_OPEN, CLOSED],
        ),
        # Half-open: one failure opens it again, for twice as long (2 s: not probed at 2.5).
        (
            [(0, "fail"), (0, "fail"), (0, "fail"), (1, "probe"), (1.5, "fail"), (2.5, "probe")]
            + [(3.5, "probe")],
            [CLOSED, CLOSED, OPEN, HALF_OPEN, OPEN, OPEN, HALF_OPEN],
        ),
        # A failure of a request already under way while open changes nothing.
        (
            [(0, "fail")] * 3 + [(0.2, "fail"), (1.0, "probe")],
            [CLOSED, CLOSED, OPEN, OPEN, HALF_OPEN],
        ),
    ],
)
def test_transitions(events, states):
    assert _play(events) == states


def test_the_open_time_doubles_up_to_its_cap_and_resets_once_closed():
    breaker = Breaker(CFG)
    for _ in range(3):
        breaker.failed(0)
    now, waits = 0.0, []
    for _ in range(4):  # half-open, then fails again: 1, 2, 3 (capped), 3
        waits.append(breaker.open_for)
        now += breaker.open_for
        assert breaker.probe_answered(now) == HALF_OPEN
        breaker.failed(now)
    assert waits == [1.0, 2.0, 3.0, 3.0]
    now += breaker.open_for
    breaker.probe_answered(now)
    breaker.succeeded(now)
    assert breaker.succeeded(now) == CLOSED and breaker.open_for == 1.0


def test_the_default_takes_an_instance_out_on_its_first_failure():
    health = InstanceHealth()
    health.mark_down("http://a:1")
    assert health.out_of_rotation() == {"http://a:1"}
    assert health.breaker_state("http://a:1") == OPEN
    assert health.breaker_state("http://b:1") == CLOSED  # never failed


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"failure_threshold": 0}, "--cb-failure-threshold"),
        ({"success_threshold": 1.5}, "--cb-success-threshold"),
        ({"open_s": 0}, "--cb-open-s"),
        ({"window_s": -1}, "--cb-window-s"),
        ({"open_s": 5.0, "max_open_s": 2.0}, "--cb-max-open-s"),
    ],
)
def test_bad_values_name_the_flag(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        BreakerConfig(**kwargs)
