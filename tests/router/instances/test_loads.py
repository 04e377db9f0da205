"""Reading SGLang's /v1/loads: a decode server's busy fraction, a Prefill's queued seconds."""

import pytest

from sglang_pdd.router.instances.loads import PrefillBacklog, decode_busy_fraction


def loads(**fields) -> dict:
    return {"loads": [fields]}


def test_a_decode_servers_busy_fraction_is_the_busier_of_kv_and_slots():
    busy = loads(num_running_reqs=3, max_running_requests=4, token_usage=0.2)
    assert decode_busy_fraction(busy) == 0.75
    full_kv = loads(num_running_reqs=1, max_running_requests=4, token_usage=0.9)
    assert decode_busy_fraction(full_kv) == 0.9


def prefill(tokens: int, busy_us: int, waiting: int) -> dict:
    return loads(
        total_prefill_uncached_tokens=tokens,
        total_prefill_busy_us=busy_us,
        num_waiting_uncached_tokens=waiting,
    )


def test_a_prefills_backlog_is_its_waiting_tokens_over_its_measured_rate():
    backlog = PrefillBacklog()
    backlog.note(prefill(0, 0, 4000), 0.0)
    assert backlog.seconds == 0.0  # no rate measured yet: nothing to divide by
    backlog.note(prefill(2000, 1_000_000, 4000), 0.5)  # 2,000 tokens in 1 busy second
    assert backlog.seconds == pytest.approx(2.0)
    backlog.note(prefill(2000, 1_000_000, 0), 1.0)  # idle between looks: the rate stands
    assert backlog.seconds == 0.0 and backlog.rate.value == pytest.approx(2000)


def test_a_restarted_prefills_counters_teach_nothing():
    backlog = PrefillBacklog()
    backlog.note(prefill(5000, 2_000_000, 0), 0.0)
    backlog.note(prefill(10, 100, 1000), 0.5)  # counters went back: a new process
    assert backlog.rate.value is None and backlog.seconds == 0.0
    backlog.note(prefill(1010, 500_100, 1000), 1.0)  # 1,000 tokens in half a second
    assert backlog.seconds == pytest.approx(0.5)


def _watched(waiting_by_time: dict[float, int]) -> PrefillBacklog:
    """A backlog looked at the given times, P prefilling 1,000 tokens per busy second (a first
    look a quarter second before them gives the counters to measure that rate from)."""
    backlog = PrefillBacklog()
    backlog.note(prefill(0, 0, 0), min(waiting_by_time) - 0.25)
    busy_us = 0
    for when, waiting in sorted(waiting_by_time.items()):
        busy_us += 1_000_000
        backlog.note(prefill(busy_us // 1000, busy_us, waiting), when)
    return backlog


def test_a_standing_queue_is_the_least_backlog_over_the_window():
    backlog = _watched({0.0: 3000, 0.5: 2000, 1.0: 1500, 1.5: 2500, 2.0: 4000})
    assert backlog.seconds == pytest.approx(4.0)
    assert backlog.standing_seconds(0, now=2.0) == pytest.approx(4.0)  # the last look alone
    # Looks at 0.0 .. 2.0 (the one at the window's start held until the next one).
    assert backlog.standing_seconds(2.0, now=2.0) == pytest.approx(1.5)
    assert backlog.standing_seconds(0.6, now=2.0) == pytest.approx(1.5)  # 1.0 .. 2.0
    assert backlog.standing_seconds(0.5, now=2.0) == pytest.approx(2.5)  # 1.5 .. 2.0


def test_a_burst_is_not_a_standing_queue():
    burst = _watched({0.0: 0, 0.5: 0, 1.0: 0, 1.5: 0, 2.0: 6000})
    assert burst.seconds == pytest.approx(6.0)
    assert burst.standing_seconds(2.0, now=2.1) == 0.0


def test_a_queue_not_yet_watched_for_a_whole_window_is_not_standing():
    backlog = _watched({10.0: 3000, 10.5: 3000, 11.0: 3000})
    assert backlog.standing_seconds(2.0, now=11.0) == 0.0
    assert backlog.standing_seconds(0.6, now=11.0) == pytest.approx(3.0)
    assert PrefillBacklog().standing_seconds(2.0, now=5.0) == 0.0
