"""Which waiting handoffs a batch takes: memory, validity, one Catch-Up chunk per batch."""

from __future__ import annotations

from types import SimpleNamespace

from sglang_pdd.main_decode.extend import HandoffAdmission, KvBudget
from sglang_pdd.main_decode.parked import HandoffDeferred
from sglang_pdd.request_record import RequestRecord


def _req(rid: str, extended: int = 0, output_ids=(7,)):
    record = RequestRecord(extended_ids=extended)
    return SimpleNamespace(rid=rid, _pdd=record, output_ids=list(output_ids))


def test_handoffs_are_taken_while_the_budget_lasts_then_deferred_or_wait():
    admit = HandoffAdmission(KvBudget(free=100, total=1000))
    assert admit(_req("a"), [7] * 40, True) is True  # 42 slots with slack
    assert admit(_req("b"), [7] * 40, True) is True  # 84
    # A final handoff that would need 126: sent back to the router, which retries later.
    deferred = admit(_req("c"), [7] * 40, True)
    assert isinstance(deferred, HandoffDeferred) and "40 handed-off ids" in deferred.reason
    assert admit(_req("e"), [7] * 40, False) is False  # a Catch-Up chunk waits here instead
    assert admit.short_of_kv == ["c", "e"]
    assert admit(_req("d"), [7] * 10, True) is True  # a smaller one still fits


def test_pages_round_the_need_up():
    budget = KvBudget(free=64, total=1000, page=16)
    assert budget.slots(1) == 32 and budget.slots(16) == 48
    assert budget.take(20) and not budget.take(20)


def test_one_catch_up_chunk_per_batch_and_finals_beside_it():
    admit = HandoffAdmission(KvBudget(free=10_000, total=10_000))
    assert admit(_req("a"), [7] * 64, False) is True
    assert admit(_req("b"), [7] * 64, False) is False  # next batch
    assert admit(_req("c"), [7] * 5, True) is True


def test_what_can_never_run_is_refused_with_the_reason():
    admit = HandoffAdmission(KvBudget(free=10_000, total=100))
    assert "more KV than the pool holds" in admit(_req("a"), [7] * 200, True)
    # No new id past what earlier chunks extended, or a prefix that changed.
    assert "after 64 extended" in admit(_req("b", extended=64), [7] * 64, True)
    changed = _req("c", extended=3, output_ids=[7, 8, 9])
    assert "after 3 extended" in admit(changed, [7, 8, 1, 4], True)
    assert admit(_req("d", extended=3, output_ids=[7, 8, 9]), [7, 8, 9, 4], True) is True


def test_an_empty_handoff_passes_through():
    admit = HandoffAdmission(KvBudget(free=0, total=10))
    assert admit(_req("a"), [], True) is True


def test_a_chunk_sent_again_after_a_reconnect_is_acknowledged_not_refused():
    from sglang_pdd.main_decode.extend import ALREADY_EXTENDED

    admit = HandoffAdmission(KvBudget(free=10_000, total=10_000))
    extended = _req("a", extended=3, output_ids=[7, 8, 9])
    assert admit(extended, [7, 8, 9], False) is ALREADY_EXTENDED
    assert admit.taken == 0 and admit.chunks == 0  # nothing to run
    # The same ids as a final handoff, or other ids, are still refused.
    assert isinstance(admit(extended, [7, 8, 9], True), str)
    assert isinstance(admit(extended, [7, 5, 9], False), str)
