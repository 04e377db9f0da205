"""Main-Decode: park relayed requests when their KV lands, take the handoff, extend, decode on."""

# A request whose rid ends with this suffix is relayed (P-RLD-MD): Main-Decode parks it when its
# KV has arrived instead of decoding, until the router hands off (or releases) it. The marker
# travels in the rid so that it reaches the scheduler with the request itself: no ordering race
# between a side-channel message and the KV transfer.
RELAYED_RID_SUFFIX = ".pdd-relayed"


def is_relayed(rid: str) -> bool:
    """True for rids the router marked as relayed through Relay-Decode."""
    return rid.endswith(RELAYED_RID_SUFFIX)
