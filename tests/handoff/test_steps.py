"""Every transition of one relayed request's handoff, without servers."""

from __future__ import annotations

import pytest

from sglang_pdd.handoff.steps import CHUNK, FINAL, HandoffStep, RelayedHandoff
from sglang_pdd.policy.handoff import HandoffPolicy, HandoffPolicyConfig


def _state(mode="one-shot", threshold=4, chunk=64, busy=0.5) -> RelayedHandoff:
    return RelayedHandoff(
        HandoffPolicy(
            HandoffPolicyConfig(
                mode=mode,
                catchup_threshold_tokens=threshold,
                catchup_chunk_tokens=chunk,
                auto_relay_busy_fraction=busy,
            )
        )
    )


def test_nothing_before_main_decode_is_ready():
    state = _state()
    state.relay_progress(30)
    assert state.next_step(0.0) is None and state.chunks == 0


def test_ready_before_the_first_id_waits_for_it_then_hands_one():
    state = _state()
    state.main_ready()
    assert state.next_step(0.0) is None  # MD needs an id it has not been handed
    state.relay_progress(1)
    assert state.next_step(0.0) == HandoffStep(FINAL, 1)
    assert (state.final_pending, state.handed, state.chunks, state.mode) == (True, 1, 1, "one-shot")
    state.final_taken()
    assert state.done and not state.final_pending


def test_one_shot_hands_everything_once_then_nothing_more():
    state = _state()
    state.relay_progress(37)
    state.main_ready()
    assert state.next_step(0.0) == HandoffStep(FINAL, 37)
    state.relay_progress(40)  # RLD's ids while MD answers are held back, never sent
    assert state.next_step(0.0) is None
    state.final_taken()
    state.relay_progress(45)
    assert state.next_step(0.0) is None


def test_catch_up_sends_chunks_keeping_the_newest_id_back_then_the_rest():
    state = _state("catch-up")
    state.relay_progress(150)
    state.main_ready()
    assert state.next_step(0.0) == HandoffStep(CHUNK, 64)
    state.relay_progress(160)
    assert state.next_step(0.0) is None  # the chunk's extend is pending
    state.chunk_extended()
    assert state.next_step(0.0) == HandoffStep(CHUNK, 128)
    state.chunk_extended()
    # 32 behind: a chunk of 31, never all 32 (the final handoff needs a new id).
    assert state.next_step(0.0) == HandoffStep(CHUNK, 159)
    state.chunk_extended()
    assert state.next_step(0.0) == HandoffStep(FINAL, 160)
    assert (state.chunks, state.mode) == (4, "catch-up")


def test_catch_up_with_a_small_backlog_is_one_final_step():
    state = _state("catch-up")
    state.relay_progress(3)
    state.main_ready()
    assert state.next_step(0.0) == HandoffStep(FINAL, 3)


def test_catch_up_never_sends_an_empty_chunk():
    state = _state("catch-up", threshold=1, chunk=64)
    state.relay_progress(2)
    state.main_ready()
    # backlog 2 > threshold 1, but a chunk would have to keep 1 back: chunk 1, then final.
    assert state.next_step(0.0) == HandoffStep(CHUNK, 1)
    state.chunk_extended()
    assert state.next_step(0.0) == HandoffStep(FINAL, 2)


def test_auto_mode_is_fixed_by_relay_load_at_the_first_step():
    busy = _state("auto")
    busy.relay_progress(100)
    busy.main_ready()
    assert busy.next_step(0.9) == HandoffStep(FINAL, 100) and busy.mode == "one-shot"
    idle = _state("auto")
    idle.relay_progress(100)
    idle.main_ready()
    assert idle.next_step(0.1) == HandoffStep(CHUNK, 64) and idle.mode == "catch-up"
    idle.chunk_extended()
    # RLD got busy: the rest goes in one piece, the recorded mode stays the first one.
    assert idle.next_step(0.9) == HandoffStep(FINAL, 100) and idle.mode == "catch-up"


def test_a_stream_that_goes_back_is_refused():
    state = _state()
    state.relay_progress(5)
    with pytest.raises(ValueError, match="went back"):
        state.relay_progress(4)


