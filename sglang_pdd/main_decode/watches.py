"""``Watches``: which router watches which relayed request on Main-Decode, and the handed-off
ids held for each, counted per router against its bounds.

A router watches a request before anything else: MD sends that router the request's events,
and takes handoffs and releases for it from that router alone. What one router may have MD
hold at once is bounded (requests watched, handed-off ids waiting), so a buggy or hostile
peer cannot grow MD's memory without bound. Pure bookkeeping: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter

from sglang_pdd.wire.messages import Handoff

# What one control peer (a router) may have MD hold for it at once: requests watched, and
# handed-off token ids waiting for their KV or for an iteration. Beyond them its messages are
# refused (an error reply).
MAX_WATCHES_PER_PEER = 65_536
MAX_HELD_HANDOFF_TOKENS_PER_PEER = 16_000_000


class Watches:
    """The watch and handoff tables and their per-peer counts, kept equal to the tables."""

    def __init__(
        self,
        max_watches_per_peer: int = MAX_WATCHES_PER_PEER,
        max_held_tokens_per_peer: int = MAX_HELD_HANDOFF_TOKENS_PER_PEER,
    ) -> None:
        self.watchers: dict[str, bytes] = {}  # rid -> ZeroMQ identity of the router
        # rid -> (token ids, final), waiting for the KV or for the scheduler's next iteration.
        self.handoffs: dict[str, tuple[list[int], bool]] = {}
        # rid -> [its last handoff's arrival, its extend batch built or None] (monotonic), for
        # the waited_s and extend_s of the "extended" event; bounded as the watches are.
        self.handoff_times: dict[str, list] = {}
        self.max_watches_per_peer = max_watches_per_peer
        self.max_held_tokens_per_peer = max_held_tokens_per_peer
        self.watch_counts: Counter[bytes] = Counter()  # per peer: rids it watches
        self.held_tokens: Counter[bytes] = Counter()  # per peer: handed-off ids held for it

    def watch(self, rid: str, identity: bytes) -> str | None:
        """``identity`` watches ``rid`` (the caller checked nobody else does); returns why not
        if that would take the peer past its bound."""
        current = self.watchers.get(rid)
        if current is None and self.watch_counts[identity] >= self.max_watches_per_peer:
            return (
                f"this peer watches {self.max_watches_per_peer} "
                "requests already (MAX_WATCHES_PER_PEER)"
            )
        if current != identity:
            self.unwatch(rid)
            self.watchers[rid] = identity
            self.watch_counts[identity] += 1
        return None

    def hold(self, handoff: Handoff, identity: bytes, now: float) -> str | None:
        """Keep ``handoff`` from its watcher ``identity``, replacing one held for its rid;
        returns why not if that would take the peer past its bound."""
        rid = handoff.rid
        old = len(self.handoffs[rid][0]) if rid in self.handoffs else 0
        held = self.held_tokens[identity] - old + len(handoff.token_ids)
        if held > self.max_held_tokens_per_peer:
            return (
                f"this peer's handoffs would hold {held} token ids "
                f"(over {self.max_held_tokens_per_peer}, MAX_HELD_HANDOFF_TOKENS_PER_PEER)"
            )
        self.drop_handoff(rid)
        self.handoffs[rid] = (list(handoff.token_ids), handoff.final)
        self.held_tokens[identity] += len(handoff.token_ids)
        self.handoff_times[rid] = [now, None]
        return None

    def unwatch(self, rid: str) -> None:
        """``rid`` is no longer watched (its handoffs held for the peer are dropped too)."""
        self.drop_handoff(rid)
        self.handoff_times.pop(rid, None)
        identity = self.watchers.pop(rid, None)
        if identity is not None:
            self.watch_counts[identity] -= 1
            if self.watch_counts[identity] <= 0:
                del self.watch_counts[identity]

    def drop_handoff(self, rid: str) -> None:
        """Forget the handoff held for ``rid``, if any (taken, replaced or dropped)."""
        held = self.handoffs.pop(rid, None)
        identity = self.watchers.get(rid)
        if held is not None and identity is not None:
            self.held_tokens[identity] -= len(held[0])
            if self.held_tokens[identity] <= 0:
                del self.held_tokens[identity]
