"""Main-Decode: park relayed requests when their KV lands, take the handoff, extend, decode on.

A request whose rid ends with ``wire.rids.RELAYED_RID_SUFFIX`` is relayed (P-RLD-MD): MD parks it
when its KV has arrived instead of decoding, until the router hands it off (or releases it).
"""

from sglang_pdd.wire.rids import RELAYED_RID_SUFFIX, is_relayed

__all__ = ["RELAYED_RID_SUFFIX", "is_relayed"]
