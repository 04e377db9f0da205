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
from collections.abc import Iterable, Sequence
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


@dataclass(eq=False)
class _Node:
    key: int
    parent: _Node | None
    children: dict[int, _Node] = field(default_factory=dict)
    refs: int = 0
    last_access: int = 0


@dataclass(frozen=True)
class PrefixHandle:
    """Blocks pinned by acquire(); pass back to release()."""

    nodes: tuple
    blocks: int


class BlockPrefixCache:
    """Prefix cache over blocks with LRU eviction of unpinned leaves.

    capacity_blocks: how many blocks the cache may hold (pinned ones included).
    """

    def __init__(self, capacity_blocks: int) -> None:
        if isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, int):
            raise ValueError(f"capacity_blocks must be an integer >= 0, got {capacity_blocks!r}")
        if capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be an integer >= 0, got {capacity_blocks!r}")
        self.capacity_blocks = capacity_blocks
        self._root = _Node(key=-1, parent=None)
        self._size = 0
        self._clock = itertools.count(1)
        # Lazy LRU heap of (last_access, seq, node); stale entries are skipped when popped.
        self._lru: list[tuple[int, int, _Node]] = []
        self._seq = itertools.count()
        self.evicted_blocks = 0
        self.queried_blocks = 0
        self.hit_blocks = 0

    def __len__(self) -> int:
        return self._size

    @property
    def size_blocks(self) -> int:
        """Blocks currently held."""
        return self._size

    def _walk(self, hashes: Iterable[int]) -> list[_Node]:
        node = self._root
        path = []
        for h in hashes:
            child = node.children.get(h)
            if child is None:
                break
            path.append(child)
            node = child
        return path

    def _touch(self, path: list[_Node]) -> None:
        now = next(self._clock)
        for node in path:
            node.last_access = now
        if path and not path[-1].children:
            self._push(path[-1])

    def _push(self, node: _Node) -> None:
        heapq.heappush(self._lru, (node.last_access, next(self._seq), node))

    def match(self, hashes: Sequence[int], *, touch: bool = True) -> int:
        """Number of leading blocks of hashes held in the cache (refreshes their LRU time)."""
        path = self._walk(hashes)
        if touch:
            self._touch(path)
            self.queried_blocks += len(hashes)
            self.hit_blocks += len(path)
        return len(path)

    def acquire(self, hashes: Sequence[int]) -> PrefixHandle:
        """Pin the held leading blocks of hashes so eviction cannot take them."""
        path = self._walk(hashes)
        for node in path:
            node.refs += 1
        self._touch(path)
        return PrefixHandle(tuple(path), len(path))

    def release(self, handle: PrefixHandle) -> None:
        """Unpin blocks pinned by acquire()."""
        for node in handle.nodes:
            if node.refs <= 0:
                raise ValueError("release() of a handle that is not pinned")
            node.refs -= 1
        if handle.nodes and not handle.nodes[-1].children and handle.nodes[-1].refs == 0:
            self._push(handle.nodes[-1])

    def evict(self, n_blocks: int) -> int:
        """Evict up to n_blocks least recently used unpinned leaves; returns how many went."""
        freed = 0
        while freed < n_blocks and self._lru:
            stamp, _, node = heapq.heappop(self._lru)
            if (
                node.parent is None
                or node.children
                or node.refs > 0
                or stamp != node.last_access
                or node.parent.children.get(node.key) is not node
            ):
                continue
            parent = node.parent
            del parent.children[node.key]
            node.parent = None
            self._size -= 1
            freed += 1
            if parent is not self._root and not parent.children and parent.refs == 0:
                self._push(parent)
        self.evicted_blocks += freed
        return freed

    def insert(self, hashes: Sequence[int]) -> int:
        """Add the blocks of hashes, evicting as needed; returns the leading blocks now held.

        When pinned blocks fill the cache, insertion stops early (a real cache would refuse to
        admit more KV), so the return value can be below len(hashes).
        """
        path = self._walk(hashes)
        # Pin the existing prefix while we evict for the new blocks.
        for node in path:
            node.refs += 1
        node = path[-1] if path else self._root
        added: list[_Node] = []
        for h in hashes[len(path) :]:
            if self._size >= self.capacity_blocks and self.evict(1) == 0:
                break
            child = _Node(key=h, parent=node)
            child.refs = 1
            node.children[h] = child
            self._size += 1
            added.append(child)
            node = child
        full = path + added
        for n in full:
            n.refs -= 1
        self._touch(full)
        return len(full)
