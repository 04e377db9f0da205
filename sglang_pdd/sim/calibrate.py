"""Calibrating the simulator against measurements: fits, the calibrated config, testbed replays.

The CPU testbed (``benchmark/testbed.py``) records, per request, the prompt, the send time, the
TTFT, the streamed inter-chunk gaps and the output ids. From those this module fits

* a decode step: ``step(C) = step_s + per_context_token_s * C`` (``C``: KV tokens of the whole
  batch, averaged over the request's decode), from each request's mean inter-token gap;
* a prefill: ``TTFT = fixed_s + per_token_s * n + per_token_context_s * n * (h + n / 2) +``
  (what the simulator adds: one step overhead per chunked forward, the KV's intra-DC transfer and
  the first decode step), from TTFTs of same-datacenter PD, ``n`` uncached and ``h`` cached
  prompt tokens;

and turns them into a ``SimConfig`` whose chip, model and engine give exactly these times
(peak 1 TFLOP/s at efficiency 1, so FLOPs are seconds times 1e12). ``fixed_s`` (HTTP, scheduling,
the KV handshake) becomes the intra-DC path's start-up time. Fits are non-negative least squares:
a coefficient the data would make negative is dropped.

``testbed_prompts`` and ``testbed_requests`` rebuild a replayed workload's exact prompts (the
testbed's sessions plus the recorded outputs) as simulator requests with chained block hashes,
so prefix sharing is the testbed's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sglang_pdd.cache.prefix_blocks import block_hashes
from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.sim.chips import ChipProfile, EngineProfile, ModelProfile
from sglang_pdd.sim.config import ClusterSpec, PoolSpec, SimConfig
from sglang_pdd.sim.link import LinkConfig
from sglang_pdd.sim.workload import Request

CHIP_NAME = "testbed-cpu"
# Calibrated chips run at 1 TFLOP/s with efficiency 1: a FLOP count is 1e12 x its seconds.
_PEAK_FLOPS = 1e12
# Floor for slopes the fit puts at zero: profiles need positive rates; this is ~1e-12 s a token.
_TINY = 1e-12


@dataclass(frozen=True)
class LinearFit:
    """y = sum(coef[i] * x[i]) fitted by non-negative least squares."""

    names: tuple[str, ...]
    coef: tuple[float, ...]
    rmse: float
    samples: int

    def __getitem__(self, name: str) -> float:
        return self.coef[self.names.index(name)]


def fit_nonnegative(columns: Mapping[str, Sequence[float]], y: Sequence[float]) -> LinearFit:
    """Least squares of y on the named columns with every coefficient >= 0.

    Tries every subset of columns (there are a handful) and keeps the best fit whose
    coefficients are all non-negative; dropped columns get 0.
    """
    names = tuple(columns)
    target = np.asarray(y, dtype=float)
    if not names:
        raise ValueError("fit_nonnegative needs at least one column")
    if len(target) < len(names):
        raise ValueError(f"{len(target)} samples cannot fit {len(names)} coefficients")
    x = np.column_stack([np.asarray(columns[n], dtype=float) for n in names])
    if x.shape[0] != len(target) or not np.all(np.isfinite(x)) or not np.all(np.isfinite(target)):
        raise ValueError("fit_nonnegative: columns and y must be finite and of equal length")
    best: tuple[float, np.ndarray] | None = None
    for k in range(len(names), 0, -1):
        for subset in itertools.combinations(range(len(names)), k):
            sol, *_ = np.linalg.lstsq(x[:, subset], target, rcond=None)
            if np.any(sol < 0):
                continue
            coef = np.zeros(len(names))
            coef[list(subset)] = sol
            sse = float(np.sum((x @ coef - target) ** 2))
            if best is None or sse < best[0] - 1e-15:
                best = (sse, coef)
    if best is None:  # every column alone has a negative slope: the zero model
        best = (float(np.sum(target**2)), np.zeros(len(names)))
    sse, coef = best
    return LinearFit(
        names, tuple(float(c) for c in coef), math.sqrt(sse / len(target)), len(target)
    )


@dataclass(frozen=True)
class DecodeFit:
    """A decode step: step_s plus per_context_token_s per KV token held by the batch."""

    step_s: float
    per_context_token_s: float
    rmse_s: float
    samples: int

    def step_time(self, context_tokens: float) -> float:
        """Seconds of one step of a batch holding context_tokens of KV."""
        return self.step_s + self.per_context_token_s * context_tokens


def fit_decode(mean_gaps_s: Sequence[float], contexts: Sequence[float]) -> DecodeFit:
    """Fit step(C) from requests' mean inter-token gaps and their batches' mean KV tokens."""
    f = fit_nonnegative({"step": [1.0] * len(mean_gaps_s), "ctx": contexts}, mean_gaps_s)
    return DecodeFit(f["step"], f["ctx"], f.rmse, f.samples)


def mean_batch_context(
    spans: Sequence[tuple[float, float, int, int]], points: int = 64
) -> list[float]:
    """For each decode span (start_s, end_s, prompt_tokens, output_tokens): the KV tokens of
    every span decoding at the same time (itself included), averaged over its own span.

    A span holds its prompt plus its output made so far, growing linearly from start to end.
    """
    out = []
    for start, end, _, _ in spans:
        if end <= start:
            raise ValueError(f"decode span must end after it starts, got {start}..{end}")
        total = 0.0
        for i in range(points):
            t = start + (i + 0.5) * (end - start) / points
            for s, e, prompt, output in spans:
                if s <= t < e:
                    total += prompt + output * (t - s) / (e - s)
        out.append(total / points)
    return out


@dataclass(frozen=True)
class KnownHardware:
    """What is known of the testbed rather than fitted.

    weight_bytes: the model's weights (read once per decode step).
    kv_capacity_tokens: each server's KV pool (``--max-total-tokens``).
    chunk_tokens: ``--chunked-prefill-size``.
    intra_gbs: the assumed KV rate between servers of one datacenter (loopback TCP); the fit
        subtracts the time it gives, so only its order of magnitude matters.
    """

    kv_bytes_per_token: int
    weight_bytes: float
    kv_capacity_tokens: int
    chunk_tokens: int
    intra_gbs: float = 1.0
    max_decode_batch: int = 256

    def __post_init__(self) -> None:
        for name in (
            "kv_bytes_per_token",
            "kv_capacity_tokens",
            "chunk_tokens",
            "max_decode_batch",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("weight_bytes", "intra_gbs"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a number > 0, got {v!r}")


def forward_overhead_s(decode: DecodeFit, hw: KnownHardware) -> float:
    """The engine's fixed cost per forward: the decode step's fixed part less the weights' read."""
    bytes_per_s = hw.kv_bytes_per_token / max(decode.per_context_token_s, _TINY)
    return max(0.0, decode.step_s - hw.weight_bytes / bytes_per_s)


