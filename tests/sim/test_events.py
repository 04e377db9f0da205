"""Event ordering and exact timings on hand-built traces."""

import pytest

from sglang_pdd.sim.cluster import ClusterSim
from sglang_pdd.sim.runner import run_contender

from .helpers import config, req, spec

T_PREFILL_1K = 1000 * 2e9 / 1e14  # 0.02 s for 1,000 new tokens on the toy chip


def test_fifo_prefill_and_timestamps_are_ordered():
    s = spec("same-dc")
    cfg = config(s)
    reqs = [req(i, 0.001 * i, 1000, 5, [100 + i]) for i in range(5)]
    records = ClusterSim(s, cfg).run(reqs)
    done = [r.prefill_done_s for r in records]
    assert done == sorted(done)
    # One prefill instance, no batching benefit: the k-th finishes after k prefills.
    assert done[-1] == pytest.approx(5 * T_PREFILL_1K, rel=1e-6)
    for r in records:
        assert r.arrival_s < r.prefill_done_s < r.first_token_s < r.done_s


def test_decode_finish_time_is_tokens_times_step():
    s = spec("same-dc")
    cfg = config(s)
    (rec,) = ClusterSim(s, cfg).run([req(0, 0.0, 1000, 11, [1])])
    step = (10e9 + 1000 * 1000) / 100e9  # weights + KV read once per step
    transfer = 2e-5 + 1000 * 1000 / 10e9  # intra-DC RTT + 1 MB at 10 GB/s
    assert rec.first_token_s == pytest.approx(T_PREFILL_1K + transfer + step, rel=1e-3)
    assert rec.done_s == pytest.approx(T_PREFILL_1K + transfer + 11 * step, rel=1e-3)


def test_cross_dc_adds_the_wan_transfer():
    same, cross = spec("same-dc"), spec("cross-dc")
    cfg = config(same, cross)
    r = [req(0, 0.0, 1000, 3, [1, 2])]
    t_same = run_contender(same, cfg, r)[1][0].first_token_s
    t_cross = run_contender(cross, cfg, r)[1][0].first_token_s
    wan = 0.01 + 1000 * 1000 / 1e9  # RTT + 1 MB at 1 GB/s
    intra = 2e-5 + 1000 * 1000 / 10e9
    assert t_cross - t_same == pytest.approx(wan - intra, rel=1e-3)
