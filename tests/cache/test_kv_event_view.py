"""The cache view rebuilt from SGLang's KV events (as msgspec decodes them)."""

import msgspec

from sglang_pdd.cache.kv_event_view import KvEventCacheView
from sglang_pdd.router.instances.kv_events import decode_batch


def stored(hashes, parent, tokens, size=1):
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": size,
        "lora_id": None,
    }


def test_stores_chain_into_prefixes_and_removal_cuts_the_subtree():
    view = KvEventCacheView()
    view.apply(stored([1, 2, 3], None, [10, 11, 12]))
    view.apply(stored([4, 5], 3, [13, 14]))
    view.apply(stored([6], 3, [20]))  # a branch after the shared prefix
    assert view.match([10, 11, 12, 13, 14, 99]) == 5
    assert view.match([10, 11, 12, 20]) == 4
    assert view.match([11]) == 0
    view.apply({"type": "BlockRemoved", "block_hashes": [4]})
    assert view.match([10, 11, 12, 13, 14]) == 3
    assert view.pages == 4  # 1, 2, 3, 6 (5 went with its parent 4)
    view.apply({"type": "AllBlocksCleared"})
    assert view.match([10, 11, 12]) == 0


def test_pages_larger_than_one_token_match_whole_pages_only():
    view = KvEventCacheView()
    view.apply(stored([7, 8], None, [1, 2, 3, 4], size=2))
    assert view.match([1, 2, 3, 4, 5]) == 4
    assert view.match([1, 2, 3]) == 2


def test_store_under_an_unknown_parent_is_counted_not_guessed():
    view = KvEventCacheView()
    view.apply(stored([9], 12345, [1]))
    assert view.orphan_stores == 1 and view.match([1]) == 0


def test_decodes_sglang_event_batches():
    from sglang.srt.disaggregation.kv_events import BlockStored, KVEventBatch

    # The exact encoding SGLang's ZmqEventPublisher puts on the wire.
    batch = KVEventBatch(
        ts=1.0,
        events=[
            BlockStored(
                block_hashes=[1], parent_block_hash=None, token_ids=[42], block_size=1, lora_id=None
            )
        ],
    )
    events = decode_batch(msgspec.msgpack.Encoder().encode(batch))
    view = KvEventCacheView()
    for event in events:
        view.apply(event)
    assert view.match([42, 43]) == 1


def test_a_view_past_its_page_cap_starts_over_instead_of_growing():
    view = KvEventCacheView(max_pages=4)
    view.apply(stored([1, 2, 3], None, [10, 11, 12]))
    assert (view.pages, view.overflows) == (3, 0)
    view.apply(stored([4, 5], 3, [13, 14]))  # 5 pages: past the cap
    assert (view.pages, view.overflows) == (0, 1)
    assert view.match([10, 11, 12]) == 0  # nothing claimed cached
    view.apply(stored([1], None, [10]))  # and it rebuilds from the next stores
    assert view.match([10]) == 1
