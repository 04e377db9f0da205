"""``HandoffCore``, table-driven: a sequence of inputs in, the actions each returns out.

Each case is a list of ``(input, expected actions)`` steps fed to one core in order. The cases
cover One-Shot, Catch-Up, deferral, refusal, a final handoff lost in a control reconnect, RLD
failing (MD ready or not, P failed or not), MD failing, and the request finishing on RLD.
"""

from __future__ import annotations

import pytest

from sglang_pdd.handoff.core import HandoffCore
from sglang_pdd.handoff.signals import (
    AbandonMain,
    EmitRelayIds,
    Fail,
    FinishOnRelay,
    FollowMain,
    KeepOnRelay,
    MainChunk,
    MainLost,
    NoteReady,
    RelayChunk,
    RelayEnded,
    ResendLostHandoff,
    RetryLater,
    SendToMain,
    StayOnRelay,
    TakeOverFromLostRelay,
    Tick,
)
from sglang_pdd.policy.handoff import HandoffPolicy, HandoffPolicyConfig
from sglang_pdd.router.upstream.chunks import ChunkMeta, GenerateChunk
from sglang_pdd.wire.messages import Deferred, Error, Extended, Ready

RID = "r.pdd-relayed"
READY = Ready(rid=RID, t=1.0, prompt_tokens=10, received_tokens=10, kv_bytes=100)
RLD_DOWN = ConnectionError("relay stream ended")
P_DOWN = RuntimeError("prefill failed: bad prompt")
STOP = {"type": "length", "length": 5}


def ids(n: int, start: int = 0) -> list[int]:
    return list(range(100 + start, 100 + n))


def _chunk(output_ids: list[int]) -> GenerateChunk:
    return GenerateChunk(output_ids, ChunkMeta(id="r", finish_reason=None))


def relay(n: int, finish=None) -> RelayChunk:
    return RelayChunk(ids(n), {"n": n}, finish)


def emit(upto: int, since: int = 0) -> EmitRelayIds:
    return EmitRelayIds(ids(upto, since), {"n": upto}, first=since == 0)


def tick(now: float = 0.0, load: float = 0.0) -> Tick:
    return Tick(now, load)


def final(n: int, mode="one-shot", chunks=1) -> SendToMain:
    return SendToMain(ids(n), True, mode, chunks)


def chunk(n: int, chunks: int) -> SendToMain:
    return SendToMain(ids(n), False, "catch-up", chunks)


ONE_SHOT = [
    (relay(1), [emit(1)]),
    (tick(), []),  # MD not ready: nothing goes to MD
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3, 1)]),
    (tick(), [final(3)]),
    (relay(5), []),  # held back while MD answers the final handoff
    (tick(), []),
    (Extended(rid=RID, tokens=3, final=True), [FollowMain(ids(3), [], dropped_ids=2)]),
    (relay(6), []),  # the request is MD's now: nothing more
]

ONE_SHOT_ANSWERED_BY_MAINS_STREAM = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (tick(), [final(2)]),
    (MainChunk(_chunk(ids(3))), [FollowMain(ids(2), [_chunk(ids(3))], 0)]),
    (Extended(rid=RID, tokens=2, final=True), []),
]

CATCH_UP = [
    (READY, [NoteReady(READY)]),
    (relay(10), [emit(10)]),
    (tick(), [chunk(4, 1)]),  # backlog 10 > threshold 4: a chunk of 4, RLD goes on
    (relay(12), [emit(12, 10)]),
    (tick(), []),  # one chunk in flight at a time
    (Extended(rid=RID, tokens=4, final=False), []),
    (tick(), [chunk(8, 2)]),  # backlog 8 > 4: another chunk
    (Extended(rid=RID, tokens=4, final=False), []),
    (relay(13), [emit(13, 12)]),
    (tick(), [chunk(12, 3)]),  # backlog 5 > 4: the chunk keeps the newest id back
    (Extended(rid=RID, tokens=4, final=False), []),
    (tick(), [SendToMain(ids(13), True, "catch-up", 4)]),  # backlog 1: the final switch
    (relay(14), []),
    (Extended(rid=RID, tokens=1, final=True), [FollowMain(ids(13), [], 1)]),
]

DEFERRAL = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (tick(0.0), [final(3)]),
    (relay(4), []),
    (relay(6), []),
    (Deferred(rid=RID, message="no room"), [RetryLater("no room", 1), emit(4, 3), emit(6, 4)]),
    (tick(1.0), []),  # the retry waits retry_s (0.5) from here
    (relay(7), [emit(7, 6)]),
    (tick(1.4), []),
    (tick(1.5), [final(7, chunks=2)]),
    (Extended(rid=RID, tokens=7, final=True), [FollowMain(ids(7), [], 0)]),
]

