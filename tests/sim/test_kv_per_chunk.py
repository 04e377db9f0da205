"""KV sent chunk by chunk as Prefill's forwards end (``EngineProfile.kv_per_chunk``)."""

from __future__ import annotations

import dataclasses

import pytest

from sglang_pdd.sim.chips import EngineProfile
from sglang_pdd.sim.link import LinkConfig
from sglang_pdd.sim.runner import run_contender
from tests.sim.helpers import ENGINE, config, req, spec

# 1e7 bytes/s: a 10 MB prompt's KV takes 1 s, five times its prefill.
SLOW_WAN = LinkConfig(bandwidth_gbps=0.08, rtt_s=0.01, jitter_s=0.0)


def _run(kind: str, per_chunk: bool, **kw):
    # 1000-token chunks of 0.02 s each (toy chip and model: 2e-5 s a token).
    engine = dataclasses.replace(ENGINE, chunk_tokens=1000, kv_per_chunk=per_chunk)
    s = spec(kind, wan=SLOW_WAN, **kw)
    cfg = dataclasses.replace(config(s), engine=engine)
    _, (rec,) = run_contender(s, cfg, [req(0, 0.0, 10_000, 2, range(10))])
    return rec


def test_a_transfer_bound_prompt_overlaps_its_prefill():
    whole, chunked = _run("cross-dc", False), _run("cross-dc", True)
    assert whole.prefill_done_s == pytest.approx(0.2)
    # Whole: after the prefill, one RTT, then 10 MB at 1e7 B/s.
    assert whole.main_kv_s == pytest.approx(0.2 + 0.01 + 1.0)
    # Per chunk: the link is busy from the first chunk's end plus one RTT to the last byte.
    assert chunked.main_kv_s == pytest.approx(0.02 + 0.01 + 1.0)
    assert chunked.wan_bytes == whole.wan_bytes == 10_000 * 1000
    assert chunked.first_token_s < whole.first_token_s


def test_the_last_piece_still_waits_for_the_prefill():
    fast = LinkConfig(bandwidth_gbps=8.0, rtt_s=0.01, jitter_s=0.0)
    engine = dataclasses.replace(ENGINE, chunk_tokens=1000, kv_per_chunk=True)
    s = spec("cross-dc", wan=fast)
    cfg = dataclasses.replace(config(s), engine=engine)
    _, (rec,) = run_contender(s, cfg, [req(0, 0.0, 10_000, 2, range(10))])
    # The last 1 MB leaves at 0.2 s, one RTT and 1 ms later it has landed.
    assert rec.main_kv_s == pytest.approx(0.2 + 0.01 + 0.001)


@pytest.mark.parametrize("kind", ["same-dc", "pdd"])
def test_every_contender_finishes_every_request(kind):
    rec = _run(kind, True)
    assert rec.done_s > rec.first_token_s > rec.prefill_done_s > 0
    assert rec.completions == 1


def test_a_cached_prompt_sends_only_what_the_decode_cache_lacks():
    engine = dataclasses.replace(ENGINE, chunk_tokens=1000, kv_per_chunk=True)
    s = spec("cross-dc", wan=SLOW_WAN)
    cfg = dataclasses.replace(config(s), engine=engine, block_tokens=1000)
    reqs = [req(0, 0.0, 10_000, 2, range(10)), req(1, 5.0, 12_000, 2, range(12))]
    _, (_, second) = run_contender(s, cfg, reqs)
    assert second.decode_hit_tokens == 10_000
    assert second.wan_bytes == 2_000 * 1000


def test_the_flag_is_checked():
    with pytest.raises(ValueError, match="kv_per_chunk"):
        EngineProfile(kv_per_chunk=1)


def test_a_fifo_link_carries_transfers_in_order_each_half_an_rtt_after_its_last_byte():
    import random

    import simpy

    from sglang_pdd.sim.link import FifoLink, make_link

    env = simpy.Environment()
    cfg = LinkConfig(bandwidth_gbps=0.08, rtt_s=0.02, jitter_s=0.0, fifo=True)
    link = make_link(env, cfg, random.Random(0))
    assert isinstance(link, FifoLink)
    landed = {}
    link.send(1e6, lambda t: landed.setdefault("a", t))  # 0.1 s at 1e7 B/s
    env.timeout(0.05).callbacks.append(
        lambda _e: link.send(1e6, lambda t: landed.setdefault("b", t))
    )
    env.run()
    # The second waits for the first's last byte (0.1 s), then takes its own 0.1 s.
    assert landed == pytest.approx({"a": 0.1 + 0.01, "b": 0.2 + 0.01})
    assert link.utilization(0.2) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="fifo"):
        LinkConfig(fifo=1)
