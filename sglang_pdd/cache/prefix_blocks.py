"""A block-level prefix cache: the decode-side radix cache reduced to what matters for routing.

Blocks are identified by chained hashes, so a block's id already names its whole prefix (as in
Mooncake traces' ``hash_ids``). The cache is a tree of blocks with a capacity in blocks; blocks
in use are pinned with handles, and eviction removes the least recently used unpinned leaf, the
way SGLang's RadixCache frees KV. The simulator feeds it trace hash ids; the router feeds it
``block_hashes(token_ids, block_size)`` to mirror MD's cache from token IDs.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field


def block_hashes(
    token_ids: Sequence[int], block_size: int, *, include_partial: bool = False
) -> list[int]:
    """Chained 63-bit hashes of consecutive token-ID blocks.

    Block i's hash covers block i's tokens and block i-1's hash, so equal hashes mean equal
    prefixes. A trailing partial block is hashed only when include_partial is True (a radix cache
    can reuse only whole pages).
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    out: list[int] = []
    prev = b""
    n_full = len(token_ids) // block_size
    end = len(token_ids) if include_partial else n_full * block_size
    for start in range(0, end, block_size):
        block = token_ids[start : start + block_size]
        digest = hashlib.blake2b(prev, digest_size=8)
        digest.update(",".join(map(str, block)).encode())
        prev = digest.digest()
        out.append(int.from_bytes(prev, "big") >> 1)
    return out


def common_prefix_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading block hashes ``a`` and ``b`` share (equal hashes: equal prefixes)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(eq=False)
class _Node:
    key: int
    parent: _Node | None
    depth: int = 0
    children: dict[int, _Node] = field(default_factory=dict)
    refs: int = 0
    # Most recent touch of this node's subtree (touches stamp the deepest node only; eviction
    # hands a leaf's stamp up to its parent).
    last_access: int = 0


@dataclass(frozen=True)
class PrefixHandle:
    """Blocks pinned by acquire(); pass back to release()."""

    nodes: tuple
    blocks: int


_ROOT_KEY = -1


class BlockPrefixCache:
    """Prefix cache over blocks with LRU eviction of unpinned leaves.

    capacity_blocks: how many blocks the cache may hold (pinned ones included).

    Block ids must identify their prefix (chained hashes, as ``block_hashes`` and Mooncake
    traces produce); blocks are indexed by (parent id, id) so a lookup is a binary search over
    the path rather than a walk, which keeps 64K-token (128-block) prompts cheap.
    """

    def __init__(self, capacity_blocks: int) -> None:
        if isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, int):
            raise ValueError(f"capacity_blocks must be an integer >= 0, got {capacity_blocks!r}")
        if capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be an integer >= 0, got {capacity_blocks!r}")
        self.capacity_blocks = capacity_blocks
        self._root = _Node(key=_ROOT_KEY, parent=None)
        self._index: dict[tuple[int, int], _Node] = {}
        self._clock = itertools.count(1)
        # Lazy LRU heap of (last_access, seq, node); stale entries are skipped when popped.
        self._lru: list[tuple[int, int, _Node]] = []
        self._seq = itertools.count()
        self.evicted_blocks = 0
        self.queried_blocks = 0
        self.hit_blocks = 0

    def __len__(self) -> int:
        return len(self._index)

    @property
    def size_blocks(self) -> int:
        """Blocks currently held."""
        return len(self._index)

    def _node_at(self, hashes: Sequence[int], k: int) -> _Node | None:
        """The cached node for the first k blocks of hashes, if any (k >= 1)."""
        parent = hashes[k - 2] if k >= 2 else _ROOT_KEY
        node = self._index.get((parent, hashes[k - 1]))
        return node if node is not None and node.depth == k else None

    def _deepest(self, hashes: Sequence[int]) -> tuple[int, _Node]:
        """(k, node): the longest cached prefix of hashes. Cached prefixes are closed under
        taking ancestors (only leaves are evicted), so presence is monotone in k."""
        lo, hi = 0, len(hashes)
        best = self._root
        while lo < hi:
            mid = (lo + hi + 1) // 2
            node = self._node_at(hashes, mid)
            if node is not None:
                lo, best = mid, node
            else:
                hi = mid - 1
        return lo, best

    def _touch(self, node: _Node) -> None:
        if node is self._root:
            return
        node.last_access = next(self._clock)
        if not node.children:
            self._push(node)

    def _push(self, node: _Node) -> None:
        heapq.heappush(self._lru, (node.last_access, next(self._seq), node))

    def match(self, hashes: Sequence[int], *, touch: bool = True) -> int:
        """Number of leading blocks of hashes held in the cache (refreshes their LRU time)."""
        k, node = self._deepest(hashes)
        if touch:
            self._touch(node)
            self.queried_blocks += len(hashes)
            self.hit_blocks += k
        return k

    def acquire(self, hashes: Sequence[int]) -> PrefixHandle:
        """Pin the held leading blocks of hashes so eviction cannot take them.

        Only the deepest block carries the pin: eviction takes leaves only, so its ancestors
        cannot go while it stays.
        """
        k, node = self._deepest(hashes)
        if k == 0:
            return PrefixHandle((), 0)
        node.refs += 1
        self._touch(node)
        return PrefixHandle((node,), k)

    def release(self, handle: PrefixHandle) -> None:
        """Unpin blocks pinned by acquire()."""
        for node in handle.nodes:
            if node.refs <= 0:
                raise ValueError("release() of a handle that is not pinned")
            node.refs -= 1
            if not node.children and node.refs == 0 and node.parent is not None:
                self._push(node)

    def evict(self, n_blocks: int) -> int:
        """Evict up to n_blocks least recently used unpinned leaves; returns how many went."""
        freed = 0
        while freed < n_blocks and self._lru:
            stamp, _, node = heapq.heappop(self._lru)
            if node.parent is None or node.children or node.refs > 0 or stamp != node.last_access:
                continue
            parent = node.parent
            del parent.children[node.key]
            del self._index[(parent.key, node.key)]
            node.parent = None
            freed += 1
            if parent is not self._root:
                parent.last_access = max(parent.last_access, node.last_access)
                if not parent.children and parent.refs == 0:
                    self._push(parent)
        self.evicted_blocks += freed
        return freed

    def insert(self, hashes: Sequence[int]) -> int:
        """Add the blocks of hashes, evicting as needed; returns the leading blocks now held.

        When pinned blocks fill the cache, insertion stops early (a real cache would refuse to
        admit more KV), so the return value can be below len(hashes).
        """
        k, node = self._deepest(hashes)
        # Pin the deepest node while we evict for the new blocks (see acquire()).
        node.refs += 1
        for h in hashes[k:]:
            if len(self._index) >= self.capacity_blocks and self.evict(1) == 0:
                break
            child = _Node(key=h, parent=node, depth=node.depth + 1, refs=1)
            node.children[h] = child
            self._index[(node.key, h)] = child
            node.refs -= 1
            node = child
            k += 1
        node.refs -= 1
        self._touch(node)
        return k
