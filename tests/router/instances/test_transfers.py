"""Transfers to one Main-Decode: waits on a prefix in flight, deferred warms, duplicates."""

from sglang_pdd.cache.prefix_blocks import block_hashes
from sglang_pdd.router.instances.transfers import DEFERRED, DROPPED, LANDED, SENDING, MainTransfers
from sglang_pdd.transfer.link_model import LinkModelConfig, LiveLinkModel

B = 4


def transfers():
    return MainTransfers(LiveLinkModel(LinkModelConfig(1e6, 0.1)), B)


def prompt(n, seed=0):
    return [(i * 7 + seed) % 97 for i in range(n)]


def test_a_request_extending_a_prefix_on_the_link_depends_on_it():
    t = transfers()
    first = prompt(40)
    h1 = block_hashes(first, B)
    sending = t.start("r1", h1, 0, 40 * 10, now=0.0)
    second = first + prompt(12, seed=5)
    h2 = block_hashes(second, B)
    assert t.dependency(h2, cached_blocks=0) is sending
    assert t.dependency(h2, cached_blocks=len(h1)) is None  # MD already holds all of it
    assert t.dependency(block_hashes(prompt(40, seed=3), B), 0) is None
    assert not sending.off_link.is_set()
    t.landed("r1", cached_tokens=0, kv_bytes=400, now=1.0)
    assert sending.state == LANDED and sending.off_link.is_set()
    assert t.dependency(h2, 0) is None and t.stats.duplicate_transfers == 0


def test_overlapping_transfers_on_the_link_count_as_duplicates():
    t = transfers()
    h = block_hashes(prompt(40), B)
    t.start("a", h, 0, 400, now=0.0)
    t.start("b", h, 0, 400, now=0.0)  # sent without waiting: the same blocks cross twice
    t.landed("a", 0, 400, now=1.0)
    assert t.stats.duplicate_transfers == 1 and t.stats.duplicate_blocks == len(h)
    t.landed("b", 0, 400, now=2.0)
    assert t.stats.duplicate_transfers == 1  # the pair is counted once


def test_warms_wait_for_serving_transfers_and_go_one_at_a_time():
    t = transfers()
    serving = t.start("s", block_hashes(prompt(40, 1), B), 0, 400, now=0.0)
    w1 = t.start("w1", block_hashes(prompt(40, 2), B), 0, 400, warming=True, now=0.0)
    w2 = t.start("w2", block_hashes(prompt(40, 3), B), 0, 400, warming=True, now=0.0)
    assert (w1.state, w2.state) == (DEFERRED, DEFERRED) and t.queued_warms == 2
    assert t.link.queued_bytes == 400  # deferred warms are not on the link
    t.landed("s", 0, 400, now=1.0)
    assert serving.state == LANDED and w1.state == SENDING and w1.dispatch.is_set()
    assert w2.state == DEFERRED  # one warm at a time
    t.landed("w1", 0, 400, now=2.0)
    assert w2.state == SENDING


def test_a_request_carrying_a_deferred_warm_drops_it_and_promotion_sends_it():
    t = transfers()
    t.start("s", block_hashes(prompt(40, 1), B), 0, 400, now=0.0)
    warm_ids = prompt(40, 2)
    warm = t.start("w", block_hashes(warm_ids, B), 0, 400, warming=True, now=0.0)
    assert t.dependency(block_hashes(warm_ids + [1, 2, 3, 4], B), 0) is warm
    t.drop(warm)
    assert warm.state == DROPPED and warm.dispatch.is_set() and t.stats.warms_dropped == 1
    other = t.start("w2", block_hashes(prompt(40, 3), B), 0, 400, warming=True, now=0.0)
    t.promote(other, now=0.5)
    assert other.state == SENDING and not other.warming
    assert t.link.queued_bytes == 800


def test_deferred_warms_past_the_cap_drop_the_oldest(monkeypatch):
    import sglang_pdd.router.instances.transfers as module

    monkeypatch.setattr(module, "MAX_DEFERRED_WARMS", 2)
    t = transfers()
    t.start("s", block_hashes(prompt(40, 1), B), 0, 400, now=0.0)  # the link stays busy
    warms = [
        t.start(f"w{i}", block_hashes(prompt(40, 2 + i), B), 0, 400, warming=True, now=0.0)
        for i in range(3)
    ]
    assert [w.state for w in warms] == [DROPPED, DEFERRED, DEFERRED]
    assert warms[0].dispatch.is_set() and t.queued_warms == 2 and t.stats.warms_dropped == 1


def test_the_link_learns_what_crossed_in_the_routers_units_not_mds():
    """MD counts the bytes it received in its own pool's units (an emulated model's KV, MLA and
    quantized caches differ): the link model learns the router's per-token bytes instead."""
    t = transfers()
    ids = prompt(40)
    t.start("r", block_hashes(ids, B), 0, 40 * 1000.0, now=0.0, prompt_tokens=40, token_bytes=1e3)
    obs = t.landed("r", cached_tokens=8, kv_bytes=32 * 2, now=1.0)  # MD: 2 bytes per token
    assert obs is not None and obs.nbytes == 32 * 1000.0
    t.start("s", block_hashes(prompt(40, 1), B), 0, 400, now=1.0)  # no per-token figure
    assert t.landed("s", cached_tokens=0, kv_bytes=123, now=2.0).nbytes == 123
