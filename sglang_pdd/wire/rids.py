"""Sub-request ids: the suffixes that tell P and MD a sub-request's role, and ``SubRids``.

The role travels in the rid so that it reaches the scheduler with the request itself: no
ordering race between a side-channel message and the KV transfer.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

# P-RLD-MD on P: room 1 feeds Relay-Decode, room 2 Main-Decode (a radix hit once room 1 is in).
RELAY_PREFILL_SUFFIX = ".p1"
MAIN_PREFILL_SUFFIX = ".p2"
# P-RLD-MD on MD: parked when its KV lands, until the router hands it off or releases it.
RELAYED_RID_SUFFIX = ".pdd-relayed"
PREFILL_SUFFIX = ".p"  # P-MD and P-RLD on P
RELAY_SUFFIX = ".relay"  # RLD
MAIN_SUFFIX = ".main"  # MD in P-MD
ROUTER_RID_PREFIX = "pdd-"


def is_relayed(rid: str) -> bool:
    """True for rids the router marked as relayed through Relay-Decode."""
    return rid.endswith(RELAYED_RID_SUFFIX)


def twin_of(rid: str) -> str | None:
    """The room-1 rid whose prefill a room-2 rid must wait for (None for other rids)."""
    if isinstance(rid, str) and rid.endswith(MAIN_PREFILL_SUFFIX):
        return rid[: -len(MAIN_PREFILL_SUFFIX)] + RELAY_PREFILL_SUFFIX
    return None


@dataclass(frozen=True)
class SubRids:
    """The rids one run of a client request takes on each instance (one place names them all).

    ``rid`` is the router's own, new for every run (``SubRids.fresh()``): a client's rid is a
    label only. A client reusing its rid as soon as the request ended, or a rid that is the
    prefix of another client's, then never meets state an instance or the control channel
    still holds for the earlier request."""

    rid: str

    @classmethod
    def fresh(cls) -> SubRids:
        return cls(f"{ROUTER_RID_PREFIX}{uuid.uuid4().hex}")

    @property
    def prefill(self) -> str:  # P for P-MD and P-RLD
        return self.rid + PREFILL_SUFFIX

    @property
    def prefill_for_relay(self) -> str:  # P's send to RLD (P-RLD-MD)
        return self.rid + RELAY_PREFILL_SUFFIX

    @property
    def prefill_for_main(self) -> str:  # P's send to MD (P-RLD-MD), a radix hit on P
        return self.rid + MAIN_PREFILL_SUFFIX

    @property
    def relay(self) -> str:
        return self.rid + RELAY_SUFFIX

    @property
    def main(self) -> str:  # MD in P-MD
        return self.rid + MAIN_SUFFIX

    @property
    def relayed(self) -> str:  # MD in P-RLD-MD: parked until the handoff
        return self.rid + RELAYED_RID_SUFFIX

    def on_prefill(self) -> list[str]:
        return [self.prefill, self.prefill_for_relay, self.prefill_for_main]

    def on_main(self) -> list[str]:
        return [self.main, self.relayed]