REFUSAL = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (tick(), [final(2)]),
    (relay(3), []),
    (Error(rid=RID, message="handoff refused: x"), [StayOnRelay("handoff refused: x"), emit(3, 2)]),
    (tick(), []),  # nothing more goes to MD
    (relay(5, STOP), [emit(5, 3), FinishOnRelay(STOP)]),
    (Extended(rid=RID, tokens=2, final=True), []),
]

FINAL_LOST_IN_A_RECONNECT = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (tick(), [final(2)]),
    (relay(4), []),
    (READY, [NoteReady(READY), ResendLostHandoff(), emit(4, 2)]),  # MD still parked
    (tick(), [final(4, chunks=2)]),
    (Extended(rid=RID, tokens=4, final=True), [FollowMain(ids(4), [], 0)]),
]

FINISH_ON_RELAY = [
    (relay(2), [emit(2)]),
    (relay(5, STOP), [emit(5, 2), FinishOnRelay(STOP)]),
    (READY, []),
    (tick(), []),
]

RELAY_FAILS_WITH_MAIN_READY = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (RelayEnded(RLD_DOWN), [TakeOverFromLostRelay(RLD_DOWN)]),
    (RelayEnded(RLD_DOWN), []),  # the dead stream's end after its failure
    (tick(), [final(2)]),
    (Extended(rid=RID, tokens=2, final=True), [FollowMain(ids(2), [], 0)]),
]

RELAY_FAILS_BEFORE_MAIN_IS_READY = [
    (relay(2), [emit(2)]),
    (RelayEnded(RLD_DOWN), [Fail(RLD_DOWN)]),  # the request migrates
    (READY, []),
]

PREFILL_FAILED = [
    (READY, [NoteReady(READY)]),
    (RelayEnded(RLD_DOWN, prefill_error=P_DOWN), [Fail(P_DOWN)]),  # P's error is the client's
]

RELAY_THEN_MAIN_FAIL = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (RelayEnded(RLD_DOWN), [TakeOverFromLostRelay(RLD_DOWN)]),
    (tick(), [final(2)]),
    (MainLost("Main-Decode's stream failed: ended"), [Fail(RLD_DOWN)]),
]

MAIN_STREAM_FAILS_WHILE_FINAL_PENDS = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (tick(), [final(2)]),
    (relay(3), []),
    (MainLost("stream failed"), [StayOnRelay("stream failed"), emit(3, 2)]),
    (MainLost("draining"), []),  # already staying on RLD
    (relay(4, STOP), [emit(4, 3), FinishOnRelay(STOP)]),
]

MAIN_DRAINING_BEFORE_HANDOFF = [
    (relay(2), [emit(2)]),
    (MainLost("http://md is draining"), [StayOnRelay("http://md is draining")]),
    (READY, [NoteReady(READY)]),
    (tick(), []),
    (relay(3, STOP), [emit(3, 2), FinishOnRelay(STOP)]),
]


# -- the overlapped switch: RLD streams on after the final handoff ----------------------------
def md(n: int, start_bad: int | None = None) -> MainChunk:
    """MD's cumulative ids up to ``n`` (the same as RLD's, unless one differs at ``start_bad``)."""
    out = ids(n)
    if start_bad is not None:
        out[start_bad] = 7
    return MainChunk(_chunk(out))


OVERLAP = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (tick(), [final(3)]),
    (relay(5), [emit(5, 3)]),  # not held: the client keeps getting RLD's ids
    (Extended(rid=RID, tokens=3, final=True), []),  # MD took it; the client stays on RLD
    (md(4), []),  # MD agrees, but is behind the client
    (relay(6), [emit(6, 5)]),
    (md(6), []),  # level: still nothing new from MD
    (md(7), [FollowMain(ids(6), [_chunk(ids(7))], 0)]),  # ahead: switch, no gap
    (relay(8), []),
]

OVERLAP_ANSWERED_BY_MAINS_STREAM = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (tick(), [final(2)]),
    (md(3), [FollowMain(ids(2), [_chunk(ids(3))], 0)]),
    (Extended(rid=RID, tokens=2, final=True), []),
]

