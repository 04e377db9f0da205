"""PNG plots of a sim run (matplotlib, Agg backend, imported only when plots are asked for)."""

from __future__ import annotations

from pathlib import Path

from sglang_pdd.sim.cluster import RequestRecord
from sglang_pdd.sim.metrics import ContenderResult


def _latencies(recs: list[RequestRecord], metric: str, measure_from_s: float) -> list[float]:
    """Each measured request's TTFT, E2E or mean ITL (``metric``: ttft, e2e, itl)."""
    vals = []
    for r in recs:
        if r.arrival_s < measure_from_s:
            continue
        if metric == "ttft":
            vals.append(r.first_token_s - r.arrival_s)
        elif metric == "e2e":
            vals.append(r.done_s - r.arrival_s)
        elif r.output_tokens > 1:
            vals.append((r.done_s - r.first_token_s) / (r.output_tokens - 1))
    return vals


def write_plots(
    out_dir: str | Path,
    results: list[ContenderResult],
    records: dict[str, list[RequestRecord]],
    measure_from_s: float = 0.0,
) -> list[Path]:
    """TTFT and ITL CDFs per contender, and BCR / RLD share bars; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def cdf(ax, values, label):
        v = sorted(values)
        n = len(v)
        if n:
            ax.plot(v, [(i + 1) / n for i in range(n)], label=label)

    for metric, fname, xlabel in (
        ("ttft", "ttft_cdf.png", "TTFT (s)"),
        ("itl", "itl_cdf.png", "mean inter-token latency per request (s)"),
        ("e2e", "e2e_cdf.png", "end-to-end latency (s)"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, recs in records.items():
            cdf(ax, _latencies(recs, metric, measure_from_s), name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / fname
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4))
    names = [r.name for r in results]
    ax1.bar(names, [r.summary["bcr"] for r in results])
    ax1.set_title("BCR (SLA requests/h per cost/h)")
    ax2.bar(names, [r.summary["relay_token_share"] * 100 for r in results])
    ax2.set_title("output tokens made by RLD (%)")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    path = out / "bcr_relay_share.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written
