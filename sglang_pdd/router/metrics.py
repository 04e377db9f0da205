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

from sglang_pdd.router.instances.breaker import STATE_VALUES

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
    """Each instance, whether it is in rotation (1) or not (0: failed, draining, stopping), and
    its circuit breaker's state, read at scrape time."""

    def __init__(self, roles: dict[str, str], health) -> None:
        self._roles = roles  # url -> "prefill" | "relay" | "main"
        self._health = health  # router/instances/health.py's InstanceHealth

    def collect(self):
        up = GaugeMetricFamily(
            "sglang_pdd:instance_in_rotation",
            "1 while the router sends the instance new requests, 0 while it is out of rotation",
            labels=["instance", "role"],
        )
        breaker = GaugeMetricFamily(
            "sglang_pdd:instance_breaker_state",
            "the instance's circuit breaker: 0 closed, 1 half-open (on trial), 2 open",
            labels=["instance", "role"],
        )
        out = self._health.out_of_rotation()
        for url, role in self._roles.items():
            up.add_metric([url, role], 0 if url in out else 1)
            breaker.add_metric([url, role], STATE_VALUES[self._health.breaker_state(url)])
        yield from (up, breaker)


class _LedgerCollector:
    """The answers of the transfer ledger shared with other routers, read at scrape time (no
    samples without ``--transfer-ledger``)."""

    def __init__(self, ledger) -> None:
        self._ledger = ledger  # router/instances/ledger_client.py's LedgerClient, or None

    def collect(self):
        claims = CounterMetricFamily(
            "sglang_pdd:ledger_claims",
            "claims of transfers on the shared transfer ledger, by its answer: granted, busy "
            "(another router's transfer carried the prefix: waited for it), unanswered or "
            "refused (sent unclaimed), overdue (sent unclaimed after waiting on others' transfers "
            "for SHARED_WAIT_LIMIT_S)",
            labels=["result"],
        )
        sending = GaugeMetricFamily(
            "sglang_pdd:ledger_wan_sending_bytes",
            "bytes Prefill's writes to the other datacenter had in hand (waiting for the WAN or "
            "on it), as Prefill measured them at the ledger's last answer",
        )
        if self._ledger is not None:
            for result, count in self._ledger.stats.items():
                claims.add_metric([result], count)
            if (nbytes := self._ledger.sending[0]) is not None:
                sending.add_metric([], nbytes)
        yield claims
        yield sending


class RouterMetrics:
    """The router's metrics in their own registry (no process-global state), named as SGLang's.

    ``roles``/``health``: every instance's role and the router's ``InstanceHealth`` (none
    given: no instance gauges); ``ledger``: the shared transfer ledger's client, if any."""

    def __init__(self, mains: dict, roles: dict[str, str] | None = None, health=None, ledger=None):
        disable_created_metrics()  # SGLang's exporters leave out the *_created series too
        self.registry = r = CollectorRegistry()

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(f"sglang_pdd:{name}", doc, labels, registry=r)

        def histogram(name: str, doc: str, buckets=_LATENCY_BUCKETS) -> Histogram:
            return Histogram(f"sglang_pdd:{name}", doc, buckets=buckets, registry=r)

        self.requests = counter(
            "requests", "requests by pipeline and policy rule", "pipeline", "rule"
        )
        self.output_tokens = counter(
            "output_tokens", "output tokens streamed, by the instance that made them", "instance"
        )
        # Its two children, made once: every streamed chunk counts its tokens on one.
        self.output_tokens_of = {
            source: self.output_tokens.labels(source) for source in ("relay", "main")
        }
        self.wan_bytes = counter("wan_bytes", "KV bytes Main-Decode received")
        self.background_failures = counter(
            "background_task_failures",
            "failures of the router's background tasks (each logged, the task run again)",
            "task",
        )
        self.failed = counter(
            "requests_failed", "client requests that ended with an error, by HTTP status", "status"
        )
        self.migrations = counter(
            "migrations", "requests continued on other instances after one failed"
        )
        self.refused_at_capacity = counter(
            "refused_at_capacity", "client requests answered 503 past --max-live-requests"
        )
        self.ttft = histogram("time_to_first_token_seconds", "TTFT at the router")
        self.itl = histogram(
            "inter_token_latency_seconds",
            "gap between streamed outputs at the router",
            _GAP_BUCKETS,
        )
        self.handoff_stall = histogram(
            "handoff_stall_seconds", "Relay-Decode's last token to Main-Decode's first"
        )
        self.main_ready = histogram(
            "main_ready_seconds", "request arrival to Main-Decode reporting its KV in place"
        )
        self.e2e = histogram(
            "e2e_request_latency_seconds",
            "arrival to the last id at the router",
            _LATENCY_BUCKETS + (60, 120, 300),
        )
        self.handoff_gap = histogram(
            "handoff_gap_seconds", "the client-visible gap at each final handoff"
        )
        r.register(_SiteCollector(mains))
        r.register(_LedgerCollector(ledger))
        if roles is not None and health is not None:
            r.register(_InstanceCollector(roles, health))

    def counting_failures_of(self, task: str):
        """An ``on_failure`` for ``supervise``: counts each failure of ``task`` in
        ``sglang_pdd:background_task_failures_total``."""
        counter = self.background_failures.labels(task)
        return lambda _exc: counter.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