def test_a_deferred_final_handoff_is_made_again_after_retry_s_with_the_newer_ids():
    state = _state()
    state.retry_s = 0.5
    state.relay_progress(37)
    state.main_ready()
    assert state.next_step(0.0, now=10.0) == HandoffStep(FINAL, 37)
    state.relay_progress(39)
    state.final_deferred(now=10.2)  # MD had no room: the held ids went to the client
    assert (state.handed, state.deferrals, state.final_pending) == (0, 1, False)
    state.relay_progress(41)
    assert state.next_step(0.0, now=10.5) is None  # not before retry_s has passed
    assert state.next_step(0.0, now=10.7) == HandoffStep(FINAL, 41)
    state.final_taken()
    assert state.done and state.chunks == 2


def test_after_catch_up_chunks_a_deferral_keeps_what_md_extended():
    state = _state(mode="catch-up", threshold=4, chunk=64)
    state.relay_progress(100)
    state.main_ready()
    assert state.next_step(0.0) == HandoffStep(CHUNK, 64)
    state.chunk_extended()
    assert state.next_step(0.0) == HandoffStep(CHUNK, 99)
    state.chunk_extended()
    assert state.next_step(0.0) == HandoffStep(FINAL, 100)
    state.final_deferred(now=0.0)
    assert state.handed == 99  # the chunks' KV is on MD; only the rest goes again
    state.relay_progress(300)
    # After a deferral only final handoffs are made (a chunk would need the same room).
    assert state.next_step(0.0, now=1.0) == HandoffStep(FINAL, 300)


def test_a_refusal_keeps_the_request_on_relay_decode():
    state = _state(mode="catch-up")
    state.relay_progress(100)
    state.main_ready()
    assert state.next_step(0.0).kind == CHUNK
    state.main_refused()
    state.relay_progress(200)
    assert state.next_step(0.0, now=100.0) is None and state.refused and not state.done


def test_a_rewatch_derives_a_lost_extended_and_resends_a_lost_chunk():
    state = _state("catch-up")
    state.relay_progress(200)
    state.main_ready()
    assert state.next_step(0.0) == HandoffStep(CHUNK, 64)
    # The connection was redialed; MD's ready says it extended the chunk (the event was lost).
    assert state.main_rewatched(64) is False
    assert state.next_step(0.0) == HandoffStep(CHUNK, 128)
    # Redialed again: MD holds only the first chunk's KV, so the second chunk was lost.
    assert state.main_rewatched(64) is False
    assert (state.handed, state.chunk_in_flight) == (64, False)
    assert state.next_step(0.0) == HandoffStep(CHUNK, 128)  # made again


def test_a_final_handoff_lost_in_a_reconnect_is_made_again_with_the_held_ids():
    state = _state()
    state.relay_progress(37)
    state.main_ready()
    assert state.next_step(0.0) == HandoffStep(FINAL, 37)
    state.relay_progress(41)  # held back while MD answers
    assert state.main_rewatched(0) is True  # still parked, nothing extended: it was lost
    assert (state.final_pending, state.handed, state.deferrals) == (False, 0, 0)
    assert state.next_step(0.0) == HandoffStep(FINAL, 41)  # at once, not after retry_s
    state.final_taken()
    assert state.done


def test_a_rewatch_with_nothing_in_flight_changes_nothing():
    state = _state()
    state.relay_progress(10)
    state.main_ready()
    assert state.main_rewatched(0) is False
    assert state.next_step(0.0) == HandoffStep(FINAL, 10)


def test_relay_lost_with_main_ready_hands_every_id_at_once_after_a_chunk_in_flight():
    state = _state("catch-up", threshold=4, chunk=1)  # chunks of 1: Catch-Up would never end
    state.relay_progress(50)
    state.main_ready()
    assert state.next_step(0.0) == HandoffStep(CHUNK, 1)
    state.relay_progress(60)
    state.relay_lost()
    assert state.next_step(0.0) is None  # the chunk in flight is answered first
    state.chunk_extended()
    assert state.next_step(0.0) == HandoffStep(FINAL, 60)  # whatever the policy says
    state.final_taken()
    assert state.done and state.mode == "catch-up"


def test_relay_lost_before_its_first_id_hands_md_an_empty_handoff():
    state = _state()
    state.main_ready()
    state.relay_lost()
    # MD continues from P's first token, as plain PD would.
    assert state.next_step(0.0) == HandoffStep(FINAL, 0)
    assert state.mode == "one-shot" and state.final_pending
