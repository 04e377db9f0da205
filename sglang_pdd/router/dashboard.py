"""A Grafana dashboard for the router's metrics (``sglang-pdd dashboard > sglang-pdd.json``).

Written once as a table of panels; ``tests/router/test_dashboard.py`` checks that every query
names only series the router exports and that the committed ``examples/grafana/sglang-pdd.json``
is this module's output.
"""

from __future__ import annotations

import argparse
import json

_Q = "histogram_quantile({q}, sum by (le) (rate(sglang_pdd:{name}_bucket[5m])))"


def _quantiles(name: str, qs=(0.5, 0.9, 0.99)) -> list[tuple[str, str]]:
    return [(_Q.format(q=q, name=name), f"p{round(q * 100):d}") for q in qs]


# (title, unit, [(PromQL, legend)]) in reading order, two panels a row.
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "Requests by pipeline",
        "reqps",
        [("sum by (pipeline) (rate(sglang_pdd:requests_total[1m]))", "{{pipeline}}")],
    ),
    ("Time to first token", "s", _quantiles("time_to_first_token_seconds")),
    ("End-to-end latency (the whole answer)", "s", _quantiles("e2e_request_latency_seconds")),
    ("Inter-token latency", "s", _quantiles("inter_token_latency_seconds", (0.5, 0.99))),
    (
        "Handoff gap (client-visible) and RLD-to-MD stall",
        "s",
        _quantiles("handoff_gap_seconds", (0.5, 0.99))
        + [(_Q.format(q=0.5, name="handoff_stall_seconds"), "stall p50")],
    ),
    (
        "Relay-Decode share of output tokens",
        "percentunit",
        [
            (
                'sum(rate(sglang_pdd:output_tokens_total{instance="relay"}[5m])) / '
                "sum(rate(sglang_pdd:output_tokens_total[5m]))",
                "RLD share",
            )
        ],
    ),
    (
        "WAN: KV bytes received by Main-Decode, queued on the link",
        "Bps",
        [
            ("rate(sglang_pdd:wan_bytes_total[1m])", "received"),
            ("sum by (main) (sglang_pdd:link_queued_bytes)", "queued {{main}}"),
        ],
    ),
    (
        "Main-Decode KV ready (from arrival)",
        "s",
        _quantiles("main_ready_seconds", (0.5, 0.9)),
    ),
    (
        "Transfers: in flight, waits, duplicates (must stay 0)",
        "short",
        [
            ("sum by (main) (sglang_pdd:link_transfers_in_flight)", "in flight {{main}}"),
            ("sum(rate(sglang_pdd:transfer_waits_total[5m]))", "waits/s"),
            ("sum(sglang_pdd:duplicate_transfers_total)", "duplicates"),
        ],
    ),
    (
        "Router replicas: transfer ledger claims",
        "reqps",
        [("sum by (result) (rate(sglang_pdd:ledger_claims_total[5m]))", "{{result}}")],
    ),
    (
        "Router replicas: WAN bytes in hand at Prefill (measured, per router's last answer)",
        "bytes",
        [("max(sglang_pdd:ledger_wan_sending_bytes)", "in hand")],
    ),
    (
        "Errors by status, refused at capacity",
        "reqps",
        [
            ("sum by (status) (rate(sglang_pdd:requests_failed_total[5m]))", "{{status}}"),
            ("rate(sglang_pdd:refused_at_capacity_total[5m])", "503 at capacity"),
        ],
    ),
    ("Migrations", "short", [("increase(sglang_pdd:migrations_total[5m])", "per 5 min")]),
    (
        "Instances in rotation (0: failed, draining or stopping)",
        "short",
        [("sglang_pdd:instance_in_rotation", "{{role}} {{instance}}")],
    ),
    (
        "Circuit breakers (0 closed, 1 half-open, 2 open)",
        "short",
        [("sglang_pdd:instance_breaker_state", "{{role}} {{instance}}")],
    ),
]


def dashboard() -> dict:
    """The dashboard as Grafana's JSON model (a Prometheus data source chosen at import)."""
    panels = []
    for i, (title, unit, queries) in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"x": 12 * (i % 2), "y": 8 * (i // 2), "w": 12, "h": 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend}
                    for j, (expr, legend) in enumerate(queries)
                ],
            }
        )
    return {
        "title": "sglang-pdd router",
        "uid": "sglang-pdd-router",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                }
            ]
        },
        "panels": panels,
    }


def main(argv: list[str]) -> int:
    """Entry point of ``sglang-pdd dashboard``."""
    parser = argparse.ArgumentParser(
        prog="sglang-pdd dashboard", description="print the router's Grafana dashboard (JSON)"
    )
    parser.add_argument("--out", help="write it to this file instead of standard output")
    args = parser.parse_args(argv)
    text = json.dumps(dashboard(), indent=2) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text, end="")
    return 0
