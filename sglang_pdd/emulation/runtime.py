"""The emulated chip of this scheduler process: its pacer, its counters' log line and metrics.

``install`` runs once per scheduler (``patches/scheduler_init.py``); ``pacer()`` is what the
forward hook (``patches/emulated_forward.py``) asks for, None on a server without emulation.
"""

from __future__ import annotations

import logging
import time

from sglang_pdd.emulation.config import EmulationConfig
from sglang_pdd.emulation.forward import ForwardPacer, ForwardShape

logger = logging.getLogger("sglang_pdd")

LOG_PREFIX = "sglang-pdd: emulation"
LOG_EVERY_S = 1.0  # at most one counters line per second while forwards run

_pacer: ForwardPacer | None = None
_metrics = None
_last_log = 0.0


def pacer() -> ForwardPacer | None:
    """This process's pacer (None: the server emulates no chip)."""
    return _pacer


def install(config: EmulationConfig, *, on_decode_server: bool, real_kv_bytes: int, metrics: bool):
    """Start emulating ``config`` in this scheduler process: the forward pacer, and the KV
    scale (emulated model bytes per real byte) the transfer ledger charges links with."""
    global _pacer, _metrics
    from sglang_pdd.transfer.ledger import ledger

    if real_kv_bytes <= 0:  # a scale of 1 would pace the links at the CPU model's bytes
        raise RuntimeError(
            "--pdd-emulate-chip: this server's KV bytes per token could not be read from its "
            "KV pool, so its KV cannot be charged at the emulated model's size"
        )
    _pacer = ForwardPacer(config, on_decode_server=on_decode_server)
    scale = config.model_kv_bytes(1) / real_kv_bytes
    local = config.perf.rdma_bytes_per_s / config.time_dilation
    ledger().set_emulation(kv_scale=scale, local_bytes_per_s=local)
    if metrics:
        _metrics = _Metrics()
    logger.warning(
        "%s chip=%s x%d model=%s token_scale=%d time_dilation=%g kv_scale=%.6f "
        "local_link_gbps=%.1f",
        LOG_PREFIX,
        config.chip.name,
        config.chips,
        config.model.name,
        config.token_scale,
        config.time_dilation,
        scale,
        local * 8 / 1e9,
    )


def after_forward(shape: ForwardShape, overrun: bool) -> None:
    """Update the metrics and, at most once a second, log the counters."""
    global _last_log
    s = _pacer.stats
    if _metrics is not None and not shape.empty:
        _metrics.forwards.inc()
        if overrun:
            _metrics.overruns.inc()
    now = time.monotonic()
    if now - _last_log < LOG_EVERY_S:
        return
    _last_log = now
    logger.info(
        "%s forwards=%d overruns=%d emulated_s=%.3f real_s=%.3f overrun_s=%.3f "
        "cpu_between_forwards_ms=%.3f",
        LOG_PREFIX,
        s.forwards,
        s.overruns,
        s.emulated_s,
        s.real_s,
        s.overrun_s,
        1000 * s.between_cpu_s / s.iterations if s.iterations else 0.0,
    )


class _Metrics:
    """Prometheus counters on SGLang's /metrics (``--enable-metrics``)."""

    def __init__(self) -> None:
        from prometheus_client import Counter

        self.forwards = Counter(
            "sglang_pdd:emulated_forwards", "forwards padded to the emulated chip's duration"
        )
        self.overruns = Counter(
            "sglang_pdd:emulated_overruns",
            "forwards whose real CPU time exceeded their emulated duration",
        )
