"""The Grafana dashboard: every query names only series the router exports, and the committed
file is the generator's output."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sglang_pdd.router.config import MainEndpoint, RouterConfig
from sglang_pdd.router.dashboard import dashboard
from sglang_pdd.router.state import RouterState

COMMITTED = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "sglang-pdd.json"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def _exported_series() -> set[str]:
    """Every series name the router's /metrics can show, from its own TYPE lines."""
    config = RouterConfig(
        prefill=("http://p:1",),
        relay=("http://r:1",),
        main=(MainEndpoint("http://m:1", "tcp://127.0.0.1:9"),),
    )
    text = RouterState(config).metrics.render().decode()
    series = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        if kind == "counter":  # named with or without _total, by the client's version
            name = name.removesuffix("_total")
        series |= {name + suffix for suffix in _SUFFIXES[kind]}
    return series


def test_every_panel_queries_series_the_router_exports():
    exported = _exported_series()
    panels = dashboard()["panels"]
    assert len(panels) >= 10
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"sglang_pdd:[a-z0-9_]+", target["expr"]))
            assert names and names <= exported, (panel["title"], names - exported)


def test_the_committed_dashboard_is_current():
    assert json.loads(COMMITTED.read_text()) == dashboard(), (
        "regenerate: sglang-pdd dashboard --out examples/grafana/sglang-pdd.json"
    )
