"""Block-level prefix cache model shared by the simulator and the router."""

from sglang_pdd.cache.prefix_blocks import BlockPrefixCache, PrefixHandle, block_hashes

__all__ = ["BlockPrefixCache", "PrefixHandle", "block_hashes"]
