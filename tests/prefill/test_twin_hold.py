"""Which room-2 prefill requests wait for their room-1 twin."""

from types import SimpleNamespace

from sglang_pdd.prefill import split_held, twin_of


def req(rid):
    return SimpleNamespace(rid=rid)


def test_twin_names():
    assert twin_of("abc.p2") == "abc.p1"
    assert twin_of("abc.p1") is None and twin_of("abc.p") is None and twin_of(None) is None


def test_room_two_waits_only_while_its_twin_is_pending():
    queue = [req("a.p1"), req("a.p2"), req("b.p2"), req("c.p")]
    ready, held = split_held(queue, pending_rids={"a.p1", "c.p"})
    assert [r.rid for r in held] == ["a.p2"]
    assert [r.rid for r in ready] == ["a.p1", "b.p2", "c.p"]