OVERLAP_DISAGREES = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (tick(), [final(3)]),
    (relay(5), [emit(5, 3)]),
    (md(5, start_bad=4), [AbandonMain("MD's id 4 (7) differs from RLD's (104)")]),
    (md(6), []),  # MD is abandoned: its stream is no input any more
    (tick(), []),  # and nothing more goes to it
    (relay(6, STOP), [emit(6, 5), FinishOnRelay(STOP)]),
]

OVERLAP_RELAY_FINISHES_FIRST = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (tick(), [final(2)]),
    (Extended(rid=RID, tokens=2, final=True), []),
    (relay(3), [emit(3, 2)]),
    (md(3), []),  # level with the client
    (relay(4, STOP), [emit(4, 3), FinishOnRelay(STOP, main_running=True)]),  # MD's copy aborted
]

OVERLAP_DEFERRAL = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (tick(0.0), [final(2)]),
    (relay(3), [emit(3, 2)]),
    (Deferred(rid=RID, message="no room"), [RetryLater("no room", 1)]),  # nothing was held
    (tick(1.0), []),
    (tick(1.5), [final(3, chunks=2)]),
    (md(4), [FollowMain(ids(3), [_chunk(ids(4))], 0)]),
]

OVERLAP_RELAY_FAILS_AFTER_MD_TOOK_IT = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (tick(), [final(3)]),
    (relay(4), [emit(4, 3)]),
    (Extended(rid=RID, tokens=3, final=True), []),
    (RelayEnded(RLD_DOWN), [TakeOverFromLostRelay(RLD_DOWN), FollowMain(ids(4), [], 0)]),
]

OVERLAP_RELAY_FAILS_WHILE_FINAL_PENDS = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (tick(), [final(3)]),
    (RelayEnded(RLD_DOWN), []),  # held: MD's answer decides
    (
        Extended(rid=RID, tokens=3, final=True),
        [TakeOverFromLostRelay(RLD_DOWN), FollowMain(ids(3), [], 0)],
    ),
]

OVERLAP_MAIN_FAILS_AFTER_TAKING_IT = [
    (READY, [NoteReady(READY)]),
    (relay(2), [emit(2)]),
    (tick(), [final(2)]),
    (Extended(rid=RID, tokens=2, final=True), []),
    (
        MainLost("Main-Decode's stream failed: ended"),
        [AbandonMain("Main-Decode's stream failed: ended")],
    ),
    (relay(3, STOP), [emit(3, 2), FinishOnRelay(STOP)]),
]


def gap_tick(now: float, gap: float = 0.3) -> Tick:
    return Tick(now, 0.0, None, gap)


OVERLAP_MD_BEHIND = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (gap_tick(0.0), [final(3)]),
    (relay(6), [emit(6, 3)]),
    (gap_tick(0.1), []),  # MD has sent nothing yet: no clock
    (md(4), []),  # MD's first ids: behind the client
    (gap_tick(0.2), []),  # its clock starts: switch by 0.5 at the latest
    (relay(8), [emit(8, 6)]),
    (md(5), []),
    (gap_tick(0.49), []),
    (gap_tick(0.5), []),  # MD has not caught up: RLD's ids are held from now
    (relay(9), []),
    (md(8), []),  # level with the client
    (md(10), [FollowMain(ids(8), [_chunk(ids(10))], 1)]),  # ahead: RLD's 9th dropped
]

OVERLAP_MD_BEHIND_THEN_DISAGREES = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (gap_tick(0.0), [final(3)]),
    (relay(6), [emit(6, 3)]),
    (md(4), []),
    (gap_tick(0.2), []),
    (gap_tick(0.5), []),  # holding
    (relay(7), []),
    (md(6, start_bad=5), [AbandonMain("MD's id 5 (7) differs from RLD's (105)"), emit(7, 6)]),
    (relay(8, STOP), [emit(8, 7), FinishOnRelay(STOP)]),
]


def paced_tick(now: float, relay_itl_s: float = 0.01, gap: float = 1.0) -> Tick:
    return Tick(now, 0.0, relay_itl_s, gap)


OVERLAP_MD_SLOWER_THAN_RLD = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (paced_tick(0.0), [final(3)]),
    (relay(6), [emit(6, 3)]),
    (md(4), []),
    (paced_tick(0.10), []),  # MD's first ids: its clock starts (hold by 1.1 at the latest)
    (md(5), []),
    (paced_tick(0.20), []),
    (relay(8), [emit(8, 6)]),
    (md(6), []),
    # 2 ids in 0.2 s: 10 per second, RLD 100 (one each 0.01 s): MD never catches up. RLD's
    # ids are held now, not at 1.1 s (each id RLD streams until then MD would have to remake).
    (paced_tick(0.30), []),
    (relay(9), []),
    (md(9), [FollowMain(ids(8), [_chunk(ids(9))], 1)]),
]

