"""Reading SGLang's /v1/loads: a decode server's busy fraction, a Prefill's queued seconds."""

import pytest

from sglang_pdd.router.instance_loads import PrefillBacklog, decode_busy_fraction


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
    backlog.note(prefill(0, 0, 4000))
    assert backlog.seconds == 0.0  # no rate measured yet: nothing to divide by
    backlog.note(prefill(2000, 1_000_000, 4000))  # 2,000 tokens in 1 busy second
    assert backlog.seconds == pytest.approx(2.0)
    backlog.note(prefill(2000, 1_000_000, 0))  # idle between looks: the rate stands
    assert backlog.seconds == 0.0 and backlog.rate.value == pytest.approx(2000)


def test_a_restarted_prefills_counters_teach_nothing():
    backlog = PrefillBacklog()
    backlog.note(prefill(5000, 2_000_000, 0))
    backlog.note(prefill(10, 100, 1000))  # counters went back: a new process
    assert backlog.rate.value is None and backlog.seconds == 0.0
    backlog.note(prefill(1010, 500_100, 1000))  # 1,000 tokens in half a second
    assert backlog.seconds == pytest.approx(0.5)
