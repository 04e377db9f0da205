"""``fanout.start_runs``' admission limit: past ``--max-live-requests`` a request is refused at
once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sglang_pdd.router.metrics import RouterMetrics
from sglang_pdd.router.pipeline.fanout import SubRequest, start_runs
from sglang_pdd.router.upstream.calls import UpstreamError


def _state(limit: int, live: int) -> SimpleNamespace:
    return SimpleNamespace(
        config=SimpleNamespace(max_live_requests=limit),
        live={f"r{i}": None for i in range(live)},
        metrics=RouterMetrics({}),
    )


@pytest.mark.parametrize(("live", "subs"), [(4, 1), (3, 2), (0, 5)])
def test_past_the_limit_a_request_gets_503_naming_the_flag(live, subs):
    state = _state(4, live)
    with pytest.raises(UpstreamError) as refused:
        start_runs(state, [SubRequest([1], {}, {})] * subs)
    assert refused.value.status == 503
    assert "--max-live-requests" in refused.value.body["error"]["message"]
    assert refused.value.headers == {"Retry-After": "1"}
    assert len(state.live) == live  # nothing registered
    assert b"sglang_pdd:refused_at_capacity_total 1.0" in state.metrics.render()