OVERLAP_MD_FASTER_THAN_RLD = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (paced_tick(0.0, relay_itl_s=0.1), [final(3)]),
    (relay(8), [emit(8, 3)]),
    (md(4), []),
    (paced_tick(0.10, relay_itl_s=0.1), []),
    (md(5), []),
    (paced_tick(0.15, relay_itl_s=0.1), []),
    (md(7), []),
    # 30 ids per second against RLD's 10: 1 behind closes in 0.05 s: RLD streams on.
    (paced_tick(0.20, relay_itl_s=0.1), []),
    (relay(9), [emit(9, 8)]),
    (md(10), [FollowMain(ids(9), [_chunk(ids(10))], 0)]),  # caught up: no gap at all
]

OVERLAP_MD_CATCHING_UP_TOO_SLOWLY = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (paced_tick(0.0, relay_itl_s=0.1, gap=0.3), [final(3)]),
    (relay(30), [emit(30, 3)]),  # RLD far ahead (MD's answer was slow)
    (md(4), []),
    (paced_tick(0.10, relay_itl_s=0.1, gap=0.3), []),
    (md(5), []),
    (paced_tick(0.15, relay_itl_s=0.1, gap=0.3), []),
    (md(6), []),
    # 20 ids per second against RLD's 10: 24 behind closes in 2.4 s, after the 0.4 s bound.
    (paced_tick(0.20, relay_itl_s=0.1, gap=0.3), []),
    (relay(31), []),
]

OVERLAP_MD_KNOWN_TO_BE_NO_FASTER = [
    (READY, [NoteReady(READY)]),
    (relay(3), [emit(3)]),
    (Tick(0.0, 0.0, 0.02, 1.0, 0.025), [final(3)]),
    (relay(6), [emit(6, 3)]),
    (md(4), []),
    # The router has seen MD make an id each 25 ms, RLD makes one each 20: held at MD's
    # first ids, with no wait for a pace of this request's own.
    (Tick(0.05, 0.0, 0.02, 1.0, 0.025), []),
    (relay(7), []),
    (md(7), [FollowMain(ids(6), [_chunk(ids(7))], 1)]),
]

OVERLAP_CASES = {
    "overlap: MD slower than RLD, held at once": OVERLAP_MD_SLOWER_THAN_RLD,
    "overlap: MD faster than RLD, followed with no gap": OVERLAP_MD_FASTER_THAN_RLD,
    "overlap: MD catching up after the bound, held": OVERLAP_MD_CATCHING_UP_TOO_SLOWLY,
    "overlap: MD known to be no faster, held at its first ids": OVERLAP_MD_KNOWN_TO_BE_NO_FASTER,
    "overlap: MD behind, held for after one handoff gap": OVERLAP_MD_BEHIND,
    "overlap: MD behind, then disagrees while RLD is held": OVERLAP_MD_BEHIND_THEN_DISAGREES,
    "overlap": OVERLAP,
    "overlap answered by MD's stream": OVERLAP_ANSWERED_BY_MAINS_STREAM,
    "overlap: MD disagrees": OVERLAP_DISAGREES,
    "overlap: RLD finishes first": OVERLAP_RELAY_FINISHES_FIRST,
    "overlap: deferral": OVERLAP_DEFERRAL,
    "overlap: RLD fails after MD took it": OVERLAP_RELAY_FAILS_AFTER_MD_TOOK_IT,
    "overlap: RLD fails while the final handoff pends": OVERLAP_RELAY_FAILS_WHILE_FINAL_PENDS,
    "overlap: MD fails after taking it": OVERLAP_MAIN_FAILS_AFTER_TAKING_IT,
}


@pytest.mark.parametrize("steps", OVERLAP_CASES.values(), ids=OVERLAP_CASES.keys())
def test_overlapped_switch_inputs_in_actions_out(steps):
    core = HandoffCore(HandoffPolicy(), retry_s=0.5, overlap=True)
    for number, (signal, expected) in enumerate(steps):
        assert core.on(signal) == expected, f"step {number}: {signal}"


