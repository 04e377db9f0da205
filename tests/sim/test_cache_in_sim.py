"""Prefix hits and eviction through the simulator on hand-built traces with known answers."""

import dataclasses

from sglang_pdd.sim.chips import ChipProfile
from sglang_pdd.sim.cluster import ClusterSim
from sglang_pdd.sim.config import PoolSpec

from .helpers import CHIP, config, req, spec


def test_prefill_and_decode_side_hits():
    s = spec("cross-dc")
    recs = ClusterSim(s, config(s)).run(
        [req(0, 0.0, 1024, 2, [1, 2]), req(1, 5.0, 1536, 2, [1, 2, 3])]
    )
    assert (recs[0].prefill_hit_tokens, recs[0].decode_hit_tokens) == (0, 0)
    assert (recs[1].prefill_hit_tokens, recs[1].decode_hit_tokens) == (1024, 1024)
    assert recs[1].wan_bytes == 512 * 1000


def test_decode_cache_disabled_sends_everything():
    s = spec("cross-dc", decode_cache=False)
    recs = ClusterSim(s, config(s)).run(
        [req(0, 0.0, 1024, 2, [1, 2]), req(1, 5.0, 1536, 2, [1, 2, 3])]
    )
    assert recs[1].decode_hit_tokens == 0
    assert recs[1].wan_bytes == 1536 * 1000


def test_small_decode_cache_evicts_least_recent_leaf():
    # 10 GB of weights plus 2 MB of KV pool: 2,000 tokens = 3 blocks of 512.
    tiny = ChipProfile("T", 100.0, 10.002, 100.0, 10.0, 1.0)
    s = dataclasses.replace(spec("cross-dc"), decode=PoolSpec("T", 1))
    cfg = config(s, chips={"X": CHIP, "T": tiny})
    recs = ClusterSim(s, cfg).run(
        [
            req(0, 0.0, 1024, 2, [1, 2]),
            req(1, 5.0, 1024, 2, [5, 6]),  # needs one more block: evicts block 2
            req(2, 10.0, 1024, 2, [1, 2]),
        ]
    )
    assert recs[1].decode_hit_tokens == 0
    assert recs[2].decode_hit_tokens == 512