@dataclass(frozen=True)
class PrefillFit:
    """Prefill of n new tokens on h cached ones: fixed_s + per_token_s * n +
    per_token_context_s * n * (h + n / 2), besides the per-forward overhead."""

    fixed_s: float
    per_token_s: float
    per_token_context_s: float
    rmse_s: float
    samples: int

    def compute_s(self, new_tokens: int, cached_tokens: int) -> float:
        """The token-dependent part (linear layers and attention)."""
        n = new_tokens
        return self.per_token_s * n + self.per_token_context_s * n * (cached_tokens + n / 2)


def fit_prefill(
    new_tokens: Sequence[int],
    cached_tokens: Sequence[int],
    ttfts_s: Sequence[float],
    decode: DecodeFit,
    hw: KnownHardware,
) -> PrefillFit:
    """Fit the prefill from same-datacenter TTFTs, less what the simulator adds around it.

    The simulator's TTFT of a request nobody queues behind is: one forward overhead per chunk,
    the compute, the intra-DC transfer (start-up plus bytes) and the first decode step.
    """
    if not len(new_tokens) == len(cached_tokens) == len(ttfts_s):
        raise ValueError("new_tokens, cached_tokens and ttfts_s must have equal lengths")
    ovh = forward_overhead_s(decode, hw)
    y = []
    for n, h, ttft in zip(new_tokens, cached_tokens, ttfts_s, strict=True):
        if n < 1 or h < 0:
            raise ValueError(f"need new_tokens >= 1 and cached_tokens >= 0, got {n}, {h}")
        transfer = (n + h) * hw.kv_bytes_per_token / (hw.intra_gbs * 1e9)
        forwards = math.ceil(n / hw.chunk_tokens)
        y.append(ttft - ovh * forwards - transfer - decode.step_time(n + h))
    cols = {
        "fixed": [1.0] * len(y),
        "token": [float(n) for n in new_tokens],
        "attn": [n * (h + n / 2) for n, h in zip(new_tokens, cached_tokens, strict=True)],
    }
    f = fit_nonnegative(cols, y)
    return PrefillFit(f["fixed"], f["token"], f["attn"], f.rmse, f.samples)


@dataclass(frozen=True)
class Calibration:
    """Fitted decode and prefill on known hardware; builds the simulator's profiles."""

    hardware: KnownHardware
    decode: DecodeFit
    prefill: PrefillFit

    def chip(self) -> ChipProfile:
        """A chip whose bandwidth gives the decode fit's per-token slope."""
        hw = self.hardware
        bw = hw.kv_bytes_per_token / max(self.decode.per_context_token_s, _TINY)
        # Half a token of slack keeps int() from rounding the KV pool one token short.
        memory = hw.weight_bytes + (hw.kv_capacity_tokens + 0.5) * hw.kv_bytes_per_token
        return ChipProfile(CHIP_NAME, _PEAK_FLOPS / 1e12, memory / 1e9, bw / 1e9, hw.intra_gbs, 0.0)

    def model(self) -> ModelProfile:
        """A model whose FLOPs at the chip's peak are the prefill fit's seconds."""
        return ModelProfile(
            name="testbed-tiny",
            active_params_b=max(self.prefill.per_token_s, _TINY) * _PEAK_FLOPS / 2 / 1e9,
            weight_gb=self.hardware.weight_bytes / 1e9,
            kv_bytes_per_token=self.hardware.kv_bytes_per_token,
            attn_flops_per_ctx_token=self.prefill.per_token_context_s * _PEAK_FLOPS,
            comm_bytes_per_token=0.0,
        )

    def engine(self) -> EngineProfile:
        """Efficiency 1 at any size; the fitted forward overhead; the testbed's chunk."""
        hw = self.hardware
        return EngineProfile(
            mfu=1.0,
            mfu_half_tokens=0.0,
            mbu=1.0,
            step_overhead_s=forward_overhead_s(self.decode, hw),
            chunk_tokens=hw.chunk_tokens,
            max_decode_batch=hw.max_decode_batch,
            memory_reserve_fraction=0.0,
        )


