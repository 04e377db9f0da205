"""Step-time model and fair-share links against hand-computed values."""

import random

import pytest
import simpy

from sglang_pdd.sim.chips import InstancePerf
from sglang_pdd.sim.defaults import CHIP_A, CHIP_B, DEFAULT_ENGINE, DEFAULT_MODEL
from sglang_pdd.sim.link import FairShareLink, LinkConfig

from .helpers import CHIP, ENGINE, MODEL


def test_toy_prefill_and_decode_times():
    perf = InstancePerf(CHIP, MODEL, ENGINE)
    assert perf.prefill_time([(1000, 0)]) == pytest.approx(1000 * 2e9 / 1e14)
    # 10 GB weights + 4 x 1000 tokens x 1 KB of KV at 100 GB/s.
    assert perf.decode_step_time(4, 4000) == pytest.approx((10e9 + 4e6) / 100e9)
    assert perf.kv_capacity_tokens == int((100e9 - 10e9) / 1000)


def test_prefill_grows_with_context_and_small_chunks_are_inefficient():
    perf = InstancePerf(CHIP_A, DEFAULT_MODEL, DEFAULT_ENGINE, 8)
    assert perf.prefill_time([(4096, 60_000)]) > perf.prefill_time([(4096, 0)])
    per_token_small = perf.prefill_time([(64, 0)]) / 64
    per_token_big = perf.prefill_time([(8192, 0)]) / 8192
    assert per_token_small > 2 * per_token_big


def test_chip_b_decodes_about_twice_as_fast_and_prefills_slower():
    a = InstancePerf(CHIP_A, DEFAULT_MODEL, DEFAULT_ENGINE, 8)
    b = InstancePerf(CHIP_B, DEFAULT_MODEL, DEFAULT_ENGINE, 8)
    ratio = a.decode_step_time(64, 64 * 50_000) / b.decode_step_time(64, 64 * 50_000)
    assert 1.7 < ratio < 2.1
    assert b.prefill_time([(8192, 0)]) > a.prefill_time([(8192, 0)])


def _link(**kw):
    env = simpy.Environment()
    cfg = LinkConfig(bandwidth_gbps=8.0, rtt_s=0.0, jitter_s=0.0, **kw)  # 1 GB/s
    return env, FairShareLink(env, cfg, random.Random(0))


def test_fair_sharing_finish_times():
    env, link = _link()
    done = {}
    link.send(1e9, lambda t: done.setdefault("big", t))
    env.timeout(0.5).callbacks.append(
        lambda _e: link.send(0.25e9, lambda t: done.setdefault("small", t))
    )
    env.run()
    # Alone for 0.5 s (0.5 GB), then two flows at 0.5 GB/s: small needs 0.5 s more.
    assert done["small"] == pytest.approx(1.0)
    # Big had 0.25 GB left at t=1.0, alone again at 1 GB/s.
    assert done["big"] == pytest.approx(1.25)
    assert link.bytes_sent == pytest.approx(1.25e9)


def test_per_flow_cap_and_estimate():
    env, link = _link(max_flow_gbps=4.0)
    done = []
    link.send(1e9, done.append)
    env.run(until=0.1)
    # One capped flow at 0.5 GB/s on a 1 GB/s path: a new 1 GB flow would also run at 0.5 GB/s
    # (they fit side by side), so it needs 2 s: max(backlog 0.95 GB + 1 GB, 1 GB x 2) / 1 GB/s.
    est = link.estimate(1e9)
    assert est.bandwidth_bytes_per_s == pytest.approx(1e9)
    assert est.transfer_time_s(1e9) == pytest.approx(2.0)
    env.run()
    assert done == [pytest.approx(2.0)]


def test_link_config_validation():
    with pytest.raises(ValueError, match="bandwidth_gbps"):
        LinkConfig(bandwidth_gbps=0.0)
