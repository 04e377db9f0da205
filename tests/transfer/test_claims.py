"""The transfer ledger's claim table: who waits for whom, and that every claim ends."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.transfer.claims import ClaimTable
from sglang_pdd.wire.ledger import Busy, Claim, Ended, Granted, Refused

A, B, C = b"router-a", b"router-b", b"router-c"


def _claim(rid, blocks, main="md0", nbytes=100.0):
    return Claim(rid=rid, main=main, blocks=list(blocks), nbytes=nbytes)


def test_an_overlapping_claim_of_another_router_waits_for_the_holder():
    table = ClaimTable(ttl_s=60)
    assert table.claim(A, _claim("a1", [1, 2, 3]), 0) == [(A, Granted("a1", 0.0))]
    # B's prompt shares blocks 1-2: it must wait for a1, and learns a1's bytes are ahead.
    assert table.claim(B, _claim("b1", [1, 2, 9]), 0) == [(B, Busy("b1", "a1", 100.0))]
    assert len(table) == 1  # nothing was claimed for b1
    assert table.claim(C, _claim("c1", [1, 7]), 0) == [(C, Busy("c1", "a1", 100.0))]
    assert table.drop(A, "a1") == [(B, Ended("a1")), (C, Ended("a1"))]
    assert table.claim(B, _claim("b1", [1, 2, 9]), 1) == [(B, Granted("b1", 0.0))]


def test_own_claims_other_mains_and_disjoint_blocks_never_wait():
    table = ClaimTable(ttl_s=60)
    table.claim(A, _claim("a1", [1, 2]), 0)
    assert table.claim(A, _claim("a2", [1, 2, 3]), 0)[0][1] == Granted("a2", 0.0)
    assert table.claim(B, _claim("b1", [1, 2], main="md1"), 0)[0][1] == Granted("b1", 0.0)
    assert table.claim(B, _claim("b2", [5, 6]), 0)[0][1] == Granted("b2", 200.0)


def test_only_the_owner_drops_a_claim_and_a_rid_claims_once():
    table = ClaimTable(ttl_s=60)
    table.claim(A, _claim("a1", [1]), 0)
    assert table.drop(B, "a1") == [] and len(table) == 1
    assert isinstance(table.claim(A, _claim("a1", [4]), 0)[0][1], Refused)
    assert table.drop(A, "nope") == []


def test_claims_expire_and_wake_their_waiters():
    table = ClaimTable(ttl_s=10)
    table.claim(A, _claim("a1", [1]), 0)
    table.claim(B, _claim("b1", [1]), 5)
    assert table.expire(9) == []
    assert table.expire(11) == [(B, Ended("a1"))]
    assert len(table) == 0 and table.expired == 1
    with pytest.raises(ValueError, match="ttl_s"):
        ClaimTable(ttl_s=0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([A, B, C]),
            st.booleans(),
            st.integers(0, 5),
            st.lists(st.integers(0, 6), max_size=4),
            st.sampled_from(["md0", "md1"]),
        ),
        max_size=40,
    )
)
def test_no_two_routers_ever_hold_one_block_and_every_waiter_hears_the_end(steps):
    """Whatever the order of claims and drops: no block of a Main-Decode is held by two
    routers' open claims, and once all claims end every router told Busy got Ended."""
    table = ClaimTable(ttl_s=60)
    told_busy: dict[tuple[bytes, str], int] = {}
    ended: dict[tuple[bytes, str], int] = {}
    owners: dict[str, bytes] = {}

    def note(replies):
        for peer, event in replies:
            if isinstance(event, Busy):
                told_busy[(peer, event.holder)] = 1
            elif isinstance(event, Ended):
                ended[(peer, event.rid)] = 1

    for owner, is_claim, n, blocks, main in steps:
        rid = f"{owner.decode()}-{n}"
        if is_claim:
            replies = table.claim(owner, _claim(rid, blocks, main), 0)
            if isinstance(replies[0][1], Granted):
                owners[rid] = owner
            note(replies)
        else:
            note(table.drop(owner, rid))
        held: dict[tuple[str, int], set[bytes]] = {}
        for claim in table._open.values():
            for block in claim.blocks:
                held.setdefault((claim.main, block), set()).add(claim.owner)
        assert all(len(o) == 1 for o in held.values())
    note(table.expire(10**6))
    assert len(table) == 0
    assert set(told_busy) <= set(ended)


def test_prefills_measured_wan_bytes_ride_every_answer_to_a_claim():
    table = ClaimTable(ttl_s=60)
    assert table.claim(A, _claim("a1", [1, 2]), 0, sending=4096.0) == [
        (A, Granted("a1", 0.0, 4096.0))
    ]
    assert table.claim(B, _claim("b1", [1]), 0, sending=512.0) == [
        (B, Busy("b1", "a1", 100.0, 512.0))
    ]
    # A Prefill without WAN hosts measures nothing: the field stays None.
    assert table.claim(B, _claim("b2", [5]), 0) == [(B, Granted("b2", 100.0))]
