"""``ParkedRequests`` alone (no socket, no scheduler, a made-up clock): what each input returns
to execute, and that any sequence of control messages, arrivals, aborts, releases and handoffs
leaves its tables consistent with one another and ends empty once every request ends."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.main_decode.parked import HandoffDeferred, Notify, ParkedRequests, Refuse
from sglang_pdd.wire.messages import Error, Expire, Extended, Handoff, Ready, Release, Watch

A, B = b"router-a", b"router-b"
RID = "r.pdd-relayed"


def _req(rid: str, prompt: int = 10, cached: int = 4):
    return SimpleNamespace(rid=rid, origin_input_ids=list(range(prompt)), prefix_len=cached)


def test_a_watched_request_is_announced_handed_off_and_extended_with_the_given_times():
    parked = ParkedRequests()
    parked.token_kv_bytes = 100
    assert parked.apply(A, Watch(rid=RID), now=1.0) == []  # not parked yet: nothing to say
    [ready] = parked.arrive(_req(RID), wall=50.0, now=2.0)
    assert ready == Notify(
        A,
        Ready(rid=RID, t=50.0, prompt_tokens=10, cached_tokens=4, received_tokens=6, kv_bytes=600),
    )
    assert parked.apply(A, Handoff(rid=RID, token_ids=[1, 2, 3]), now=3.0) == []
    assert parked.handoff_runnable()
    taken, actions = parked.take_ready_handoffs(lambda req, ids, final: True)
    assert [(req.rid, ids, final, verdict) for req, ids, final, verdict in taken] == [
        (RID, [1, 2, 3], True, True)
    ]
    assert actions == [] and RID not in parked.parked  # a final handoff decodes on
    parked.note_extend_started(RID, now=3.5)
    [extended] = parked.notify_extended(RID, 3, True, now=4.0, wall=60.0)
    assert extended == Notify(
        A, Extended(rid=RID, t=60.0, tokens=3, final=True, waited_s=0.5, extend_s=0.5)
    )
    assert not parked.watches.watchers and not parked.watches.handoff_times


def test_a_peer_is_refused_what_it_does_not_own_and_a_request_it_never_watched():
    parked = ParkedRequests()
    parked.apply(A, Watch(rid=RID), now=0.0)
    assert parked.apply(B, Release(rid=RID), now=0.0) == [
        Refuse(B, RID, "another peer owns this request")
    ]
    assert parked.apply(B, Release(rid="x.pdd-relayed"), now=0.0) == [
        Refuse(B, "x.pdd-relayed", "release before watch")
    ]
    assert not parked.releases


def test_deferred_and_refused_handoffs_keep_the_request_parked_and_tell_its_router():
    parked = ParkedRequests()
    parked.apply(A, Watch(rid=RID), now=0.0)
    parked.arrive(_req(RID), wall=0.0, now=0.0)
    parked.apply(A, Handoff(rid=RID, token_ids=[1, 2]), now=0.0)
    taken, actions = parked.take_ready_handoffs(lambda *_: HandoffDeferred("no room"))
    assert taken == [] and RID in parked.parked and not parked.watches.handoffs
    assert [a.event.message for a in actions] == ["no room"]
    [error] = parked.refuse(parked.parked[RID], "the grammar rejects it")
    assert error == Notify(A, Error(RID, "handoff refused: the grammar rejects it"))


def test_an_expired_request_is_released_and_its_router_told():
    parked = ParkedRequests(ttl_s=5.0)
    parked.apply(A, Watch(rid=RID), now=0.0)
    parked.arrive(_req(RID), wall=0.0, now=0.0)
    assert parked.expired(now=4.0) == [] and parked.expired(now=10.0) == [RID]
    [told] = parked.apply(b"", Expire(rid=RID), now=10.0)
    assert told.identity == A and "--pdd-parked-ttl-s" in told.event.message
    assert parked.take_releases() == [RID] and parked.take_releases() == []
    assert [req.rid for req in parked.unpark_for_abort(RID, abort_all=False)] == [RID]
    assert not parked.parked and not parked.watches.watchers


PEERS = [A, B]
RIDS = [f"r{i}.pdd-relayed" for i in range(4)] + ["plain-1"]  # the last decodes on (P-MD)
_rid = st.sampled_from(RIDS)
_message = st.one_of(
    st.builds(Watch, rid=_rid),
    st.builds(Release, rid=_rid),
    st.builds(
        Handoff,
        rid=_rid,
        token_ids=st.lists(st.integers(0, 99), max_size=6),
        final=st.booleans(),
    ),
    st.builds(Expire, rid=_rid),
)
_verdict = st.sampled_from([True, False, "refused", HandoffDeferred("no room")])
_step = st.one_of(
    st.tuples(st.just("control"), st.sampled_from(PEERS), _message),
    st.tuples(st.just("arrive"), _rid),
    st.tuples(st.just("abort"), st.sampled_from([*RIDS, "r", ""]), st.booleans()),
    st.tuples(st.just("release")),
    st.tuples(st.just("handoffs"), _verdict, st.booleans()),
    st.tuples(st.just("tick"), st.floats(0, 20)),
)


class _Scheduler:
    """What the scheduler does with the actions and answers (``MainDecodeState``'s part)."""

    def __init__(self) -> None:
        self.parked = ParkedRequests(ttl_s=5.0, max_watches_per_peer=3, max_held_tokens_per_peer=8)
        self.now = 0.0
        self.arrived: set[str] = set()
        self.sent: list = []  # every action, in order

    def step(self, step) -> None:
        parked, kind = self.parked, step[0]
        before = dict(parked.watches.watchers)
        if kind == "control":
            _, peer, message = step
            identity = b"" if isinstance(message, Expire) else peer
            actions = parked.apply(identity, message, self.now)
            for action in actions:  # refusals answer the sender, events go to the owner
                if isinstance(action, Refuse):
                    assert action.identity == identity and action.rid == message.rid
        elif kind == "arrive":
            if step[1] in self.arrived:  # SGLang hands a request over once
                return
            self.arrived.add(step[1])
            parked.next_iteration()
            actions = parked.arrive(_req(step[1]), wall=self.now, now=self.now)
        elif kind == "abort":
            actions = []
            for req in parked.unpark_for_abort(step[1], abort_all=step[2]):
                assert req.rid not in parked.parked
        elif kind == "release":
            actions = []
            for rid in parked.take_releases():  # SGLang's abort, which our hook unparks first
                assert rid in parked.parked
                parked.unpark_for_abort(rid, abort_all=False)
        elif kind == "handoffs":
            _, verdict, extend_now = step
            taken, actions = parked.take_ready_handoffs(lambda *_: verdict)
            for req, ids, final, answer in taken:
                if isinstance(answer, str):
                    actions += parked.refuse(req, answer)
                elif extend_now:
                    parked.note_extend_started(req.rid, self.now)
                    actions += parked.notify_extended(req.rid, len(ids), final, self.now, 0.0)
        else:
            self.now += step[1]
            for rid in parked.expired(self.now):
                actions = parked.apply(b"", Expire(rid=rid), self.now)
                self.sent += actions
            actions = []
        for action in actions:
            if isinstance(action, Notify):  # events go to the router watching the rid
                assert action.identity == before.get(action.event.rid, action.identity)
                assert action.identity in PEERS
        self.sent += actions


def _check(parked: ParkedRequests) -> None:
    watches = parked.watches
    assert watches.watch_counts == Counter(watches.watchers.values())
    held = Counter()
    for rid, (ids, _final) in watches.handoffs.items():
        held[watches.watchers[rid]] += len(ids)  # every held handoff has its watcher
    assert +watches.held_tokens == +held
    assert all(n > 0 for n in (*watches.watch_counts.values(), *watches.held_tokens.values()))
    assert all(n <= watches.max_watches_per_peer for n in watches.watch_counts.values())
    assert all(n <= watches.max_held_tokens_per_peer for n in held.values())
    assert set(watches.handoff_times) <= set(watches.watchers)
    # Only relayed requests park; each parked request has its parking time, and either the
    # idle clock follows it or it is already due for release.
    assert all(
        rid.endswith(".pdd-relayed") and req.rid == rid for rid, req in parked.parked.items()
    )
    assert set(parked.parked_at) == set(parked.parked)
    assert all(rid in parked.idle.last or rid in parked.releases for rid in parked.parked)


@settings(max_examples=400, deadline=None)
@given(st.lists(_step, max_size=60))
def test_any_sequence_keeps_the_tables_consistent_and_ending_every_request_empties_them(steps):
    scheduler = _Scheduler()
    for step in steps:
        scheduler.step(step)
        _check(scheduler.parked)
    parked = scheduler.parked
    for rid in RIDS:  # every request ends: the TTL here, then SGLang's abort
        parked.apply(b"", Expire(rid=rid), scheduler.now)
    for rid in parked.take_releases():
        parked.unpark_for_abort(rid, abort_all=False)
    assert not parked.parked and not parked.parked_at
    assert not parked.watches.watchers and not parked.watches.handoffs
    assert not parked.watches.watch_counts and not parked.watches.held_tokens
    assert not parked.watches.handoff_times


@settings(max_examples=100, deadline=None)
@given(st.lists(_step, max_size=40))
def test_ranks_fed_the_same_inputs_agree(steps):
    """Every TP rank applies the same inputs in the same iteration: same tables, same actions
    (only rank 0 sends them)."""
    ranks = [_Scheduler(), _Scheduler()]
    for step in steps:
        for rank in ranks:
            rank.step(step)
    first, second = (rank.parked for rank in ranks)
    assert ranks[0].sent == ranks[1].sent
    assert (first.parked.keys(), first.releases, first.recent_aborts) == (
        second.parked.keys(),
        second.releases,
        second.recent_aborts,
    )
    assert first.watches.watchers == second.watches.watchers
    assert first.watches.handoffs == second.watches.handoffs
