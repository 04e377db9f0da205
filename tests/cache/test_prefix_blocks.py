"""Block prefix cache: hits, prefix semantics, LRU eviction of unpinned leaves, hashing."""

import pytest

from sglang_pdd.cache import BlockPrefixCache, block_hashes


def test_match_counts_leading_blocks_only():
    cache = BlockPrefixCache(10)
    assert cache.insert([1, 2, 3]) == 3
    assert cache.match([1, 2, 3, 4]) == 3
    assert cache.match([1, 2, 9]) == 2
    assert cache.match([2, 3]) == 0  # same ids under another parent are another prefix


def test_shared_prefix_is_stored_once():
    cache = BlockPrefixCache(10)
    cache.insert([1, 2, 3])
    cache.insert([1, 2, 4])
    assert len(cache) == 4


def test_lru_evicts_least_recent_leaf_first():
    cache = BlockPrefixCache(4)
    cache.insert([1, 2])  # a
    cache.insert([5, 6])  # b
    cache.match([1, 2])  # a is now more recent than b
    cache.insert([7])  # needs one block: b's leaf 6 goes
    assert cache.match([5, 6]) == 1
    assert cache.match([1, 2]) == 2
    assert cache.evicted_blocks == 1


def test_eviction_walks_up_a_chain_leaf_by_leaf():
    cache = BlockPrefixCache(3)
    cache.insert([1, 2, 3])
    cache.insert([8, 9])  # evicts 3 then 2
    assert cache.match([1, 2, 3]) == 1
    assert cache.match([8, 9]) == 2


def test_pinned_blocks_survive_and_block_insertion():
    cache = BlockPrefixCache(3)
    cache.insert([1, 2, 3])
    handle = cache.acquire([1, 2, 3])
    assert cache.insert([7, 8]) == 0  # nothing evictable: insertion stops
    assert cache.match([1, 2, 3]) == 3
    cache.release(handle)
    assert cache.insert([7, 8]) == 2
    assert cache.match([1, 2, 3]) == 1


def test_release_twice_is_an_error():
    cache = BlockPrefixCache(3)
    cache.insert([1])
    handle = cache.acquire([1])
    cache.release(handle)
    with pytest.raises(ValueError):
        cache.release(handle)


def test_zero_capacity_holds_nothing():
    cache = BlockPrefixCache(0)
    assert cache.insert([1, 2]) == 0
    assert cache.match([1]) == 0


def test_block_hashes_are_chained_and_full_blocks_only():
    a = block_hashes(list(range(10)), 4)
    assert len(a) == 2
    assert block_hashes(list(range(10)), 4, include_partial=True)[:2] == a
    b = block_hashes([99] + list(range(1, 10)), 4)
    assert a[1] != b[1]  # same tokens in block 1, different prefix
    assert block_hashes(list(range(8)), 4) == a


def test_bad_capacity_and_block_size_raise():
    with pytest.raises(ValueError, match="capacity_blocks"):
        BlockPrefixCache(-1)
    with pytest.raises(ValueError, match="block_size"):
        block_hashes([1, 2], 0)