def test_overlap_reads_mds_stream_until_the_switch():
    core = HandoffCore(HandoffPolicy(), retry_s=0.5, overlap=True)
    core.on(READY)
    core.on(relay(2))
    assert not core.reads_main
    core.on(tick())
    assert core.reads_main and core.final_pending
    core.on(Extended(rid=RID, tokens=2, final=True))
    assert core.reads_main and core.switching and core.main_answer_due
    core.on(md(3))
    assert core.ended and not core.reads_main


@pytest.mark.parametrize(
    ("mode", "steps"),
    [
        ("one-shot", ONE_SHOT),
        ("one-shot", ONE_SHOT_ANSWERED_BY_MAINS_STREAM),
        ("catch-up", CATCH_UP),
        ("one-shot", DEFERRAL),
        ("one-shot", REFUSAL),
        ("one-shot", FINAL_LOST_IN_A_RECONNECT),
        ("one-shot", FINISH_ON_RELAY),
        ("catch-up", RELAY_FAILS_WITH_MAIN_READY),
        ("one-shot", RELAY_FAILS_BEFORE_MAIN_IS_READY),
        ("one-shot", PREFILL_FAILED),
        ("one-shot", RELAY_THEN_MAIN_FAIL),
        ("one-shot", MAIN_STREAM_FAILS_WHILE_FINAL_PENDS),
        ("one-shot", MAIN_DRAINING_BEFORE_HANDOFF),
    ],
    ids=[
        "one-shot",
        "one-shot answered by MD's stream",
        "catch-up",
        "deferral",
        "refusal",
        "final handoff lost in a reconnect",
        "finish on RLD",
        "RLD fails with MD ready",
        "RLD fails before MD is ready",
        "P failed",
        "RLD then MD fail",
        "MD's stream fails while the final handoff pends",
        "MD draining before any handoff",
    ],
)
def test_inputs_in_actions_out(mode, steps):
    policy = HandoffPolicy(
        HandoffPolicyConfig(mode=mode, catchup_threshold_tokens=4, catchup_chunk_tokens=4)
    )
    core = HandoffCore(policy, retry_s=0.5)
    for number, (signal, expected) in enumerate(steps):
        assert core.on(signal) == expected, f"step {number}: {signal}"


def test_the_main_stream_idle_limit_runs_only_while_md_owes_tokens():
    core = HandoffCore(HandoffPolicy(), retry_s=0.5)
    core.on(READY)
    core.on(relay(2))
    assert not core.main_answer_due
    core.on(tick())
    assert core.final_pending and core.main_answer_due
    core.on(Deferred(rid=RID, message="no room"))
    assert not core.main_answer_due  # parked again: MD's stream is silent by design
    core.on(tick(0.0))
    core.on(tick(1.0))
    assert core.on(Extended(rid=RID, tokens=2, final=True))
    assert core.main_answer_due and core.ended


def test_an_input_the_core_does_not_know_is_refused_loudly():
    with pytest.raises(TypeError, match="cannot take"):
        HandoffCore(HandoffPolicy()).on(object())


def _tail_core(max_new_tokens: int | None) -> HandoffCore:
    return HandoffCore(HandoffPolicy(), retry_s=0.5, max_new_tokens=max_new_tokens)


def test_a_request_rld_finishes_before_a_handoff_would_stays_on_rld():
    """The tail rule: 18 ids left at 10 ms each end before a 300 ms handoff gap would."""
    core = _tail_core(20)
    assert core.on(READY) == [NoteReady(READY)]
    assert core.on(relay(2)) == [emit(2)]
    [keep] = core.on(Tick(0.0, 0.0, relay_itl_s=0.01, handoff_gap_s=0.3))
    assert isinstance(keep, KeepOnRelay) and "18 remaining ids" in keep.reason
    assert core.on(tick()) == []  # nothing goes to MD afterwards
    assert core.on(relay(20, STOP)) == [emit(20, 2), FinishOnRelay(STOP)]


@pytest.mark.parametrize(
    ("max_new_tokens", "relay_itl_s", "handoff_gap_s"),
    [(100, 0.01, 0.3), (None, 0.01, 0.3), (20, None, 0.3), (20, 0.01, None)],
    ids=["remaining ids outlast the gap", "no budget", "no RLD pace yet", "no gap estimate"],
)
def test_otherwise_the_handoff_goes_ahead(max_new_tokens, relay_itl_s, handoff_gap_s):
    core = _tail_core(max_new_tokens)
    core.on(READY)
    core.on(relay(2))
    assert core.on(Tick(0.0, 0.0, relay_itl_s, handoff_gap_s)) == [final(2)]
