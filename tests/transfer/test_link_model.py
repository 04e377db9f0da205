"""The live link model: queue accounting and the fit of observed transfer times."""

import pytest

from sglang_pdd.transfer.link_model import LinkModelConfig, LiveLinkModel

PRIOR = LinkModelConfig(prior_bandwidth_bytes_per_s=1e6, prior_rtt_s=0.2)


def test_prior_before_any_observation():
    model = LiveLinkModel(PRIOR)
    assert model.throughput_bytes_per_s == pytest.approx(1e6)
    assert model.overhead_s == pytest.approx(0.2)
    assert model.predict_s(5e5) == pytest.approx(0.7)


def test_queued_bytes_count_until_landing():
    model = LiveLinkModel(PRIOR)
    model.start("a", 1e6, now=0.0)
    model.start("b", 5e5, now=0.0)
    assert model.queued_bytes == 1.5e6 and model.in_flight == 2
    assert model.predict_s(0) == pytest.approx(0.2 + 1.5)
    model.finish("a", now=1.2)
    assert model.queued_bytes == 5e5
    with pytest.raises(ValueError):
        model.start("b", 1, now=0.0)


def test_fit_learns_a_slower_link_and_its_overhead():
    model = LiveLinkModel(PRIOR)
    # The real link: 250 kB/s and 0.5 s of fixed cost; transfers one at a time.
    t = 0.0
    for i, size in enumerate([1e5, 4e5, 2e5, 8e5, 3e5, 6e5] * 3):
        model.start(i, size, now=t)
        t += 0.5 + size / 2.5e5
        obs = model.finish(i, now=t)
    assert model.throughput_bytes_per_s == pytest.approx(2.5e5, rel=0.1)
    assert model.overhead_s == pytest.approx(0.5, abs=0.1)
    assert abs(obs.error_s) < 0.3


def test_unlearned_and_cancelled_transfers_teach_nothing():
    model = LiveLinkModel(PRIOR)
    model.start("p-md", 1e5, now=0.0)
    assert model.finish("p-md", now=50.0, learn=False).took_s == 50.0
    model.start("failed", 1e5, now=0.0)
    model.cancel("failed")
    assert model.observations == 0 and model.queued_bytes == 0
    assert model.predict_s(0) == pytest.approx(0.2)


def test_config_is_validated():
    with pytest.raises(ValueError, match="forget"):
        LinkModelConfig(1e6, 0.1, forget=1.5)
    with pytest.raises(ValueError, match="bandwidth"):
        LinkModelConfig(0, 0.1)


def test_prefills_measured_bytes_are_a_floor_under_the_claimed_queue():
    """What Prefill measures in hand for the WAN is on the link whatever the routers claimed;
    bytes claimed but not yet handed to the link (prefills still running) count too."""
    model = LiveLinkModel(PRIOR)
    model.others_bytes = lambda: 2e5
    measured: list[float | None] = [None]
    model.measured_bytes = lambda: measured[0]
    model.start("a", 1e5, now=0.0)
    assert model.queued_bytes == 3e5  # no measurement: the claims alone
    measured[0] = 9e5
    assert model.queued_bytes == 9e5
    assert model.predict_s(1e5) == pytest.approx(0.2 + 1.0)
    measured[0] = 1e4
    assert model.queued_bytes == 3e5


def test_transfers_that_waited_elsewhere_do_not_slow_every_later_estimate():
    """Some transfers wait behind P's other prefills before their bytes move: the overhead
    stays the link's fixed cost, not the mean of those waits."""
    model = LiveLinkModel(PRIOR)
    t = 0.0
    for i, size in enumerate([1e5, 4e5, 2e5, 8e5, 3e5, 6e5] * 2):
        model.start(i, size, now=t)
        waited = 5.0 if i % 3 == 0 else 0.0  # a third of them queued 5 s on P first
        t += waited + 0.2 + size / 1e6
        model.finish(i, now=t)
    assert model.overhead_s == pytest.approx(0.2, abs=0.05)
    assert model.predict_s(1e5) < 0.5
