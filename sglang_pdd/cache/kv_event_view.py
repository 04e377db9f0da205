"""``KvEventCacheView``: an instance's radix cache rebuilt from SGLang's own KV cache events.

SGLang publishes, with ``--kv-events-config``, a ``BlockStored`` event (page hashes, the parent
page's hash, the pages' token ids) whenever its radix tree inserts KV, ``BlockRemoved`` when it
evicts, and ``AllBlocksCleared`` on a flush. Replaying them gives the router the prefixes an
instance really holds, instead of its own guess of what it sent there: a prompt counts as cached
on Main-Decode only once Main-Decode inserted its KV (which happens after the KV landed).

This module is pure: it applies decoded events (dicts with a ``type`` key, as msgspec decodes
SGLang's tagged structs) and answers prefix matches. ``sglang_pdd.router.instances.kv_events``
feeds it from the ZeroMQ stream.
"""

from __future__ import annotations

from collections.abc import Sequence

# The most pages a view keeps (about 200 bytes each). An honest instance publishes no more pages
# than its KV pool holds (an H200's pool for an 8B model is under a million tokens); past this a
# publisher is not describing a cache, and the view starts over rather than grow without end.
MAX_VIEW_PAGES = 1 << 22


class _Page:
    __slots__ = ("children", "key", "parent", "hash")

    def __init__(self, key, parent, block_hash) -> None:
        self.key = key
        self.parent = parent
        self.hash = block_hash
        self.children: dict = {}


class KvEventCacheView:
    """A page-level prefix tree of what one SGLang instance holds in its radix cache."""

    def __init__(self, max_pages: int = MAX_VIEW_PAGES) -> None:
        self.max_pages = max_pages
        self.overflows = 0  # times the view passed max_pages and started over
        self._root = _Page(None, None, None)
        self._by_hash: dict[int, _Page] = {}
        self.page_size: int | None = None
        self.events_applied = 0
        self.orphan_stores = 0  # stores whose parent was never seen (events missed)
        self.clears = 0  # AllBlocksCleared events seen (the instance flushed its cache)

    @property
    def pages(self) -> int:
        return len(self._by_hash)

    def clear(self) -> None:
        self._root = _Page(None, None, None)
        self._by_hash.clear()

    @staticmethod
    def _key(tokens: Sequence) -> object:
        return tokens[0] if len(tokens) == 1 else tuple(tokens)

    def apply(self, event: dict) -> None:
        """Apply one decoded SGLang KV event; unknown event types are ignored."""
        kind = event.get("type")
        if kind == "BlockStored":
            self._store(event)
        elif kind == "BlockRemoved":
            for block_hash in event.get("block_hashes") or ():
                self._remove(block_hash)
        elif kind == "AllBlocksCleared":
            self.clear()
            self.clears += 1
        else:
            return
        self.events_applied += 1

    def _store(self, event: dict) -> None:
        size = int(event.get("block_size") or 1)
        self.page_size = size
        parent_hash = event.get("parent_block_hash")
        node = self._root if parent_hash is None else self._by_hash.get(parent_hash)
        if node is None:
            self.orphan_stores += 1
            return
        tokens = event.get("token_ids") or []
        for i, block_hash in enumerate(event.get("block_hashes") or ()):
            page = tokens[i * size : (i + 1) * size]
            if not page:
                break
            key = self._key(page)
            child = node.children.get(key)
            if child is None:
                child = _Page(key, node, block_hash)
                node.children[key] = child
            elif child.hash != block_hash:
                self._by_hash.pop(child.hash, None)
                child.hash = block_hash
            self._by_hash[block_hash] = child
            node = child
        if len(self._by_hash) > self.max_pages:
            # Under-counting what MD holds only costs a cache hit in the router's choice.
            self.clear()
            self.overflows += 1

    def _remove(self, block_hash: int) -> None:
        node = self._by_hash.pop(block_hash, None)
        if node is None:
            return
        if node.parent is not None and node.parent.children.get(node.key) is node:
            del node.parent.children[node.key]
        stack = list(node.children.values())  # pages below an evicted page are unreachable
        while stack:
            child = stack.pop()
            self._by_hash.pop(child.hash, None)
            stack.extend(child.children.values())

    def match(self, token_ids: Sequence[int]) -> int:
        """How many leading tokens of ``token_ids`` the instance holds (whole pages only)."""
        size = self.page_size or 1
        node, matched = self._root, 0
        while matched + size <= len(token_ids):
            page = token_ids[matched : matched + size]
            child = node.children.get(self._key(page))
            if child is None:
                break
            node, matched = child, matched + size
        return matched
