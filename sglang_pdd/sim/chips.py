"""Chip, model and engine profiles, turned into prefill and decode step times.

A chip is rated on the brief's four dimensions: peak compute, memory capacity, memory bandwidth
and interconnect bandwidth. An instance is ``chips`` such chips serving one model replica.
Prefill time is compute-bound (linear layers plus attention over the context, at an efficiency
that falls for small chunks); a decode step is memory-bound (weights plus every batched
request's KV read once per step) unless the batch's compute exceeds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def _positive(owner: str, name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{owner}.{name} must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True)
class ChipProfile:
    """One accelerator: the four dimensions plus its cost per hour (any currency unit)."""

    name: str
    peak_tflops: float
    memory_gb: float
    memory_bw_gbs: float
    interconnect_gbs: float
    cost_per_hour: float

    def __post_init__(self) -> None:
        for f in ("peak_tflops", "memory_gb", "memory_bw_gbs", "interconnect_gbs"):
            _positive("chip", f, getattr(self, f))
        _positive("chip", "cost_per_hour", self.cost_per_hour, allow_zero=True)


@dataclass(frozen=True)
class ModelProfile:
    """The served model as the simulator sees it.

    attn_flops_per_ctx_token: attention FLOPs per (new token, context token) pair, which
        carries the context-length dependence of prefill.
    comm_bytes_per_token: tensor-parallel all-reduce traffic per token (ignored on 1 chip).
    """

    name: str = "agentic-moe"
    active_params_b: float = 20.0
    weight_gb: float = 30.0
    kv_bytes_per_token: int = 50_000
    attn_flops_per_ctx_token: float = 2.0e5
    comm_bytes_per_token: float = 1.0e6

    def __post_init__(self) -> None:
        for f in ("active_params_b", "weight_gb", "kv_bytes_per_token"):
            _positive("model", f, getattr(self, f))
        for f in ("attn_flops_per_ctx_token", "comm_bytes_per_token"):
            _positive("model", f, getattr(self, f), allow_zero=True)


@dataclass(frozen=True)
class EngineProfile:
    """Serving-engine efficiencies and limits (calibration constants, see docs/simulator.md).

    mfu: fraction of peak compute reached by a large batch.
    mfu_half_tokens: batch size (tokens) at which efficiency is half of mfu; small tail chunks
        are inefficient, which is where the brief's "bathtub" valleys come from.
    mbu: fraction of memory bandwidth reached by a decode step.
    step_overhead_s: fixed cost of one forward (scheduling, launch, sampling).
    chunk_tokens: chunked-prefill budget per forward.
    max_decode_batch: most requests one decode instance batches.
    memory_reserve_fraction: memory kept from the KV pool (activations, fragmentation).
    kv_per_chunk: the KV leaves Prefill chunk by chunk, as each prefill forward ends (SGLang's
        PD disaggregation), rather than once the whole prefill is done; a long prompt's
        transfer then overlaps its own prefill.
    """

    mfu: float = 0.5
    mfu_half_tokens: float = 256.0
    mbu: float = 0.75
    step_overhead_s: float = 0.004
    chunk_tokens: int = 8192
    max_decode_batch: int = 256
    memory_reserve_fraction: float = 0.1
    kv_per_chunk: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.kv_per_chunk, bool):
            raise ValueError(
                f"engine.kv_per_chunk must be true or false, got {self.kv_per_chunk!r}"
            )
        for f in ("mfu", "mbu"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise ValueError(f"engine.{f} must be in (0, 1], got {v!r}")
        _positive("engine", "mfu_half_tokens", self.mfu_half_tokens, allow_zero=True)
        _positive("engine", "step_overhead_s", self.step_overhead_s, allow_zero=True)
        for f in ("chunk_tokens", "max_decode_batch"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"engine.{f} must be an integer >= 1, got {v!r}")
        r = self.memory_reserve_fraction
        if not isinstance(r, (int, float)) or not 0 <= r < 1:
            raise ValueError(f"engine.memory_reserve_fraction must be in [0, 1), got {r!r}")


class InstancePerf:
    """Step times of one instance (``chips`` chips of one profile) serving ``model``."""

    def __init__(
        self, chip: ChipProfile, model: ModelProfile, engine: EngineProfile, chips: int = 1
    ) -> None:
        if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
            raise ValueError(f"chips per instance must be an integer >= 1, got {chips!r}")
        self.chip, self.model, self.engine, self.chips = chip, model, engine, chips
        self._flops = chip.peak_tflops * 1e12 * chips
        self._mem_bw = chip.memory_bw_gbs * 1e9 * chips * engine.mbu
        self._weight_bytes = model.weight_gb * 1e9
        self._linear_flops = 2.0 * model.active_params_b * 1e9
        # All-reduce traffic only exists when the replica spans chips.
        self._comm_s_per_token = (
            model.comm_bytes_per_token * (chips - 1) / chips / (chip.interconnect_gbs * 1e9)
            if chips > 1
            else 0.0
        )
        pool = chip.memory_gb * 1e9 * chips * (1 - engine.memory_reserve_fraction)
        self.kv_capacity_tokens = max(
            0, int((pool - self._weight_bytes) / model.kv_bytes_per_token)
        )
        if self.kv_capacity_tokens <= 0:
            raise ValueError(
                f"model {model.name} ({model.weight_gb} GB) leaves no KV memory on "
                f"{chips} x {chip.name} ({chip.memory_gb} GB)"
            )
        self.rdma_bytes_per_s = chip.interconnect_gbs * 1e9 * chips

    def _efficiency(self, tokens: float) -> float:
        e = self.engine
        return e.mfu * tokens / (tokens + e.mfu_half_tokens)

    def forward_time(
        self,
        segments: list[tuple[int, float]] = (),
        decode_batch: int = 0,
        decode_context: float = 0.0,
        *,
        on_decode_server: bool = False,
    ) -> float:
        """Seconds for one forward: the one step-time model the simulator and emulated servers
        (``sglang_pdd.emulation``) share.

        segments: (new_tokens, prior_context) of each extend in the batch (prefill chunks, and
            Extend-Decode handoffs of token IDs on top of their context).
        decode_batch, decode_context: requests decoding one token each, and the KV tokens they
            hold together.

        on_decode_server: the forward runs on a decode instance (an extend there is a
            handoff, bound by reading the weights like a decode step).

        The forward does the linear layers over every token plus attention over each token's
        context (compute, at an efficiency that falls for small batches). A forward that
        decodes, or any forward on a decode server, also reads the weights and every context's
        KV once (memory) and takes the longer of the two; a prefill server's forward is
        counted compute-bound, as the simulator was calibrated. Plus tensor-parallel traffic
        and a fixed per-forward overhead.
        """
        tokens = decode_batch
        attn_pairs = float(decode_context)
        kv_tokens = float(decode_context)
        for n, ctx in segments:
            tokens += n
            attn_pairs += n * (ctx + n / 2)
            kv_tokens += ctx + n
        if tokens <= 0:
            return 0.0
        flops = self._linear_flops * tokens + self.model.attn_flops_per_ctx_token * attn_pairs
        compute = flops / (self._flops * self._efficiency(tokens))
        memory = 0.0
        if decode_batch > 0 or on_decode_server:
            kv_bytes = kv_tokens * self.model.kv_bytes_per_token
            memory = (self._weight_bytes + kv_bytes) / self._mem_bw
        return max(memory, compute) + tokens * self._comm_s_per_token + self.engine.step_overhead_s

    def prefill_time(self, segments: list[tuple[int, int]]) -> float:
        """Seconds for one chunked-prefill forward over (new_tokens, prior_context) segments."""
        return self.forward_time(segments)

    def decode_step_time(
        self, batch: int, context_tokens: float, extend_tokens: int = 0, extend_ctx: float = 0
    ) -> float:
        """Seconds for one decode step of ``batch`` requests holding ``context_tokens`` of KV.

        extend_tokens > 0 adds an Extend-Decode handoff: that many token IDs recomputed on top
        of extend_ctx tokens of context in the same forward.
        """
        extends = [(extend_tokens, extend_ctx)] if extend_tokens > 0 else []
        return self.forward_time(extends, batch, context_tokens, on_decode_server=True)