def testbed_wan(bandwidth_mbps: float, one_way_delay_ms: float) -> LinkConfig:
    """The emulated WAN: its bandwidth, an RTT of twice its one-way delay, no jitter, no cap."""
    if not bandwidth_mbps > 0:
        raise ValueError(f"--wan-mbps must be > 0, got {bandwidth_mbps!r}")
    if not one_way_delay_ms >= 0:
        raise ValueError(f"--wan-delay-ms must be >= 0, got {one_way_delay_ms!r}")
    return LinkConfig(
        bandwidth_gbps=bandwidth_mbps / 1e3,
        rtt_s=2 * one_way_delay_ms / 1e3,
        jitter_s=0.0,
        max_flow_gbps=0.0,
    )


def testbed_sim_config(
    cal: Calibration,
    wan: LinkConfig,
    ttft_slo_s: float,
    handoff: HandoffPolicyConfig,
    block_tokens: int,
) -> SimConfig:
    """The testbed's three contenders on the calibrated chip: same-dc (1 P, 1 D), cross-dc
    (1 P, 1 MD behind the WAN, decode radix cache on) and pdd (1 P, 1 RLD, 1 MD)."""
    pool = PoolSpec(CHIP_NAME, 1)
    intra = cal.prefill.fixed_s
    pipeline = PipelinePolicyConfig(ttft_slo_s=ttft_slo_s)
    contenders = (
        ClusterSpec("same-dc", "same-dc", pool, pool, intra_rtt_s=intra),
        ClusterSpec("cross-dc", "cross-dc", pool, pool, wan=wan, intra_rtt_s=intra),
        ClusterSpec(
            "pdd",
            "pdd",
            pool,
            pool,
            relay=pool,
            wan=wan,
            intra_rtt_s=intra,
            pipeline=pipeline,
            handoff=handoff,
        ),
    )
    return SimConfig(
        chips={CHIP_NAME: cal.chip()},
        contenders=contenders,
        model=cal.model(),
        engine=cal.engine(),
        block_tokens=block_tokens,
    )


def testbed_prompts(sessions, outputs: Mapping[tuple[int, int], Sequence[int]]) -> dict:
    """Each request's prompt ids, keyed (sid, turn), as the testbed's replay built them.

    sessions: ``sglang_pdd.testbed.workload.Session``s; outputs: each request's output ids. A
    turn's prompt is the session's history plus its new ids; the history then becomes that
    prompt plus the output, except after side calls.
    """
    prompts = {}
    for s in sessions:
        history: list[int] = []
        for k, turn in enumerate(s.turns):
            if (s.sid, k) not in outputs:
                raise ValueError(f"no recorded output for session {s.sid} turn {k}")
            prompt = history + list(turn.new_ids)
            prompts[(s.sid, k)] = prompt
            if turn.kind != "side":
                history = prompt + list(outputs[(s.sid, k)])
    return prompts


def testbed_requests(
    rows: Sequence[tuple[float, Sequence[int], int]], block_tokens: int
) -> list[Request]:
    """Simulator requests from (arrival_s, prompt_ids, output_tokens), ordered by arrival."""
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    out = []
    for rid, i in enumerate(order):
        at, prompt, output = rows[i]
        if not prompt or output < 1:
            raise ValueError(f"request {i}: needs a prompt and output_tokens >= 1")
        hashes = tuple(block_hashes(list(prompt), block_tokens))
        out.append(Request(rid, at, len(prompt), output, hashes))
    return out


def prefix_hits(prompts: Sequence[Sequence[int]]) -> list[int]:
    """Per prompt (in send order): its longest prefix equal to a prefix of an earlier prompt,
    at most its length less one (the last token is always computed), i.e. a radix cache's hit."""
    seen: list[tuple[int, ...]] = []
    hits = []
    for prompt in prompts:
        p = tuple(prompt)
        best = 0
        for q in seen:
            lo, hi = best, min(len(p), len(q))
            if p[:lo] != q[:lo]:
                continue
            while lo < hi:  # largest m with p[:m] == q[:m]
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if p[:mid] == q[:mid] else (lo, mid - 1)
            best = lo
        hits.append(min(best, max(len(p) - 1, 0)))
        seen.append(p)
    return hits
