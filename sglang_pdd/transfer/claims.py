"""``ClaimTable``: the transfer ledger's open claims, as a pure state machine.

Every router in front of a cluster claims the KV blocks a transfer to a Main-Decode will carry
before it leaves (``wire/ledger.py``). A claim that overlaps another router's open claim on the
same Main-Decode is answered ``Busy`` with that claim's rid, and the asker is sent ``Ended``
once it is over: the asker then waits for that KV to land on MD instead of sending it a second
time. A router's own claims never make it wait: its ``MainTransfers`` already orders them.

Claims end when their router drops them (the KV landed, or never will) or after ``ttl_s``
(a router that died holding claims must not stall the others for good). Methods take the
clock and return ``(peer, event)`` pairs to send; the service's loop does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_pdd.wire.ledger import Busy, Claim, Ended, Granted, Refused

MAX_CLAIMS = 65536  # open claims kept; past this a claim is refused (the router sends anyway)
MAX_WAITERS = 4096  # peers told about one claim's end


@dataclass
class _Open:
    owner: bytes
    main: str
    blocks: tuple[int, ...]
    nbytes: float
    at: float
    waiters: set[bytes] = field(default_factory=set)


Reply = tuple[bytes, Granted | Busy | Ended | Refused]


class ClaimTable:
    """Open claims per Main-Decode and block, and who waits for each."""

    def __init__(self, ttl_s: float) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        self.ttl_s = ttl_s
        self._open: dict[str, _Open] = {}
        self._holders: dict[tuple[str, int], set[str]] = {}  # (main, block) -> claim rids
        self.granted = self.busy = self.expired = 0

    def __len__(self) -> int:
        return len(self._open)

    def others_bytes(self, main: str, owner: bytes) -> float:
        """Bytes of open claims on ``main`` by routers other than ``owner``."""
        return sum(c.nbytes for c in self._open.values() if c.main == main and c.owner != owner)

    def claim(
        self, owner: bytes, msg: Claim, now: float, sending: float | None = None
    ) -> list[Reply]:
        """Open ``msg`` for ``owner``, or name the other router's claim it must wait for;
        ``sending``: the WAN-bound bytes Prefill has in hand now (passed on to the router)."""
        if msg.rid in self._open:
            return [(owner, Refused(msg.rid, f"{msg.rid} already holds a claim"))]
        for block in reversed(msg.blocks):  # the deepest shared block: the longest prefix
            for rid in self._holders.get((msg.main, block), ()):
                holder = self._open[rid]
                if holder.owner != owner:
                    if len(holder.waiters) < MAX_WAITERS:
                        holder.waiters.add(owner)
                    self.busy += 1
                    others = self.others_bytes(msg.main, owner)
                    return [(owner, Busy(msg.rid, rid, others, sending))]
        if len(self._open) >= MAX_CLAIMS:
            return [(owner, Refused(msg.rid, f"the ledger holds {MAX_CLAIMS} claims"))]
        self._open[msg.rid] = _Open(owner, msg.main, tuple(msg.blocks), msg.nbytes, now)
        for block in msg.blocks:
            self._holders.setdefault((msg.main, block), set()).add(msg.rid)
        self.granted += 1
        return [(owner, Granted(msg.rid, self.others_bytes(msg.main, owner), sending))]

    def drop(self, owner: bytes, rid: str) -> list[Reply]:
        """End ``owner``'s claim ``rid`` (another router's claim is left alone)."""
        claim = self._open.get(rid)
        if claim is None or claim.owner != owner:
            return []
        return self._end(rid)

    def expire(self, now: float) -> list[Reply]:
        """End the claims older than the TTL."""
        old = [rid for rid, c in self._open.items() if now - c.at > self.ttl_s]
        self.expired += len(old)
        return [reply for rid in old for reply in self._end(rid)]

    def _end(self, rid: str) -> list[Reply]:
        claim = self._open.pop(rid)
        for block in claim.blocks:
            holders = self._holders.get((claim.main, block))
            if holders is not None:
                holders.discard(rid)
                if not holders:
                    del self._holders[(claim.main, block)]
        return [(peer, Ended(rid)) for peer in sorted(claim.waiters)]
