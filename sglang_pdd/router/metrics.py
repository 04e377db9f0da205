"""``RouterMetrics``: the router's Prometheus metrics (``GET /metrics``), named like SGLang's.

Counters and histograms are updated as requests run; link and transfer state is read from the
``MainSite``s when scraped, so it is always current.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 30)
_GAP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)


class _SiteCollector:
    """Per-Main-Decode link and transfer state, read at scrape time."""

    def __init__(self, mains: dict) -> None:
        self._mains = mains

    def collect(self):
        queued = GaugeMetricFamily(
            "sglang_pdd:link_queued_bytes",
            "KV bytes dispatched to Main-Decode not landed yet",
            labels=["main"],
        )
        inflight = GaugeMetricFamily(
            "sglang_pdd:link_transfers_in_flight",
            "transfers on the link to Main-Decode",
            labels=["main"],
        )
        throughput = GaugeMetricFamily(
            "sglang_pdd:link_throughput_bytes_per_second",
            "throughput the live link model has observed",
            labels=["main"],
        )
        error = GaugeMetricFamily(
            "sglang_pdd:link_estimate_error_seconds",
            "last landed transfer: measured minus predicted duration",
            labels=["main"],
        )
        warms = GaugeMetricFamily(
            "sglang_pdd:deferred_warm_transfers",
            "cache-warming transfers waiting for the link",
            labels=["main"],
        )
        dup = CounterMetricFamily(
            "sglang_pdd:duplicate_transfers",
            "transfers that carried blocks another transfer was carrying (must stay 0)",
            labels=["main"],
        )
        waits = CounterMetricFamily(
            "sglang_pdd:transfer_waits",
            "requests that waited for their prefix already on the link",
            labels=["main"],
        )
        for url, site in self._mains.items():
            t, link = site.transfers, site.transfers.link
            queued.add_metric([url], link.queued_bytes)
            inflight.add_metric([url], link.in_flight)
            throughput.add_metric([url], link.throughput_bytes_per_s)
            error.add_metric([url], t.stats.last_error_s)
            warms.add_metric([url], t.queued_warms)
            dup.add_metric([url], t.stats.duplicate_transfers)
            waits.add_metric([url], t.stats.waited)
        yield from (queued, inflight, throughput, error, warms, dup, waits)


class _InstanceCollector:
    """Each instance and whether it is in rotation (1) or not (0: failed, draining, stopping),
    read at scrape time."""

    def __init__(self, roles: dict[str, str], out_of_rotation) -> None:
        self._roles = roles  # url -> "prefill" | "relay" | "main"
        self._out = out_of_rotation

    def collect(self):
        up = GaugeMetricFamily(
            "sglang_pdd:instance_in_rotation",
            "1 while the router sends the instance new requests, 0 while it is out of rotation",
            labels=["instance", "role"],
        )
        out = self._out()
        for url, role in self._roles.items():
            up.add_metric([url, role], 0 if url in out else 1)
        yield up


class RouterMetrics:
    """The router's metrics in their own registry (no process-global state).

    ``roles``/``out_of_rotation``: every instance's role and the health view's set of those out
    of rotation (none given: no instance gauge)."""

    def __init__(self, mains: dict, roles: dict[str, str] | None = None, out_of_rotation=None):
        disable_created_metrics()  # SGLang's exporters leave out the *_created series too
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "sglang_pdd:requests",
            "requests by pipeline and policy rule",
            ["pipeline", "rule"],
            registry=r,
        )
        self.output_tokens = Counter(
            "sglang_pdd:output_tokens",
            "output tokens streamed, by the instance that made them",
            ["instance"],
            registry=r,
        )
        self.ttft = Histogram(
            "sglang_pdd:time_to_first_token_seconds",
            "TTFT at the router",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "sglang_pdd:inter_token_latency_seconds",
            "gap between streamed outputs at the router",
            buckets=_GAP_BUCKETS,
            registry=r,
        )
        self.handoff_stall = Histogram(
            "sglang_pdd:handoff_stall_seconds",
            "Relay-Decode's last token to Main-Decode's first",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.main_ready = Histogram(
            "sglang_pdd:main_ready_seconds",
            "request arrival to Main-Decode reporting its KV in place",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.wan_bytes = Counter(
            "sglang_pdd:wan_bytes", "KV bytes Main-Decode received", registry=r
        )
        self.e2e = Histogram(
            "sglang_pdd:e2e_request_latency_seconds",
            "arrival to the last id at the router",
            buckets=_LATENCY_BUCKETS + (60, 120, 300),
            registry=r,
        )
        self.handoff_gap = Histogram(
            "sglang_pdd:handoff_gap_seconds",
            "the client-visible gap at each final handoff",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.failed = Counter(
            "sglang_pdd:requests_failed",
            "client requests that ended with an error, by HTTP status",
            ["status"],
            registry=r,
        )
        self.migrations = Counter(
            "sglang_pdd:migrations",
            "requests continued on other instances after one failed",
            registry=r,
        )
        self.refused_at_capacity = Counter(
            "sglang_pdd:refused_at_capacity",
            "client requests answered 503 past --max-live-requests",
            registry=r,
        )
        r.register(_SiteCollector(mains))
        if roles is not None:
            r.register(_InstanceCollector(roles, out_of_rotation or frozenset))

    def render(self) -> bytes:
        return generate_latest(self.registry)
