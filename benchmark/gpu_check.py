"""The checks to run when an accelerator is lent: PyTorch alone, no SGLang, a few minutes.

1. The handoff at the brief's sizes: one extend forward over 100 handed-off ids on top of a long
   context (a stack of a named model shape's layers) against copying those ids' KV into a paged
   cache on the device (the brief's 4,649 KB, and the model's own KV of 100 tokens), beside the
   brief's figures (extend 305 ms; WAN transfer 185 ms mean, 512.6 ms max, plus 24.5 ms of
   copy) and the WAN time of the same bytes at a few link speeds.
2. Prefill (chunks of new tokens over a cached prefix) and decode (a batch of requests, one token
   each, over their contexts) forward times of that stack at a few sizes.
3. Those times fitted into the simulator's profiles (``sglang_pdd/sim/chips.py``: the chip's
   nominal peak and bandwidth, the engine's ``mfu``, ``mfu_half_tokens``, ``mbu``,
   ``step_overhead_s``; the model's sizes from its shape), written as a YAML file that
   ``sglang-pdd sim --config`` loads (``chips``, ``model``, ``engine`` sections).
4. ``ls /sys/class/infiniband``: whether the host has RDMA devices (docs/deploy.md section 3).

Everything it writes goes under ``--out`` (a few KB): ``gpu_check.json`` (every timing),
``chip_profile.yaml`` and ``gpu_check.txt`` (what it printed).

    python benchmark/run.py gpu-check --device cuda --out $OUT            # on the lent machine
    python benchmark/run.py gpu-check --device cpu --model tiny --quick --out /tmp/gc   # smoke test

The attention of a chunk over a cached prefix is timed as two fused attention calls (the chunk
against the prefix, and causally against itself) whose outputs are added, not merged by their
log-sum-exp: the same work, without materializing a chunk x context mask, which is what is
timed. The weights and values are random.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import shared_flags  # benchmark/shared_flags.py (this script's folder)

# The brief's handoff of 100 tokens (../shared/design/pdd-brief.md, section 4).
BRIEF_HANDED = 100
BRIEF_KV_BYTES = 4_649 * 1024
BRIEF_EXTEND_MS = 305.2
BRIEF_WAN_MS = (185.0, 512.6)  # mean, max
BRIEF_COPY_MS = 24.5
BRIEF_CONTEXT = 64 * 1024  # "64K total length"


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder's shape: what its layers compute and hold."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int = 128_256

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_params(self) -> int:
        qkv = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        out = self.heads * self.head_dim * self.hidden
        return qkv + out + 3 * self.hidden * self.intermediate

    def params(self) -> int:
        """Parameters read per token: every layer and the output head."""
        return self.layers * self.layer_params() + self.hidden * self.vocab

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def attn_flops_per_ctx_token(self) -> float:
        """FLOPs per (new token, context token) pair: QK^T and AV, 2 per multiply-add."""
        return 4.0 * self.layers * self.heads * self.head_dim


SHAPES = {
    "llama-3-8b": ModelShape(32, 4096, 32, 8, 14336),
    "qwen2.5-32b": ModelShape(64, 5120, 40, 8, 27648, vocab=152_064),
    "tiny": ModelShape(4, 64, 4, 2, 128, vocab=256),  # the CPU smoke test
}

# Nominal dense bf16 peak TFLOP/s and memory GB/s by device name (what the simulator's chips
# are rated by); another device needs --peak-tflops and --memory-bw-gbs.
NOMINAL = {"H100": (989.0, 3350.0), "H200": (989.0, 4800.0), "A100": (312.0, 2039.0)}


# -- fitting (pure; tests/test_gpu_check_fit.py) --


@dataclass(frozen=True)
class PrefillPoint:
    """One timed prefill forward: ``new`` tokens over ``context`` cached ones."""

    new: int
    context: int
    seconds: float


@dataclass(frozen=True)
class DecodePoint:
    """One timed decode forward: ``batch`` requests of ``context`` tokens each."""

    batch: int
    context: int
    seconds: float


@dataclass(frozen=True)
class Fit:
    """The simulator's engine constants fitted to the timings, and the fit's worst error."""

    mfu: float
    mfu_half_tokens: float
    mbu: float
    step_overhead_s: float
    max_rel_error: float


def _lstsq2(rows: list[tuple[float, float]], ys: list[float]) -> tuple[float, float]:
    """Least squares of y = a*x1 + b*x2 (no intercept), by the 2x2 normal equations."""
    s11 = sum(x1 * x1 for x1, _ in rows)
    s12 = sum(x1 * x2 for x1, x2 in rows)
    s22 = sum(x2 * x2 for _, x2 in rows)
    t1 = sum(x1 * y for (x1, _), y in zip(rows, ys, strict=True))
    t2 = sum(x2 * y for (_, x2), y in zip(rows, ys, strict=True))
    det = s11 * s22 - s12 * s12
    if abs(det) <= 1e-12 * max(s11 * s22, 1e-300):
        raise ValueError("the timings cannot separate the two terms: vary the sizes more")
    return (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det


def prefill_flops(shape: ModelShape, new: int, context: int) -> float:
    """The simulator's FLOPs of an extend: linear layers over the new tokens plus attention of
    each over the context and the new tokens before it (``InstancePerf.forward_time``)."""
    pairs = new * (context + new / 2)
    return 2.0 * shape.params() * new + shape.attn_flops_per_ctx_token() * pairs


def decode_bytes(shape: ModelShape, batch: int, context: int, dtype_bytes: int) -> float:
    """Bytes a decode step reads: the weights once and every request's KV."""
    return shape.params() * dtype_bytes + batch * context * shape.kv_bytes_per_token(dtype_bytes)


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    if var <= 0:
        raise ValueError("the decode timings all read the same bytes: vary batch or context")
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var
    return slope, mean_y - slope * mean_x


def fit_profile(
    shape: ModelShape,
    prefill: list[PrefillPoint],
    decode: list[DecodePoint],
    peak_tflops: float,
    memory_bw_gbs: float,
    dtype_bytes: int,
) -> Fit:
    """Fit the simulator's step-time model (``InstancePerf.forward_time``) to measured forwards.

    Prefill (a prefill server's forward, compute-bound): t - overhead = flops / (peak * mfu *
    e) with e = n / (n + half), i.e. (t - overhead) * peak = flops / mfu + (flops / n) * half /
    mfu, linear in (flops, flops / n). Decode: t = max(bytes / (bw * mbu), compute) + overhead,
    a line in the bytes read where memory binds. The two share the overhead, and which decode
    points are memory-bound depends on the compute fit, so the fits alternate until the set of
    memory-bound points stops changing. ``ValueError`` when the points cannot determine the
    constants."""
    if len(decode) < 2 or len(prefill) < 2:
        raise ValueError("fitting needs at least two prefill and two decode timings")
    peak = peak_tflops * 1e12
    memory_bound = list(decode)
    for _ in range(8):
        xs = [decode_bytes(shape, p.batch, p.context, dtype_bytes) for p in memory_bound]
        slope, intercept = _line(xs, [p.seconds for p in memory_bound])
        if slope <= 0:
            raise ValueError("decode time does not grow with the bytes read: not memory-bound")
        overhead = max(0.0, intercept)
        mbu = min(1.0, 1.0 / (slope * memory_bw_gbs * 1e9))
        rows, targets = [], []
        for p in prefill:
            flops = prefill_flops(shape, p.new, p.context)
            rows.append((flops, flops / p.new))
            targets.append(max(p.seconds - overhead, 1e-12) * peak)
        inv_mfu, half_over_mfu = _lstsq2(rows, targets)
        if inv_mfu <= 0:
            raise ValueError("prefill time does not grow with its FLOPs: cannot fit mfu")
        fit = Fit(min(1.0, 1.0 / inv_mfu), max(0.0, half_over_mfu / inv_mfu), mbu, overhead, 0.0)
        still = [
            p
            for p in decode
            if _decode_memory_s(shape, fit, memory_bw_gbs, p, dtype_bytes)
            >= _decode_compute_s(shape, fit, peak_tflops, p)
        ]
        if len(still) < 2 or len({(p.batch * p.context) for p in still}) < 2:
            break  # too few memory-bound points left to fit a line: keep this fit
        if still == memory_bound:
            break
        memory_bound = still
    errors = [
        abs(predict_prefill(shape, fit, peak_tflops, p) - p.seconds) / p.seconds for p in prefill
    ]
    errors += [
        abs(predict_decode(shape, fit, peak_tflops, memory_bw_gbs, p, dtype_bytes) - p.seconds)
        / p.seconds
        for p in decode
    ]
    return dataclasses.replace(fit, max_rel_error=max(errors))


def _efficiency(fit: Fit, tokens: float) -> float:
    return fit.mfu * tokens / (tokens + fit.mfu_half_tokens)


def predict_prefill(shape: ModelShape, fit: Fit, peak_tflops: float, p: PrefillPoint) -> float:
    """The fitted model's seconds for a prefill forward."""
    flops = prefill_flops(shape, p.new, p.context)
    return flops / (peak_tflops * 1e12 * _efficiency(fit, p.new)) + fit.step_overhead_s


def _decode_memory_s(shape, fit: Fit, memory_bw_gbs: float, p: DecodePoint, dtype_bytes) -> float:
    read = decode_bytes(shape, p.batch, p.context, dtype_bytes)
    return read / (memory_bw_gbs * 1e9 * fit.mbu)


def _decode_compute_s(shape, fit: Fit, peak_tflops: float, p: DecodePoint) -> float:
    flops = 2.0 * shape.params() * p.batch + shape.attn_flops_per_ctx_token() * p.batch * p.context
    return flops / (peak_tflops * 1e12 * _efficiency(fit, p.batch))


def predict_decode(
    shape: ModelShape,
    fit: Fit,
    peak_tflops: float,
    memory_bw_gbs: float,
    p: DecodePoint,
    dtype_bytes: int,
) -> float:
    """The fitted model's seconds for a decode forward: the longer of memory and compute."""
    memory = _decode_memory_s(shape, fit, memory_bw_gbs, p, dtype_bytes)
    return max(memory, _decode_compute_s(shape, fit, peak_tflops, p)) + fit.step_overhead_s


def profile_yaml(
    chip_name: str,
    shape_name: str,
    shape: ModelShape,
    fit: Fit,
    peak_tflops: float,
    memory_gb: float,
    memory_bw_gbs: float,
    interconnect_gbs: float,
    dtype_bytes: int,
) -> str:
    """A simulator config (``sglang-pdd sim --config``): the chip, the model, the engine."""
    params = shape.params()
    lines = [
        f"# Fitted by benchmark/gpu_check.py; the fit's worst error: {fit.max_rel_error:.1%}",
        "chips:",
        f"  {chip_name}:",
        f"    peak_tflops: {peak_tflops:.6g}",
        f"    memory_gb: {memory_gb:.6g}",
        f"    memory_bw_gbs: {memory_bw_gbs:.6g}",
        f"    interconnect_gbs: {interconnect_gbs:.6g}",
        "    cost_per_hour: 1.0",
        "model:",
        f"  name: {shape_name}",
        f"  active_params_b: {params / 1e9:.6g}",
        f"  weight_gb: {params * dtype_bytes / 1e9:.6g}",
        f"  kv_bytes_per_token: {shape.kv_bytes_per_token(dtype_bytes)}",
        f"  attn_flops_per_ctx_token: {shape.attn_flops_per_ctx_token():.6g}",
        "engine:",
        f"  mfu: {fit.mfu:.6g}",
        f"  mfu_half_tokens: {fit.mfu_half_tokens:.6g}",
        f"  mbu: {fit.mbu:.6g}",
        f"  step_overhead_s: {fit.step_overhead_s:.6g}",
    ]
    return "\n".join(lines) + "\n"


# -- measuring (PyTorch) --


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after one warm-up."""
    times = []
    for i in range(repeats + 1):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _attention(q, k, v, causal: bool):
    """Fused attention with grouped KV heads (q: B, H, n, d; k, v: B, KVH, m, d)."""
    import torch.nn.functional as F

    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    except TypeError:  # PyTorch before 2.5: repeat the KV heads
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


class Stack:
    """``n`` distinct decoder layers of ``shape`` (random weights); a forward's time is scaled
    to the model's layer count. One KV tensor serves every layer (each layer reads it whole,
    which is the traffic that counts), so long contexts fit."""

    def __init__(self, shape: ModelShape, n: int, device: str, dtype) -> None:
        import torch

        self.shape, self.device, self.dtype = shape, device, dtype
        h, d = shape.hidden, shape.head_dim

        def w(rows, cols):
            return torch.randn(rows, cols, device=device, dtype=dtype) * rows**-0.5

        self.layers = [
            (
                w(h, (shape.heads + 2 * shape.kv_heads) * d),
                w(shape.heads * d, h),
                w(h, 2 * shape.intermediate),
                w(shape.intermediate, h),
            )
            for _ in range(n)
        ]
        self.head = w(h, min(shape.vocab, 32_768))  # the output head's matmul (a slice)

    def _layer(self, weights, x, k_cache, v_cache, causal_self: bool):
        import torch

        qkv, out, gate_up, down = weights
        s, d = self.shape, self.shape.head_dim
        b, n, _ = x.shape
        q, k, v = (x @ qkv).split([s.heads * d, s.kv_heads * d, s.kv_heads * d], dim=-1)
        q = q.view(b, n, s.heads, d).transpose(1, 2)
        k = k.view(b, n, s.kv_heads, d).transpose(1, 2)
        v = v.view(b, n, s.kv_heads, d).transpose(1, 2)
        attn = _attention(q, k, v, causal=causal_self and n > 1)
        if k_cache is not None:
            attn = attn + _attention(q, k_cache, v_cache, causal=False)
        h = x + attn.transpose(1, 2).reshape(b, n, -1) @ out
        g, u = (h @ gate_up).chunk(2, dim=-1)
        return h + (torch.nn.functional.silu(g) * u) @ down

    def forward(self, x, k_cache, v_cache) -> None:
        for weights in self.layers:
            x = self._layer(weights, x, k_cache, v_cache, causal_self=True)
        _ = x[:, -1] @ self.head

    def time(self, batch: int, new: int, context: int, repeats: int) -> float:
        """Seconds of one forward of the whole model: ``batch`` requests of ``new`` tokens
        each over ``context`` cached tokens each."""
        import torch

        s = self.shape
        x = torch.randn(batch, new, s.hidden, device=self.device, dtype=self.dtype)
        k_cache = v_cache = None
        if context:
            k_cache = torch.randn(
                batch, s.kv_heads, context, s.head_dim, device=self.device, dtype=self.dtype
            )
            v_cache = torch.randn_like(k_cache)
        with torch.inference_mode():
            seconds = _timed(lambda: self.forward(x, k_cache, v_cache), self.device, repeats)
        return seconds * s.layers / len(self.layers)


def copy_seconds(nbytes: int, tokens: int, layers: int, device: str, dtype, repeats: int) -> float:
    """Seconds to copy ``nbytes`` of KV for ``tokens`` tokens into a paged cache on the device,
    one write per (layer, K or V) scattered by token slot (what landing a transfer costs)."""
    import torch

    elem = torch.empty((), dtype=dtype).element_size()
    per_row = max(1, nbytes // (2 * layers * tokens * elem))
    src = torch.randn(2 * layers, tokens, per_row, device=device, dtype=dtype)
    pool = torch.zeros(2 * layers, tokens * 64, per_row, device=device, dtype=dtype)
    slots = torch.randperm(tokens * 64, device=device)[:tokens]

    def copy():
        for i in range(2 * layers):
            pool[i].index_copy_(0, slots, src[i])

    return _timed(copy, device, repeats)


def infiniband() -> str:
    """``ls /sys/class/infiniband`` as printed (or why it printed nothing)."""
    result = subprocess.run(
        ["ls", "/sys/class/infiniband"], capture_output=True, text=True, check=False
    )
    return (result.stdout.strip() or result.stderr.strip() or "(empty)").replace("\n", " ")


def nominal(device: str, peak: float | None, bw: float | None) -> tuple[str, float, float, float]:
    """(chip name, peak TFLOP/s, memory GB/s, memory GB): given, or known for this device."""
    import torch

    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        name, memory_gb = props.name, props.total_memory / 1e9
        known = next((v for k, v in NOMINAL.items() if k in name), None)
    else:
        name, memory_gb, known = "cpu", 64.0, None
    if peak is None or bw is None:
        if known is None:
            raise SystemExit(
                f"no nominal peak and bandwidth known for {name!r}: give --peak-tflops and "
                "--memory-bw-gbs"
            )
        peak, bw = peak or known[0], bw or known[1]
    return name.replace(" ", "-"), peak, bw, memory_gb


@dataclass(frozen=True)
class Sizes:
    """The chip's nominal figures and the sizes a run times."""

    chip: str
    peak: float
    bw: float
    memory_gb: float
    contexts: list[int]
    chunks: list[int]
    batches: list[int]
    handoff_contexts: list[int]


class Say:
    """Print a line and keep it for ``gpu_check.txt``."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)


def parse_args(argv: list[str] | None):
    """The flags, checked."""
    parser = shared_flags.parser(__doc__.split("\n\n")[0], raw=False)
    shared_flags.device(parser, "cuda")
    parser.add_argument("--model", default="llama-3-8b", choices=sorted(SHAPES))
    shared_flags.out_dir(parser, "folder for the result files")
    parser.add_argument("--stack-layers", type=int, default=4, help="distinct layers timed")
    parser.add_argument("--peak-tflops", type=float, help="nominal (default: by device name)")
    parser.add_argument("--memory-bw-gbs", type=float, help="nominal (default: by device name)")
    parser.add_argument("--interconnect-gbs", type=float, default=450.0)
    shared_flags.repeats(parser, 3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a CPU smoke test)")
    args = parser.parse_args(argv)
    if args.stack_layers < 1 or args.repeats < 1:
        raise SystemExit("--stack-layers and --repeats must be >= 1")
    return args


def run_sizes(args) -> Sizes:
    """The nominal figures and sizes: tiny ones with ``--quick``, else the device's."""
    if args.quick:
        return Sizes(
            chip="cpu",
            peak=args.peak_tflops or 1.0,
            bw=args.memory_bw_gbs or 20.0,
            memory_gb=64.0,
            contexts=[0, 256, 1024],
            chunks=[16, 64, 256],
            batches=[1, 4, 16],
            handoff_contexts=[1024],
        )
    chip, peak, bw, memory_gb = nominal(args.device, args.peak_tflops, args.memory_bw_gbs)
    return Sizes(
        chip=chip,
        peak=peak,
        bw=bw,
        memory_gb=memory_gb,
        contexts=[0, 8192, 32768],
        chunks=[512, 2048, 8192],
        batches=[1, 8, 32, 128],
        handoff_contexts=[8192, 32768, BRIEF_CONTEXT],
    )


def time_handoff(say: Say, stack: Stack, args, sizes: Sizes, dtype, dtype_bytes: int):
    """The handoff's copies into a paged cache, its WAN times and its extends: (extends,
    copy seconds by which KV)."""
    shape = stack.shape
    say(
        f"\nhandoff of {BRIEF_HANDED} ids (brief: extend {BRIEF_EXTEND_MS} ms; WAN "
        f"{BRIEF_WAN_MS[0]} ms mean, {BRIEF_WAN_MS[1]} ms max, + {BRIEF_COPY_MS} ms copy)"
    )
    handoff = []
    model_kv = shape.kv_bytes_per_token(dtype_bytes) * BRIEF_HANDED
    copies = {
        "brief_kv": copy_seconds(
            BRIEF_KV_BYTES, BRIEF_HANDED, shape.layers, args.device, dtype, args.repeats
        ),
        "model_kv": copy_seconds(
            model_kv, BRIEF_HANDED, shape.layers, args.device, dtype, args.repeats
        ),
    }
    say(
        f"  copy {BRIEF_KV_BYTES / 1024:.0f} KiB (brief's KV) into a paged cache: "
        f"{copies['brief_kv'] * 1e3:.2f} ms; {model_kv / 1024:.0f} KiB ({args.model}'s KV): "
        f"{copies['model_kv'] * 1e3:.2f} ms"
    )
    for gbps in (1.0, 10.0, 100.0):
        say(
            f"  WAN time of the brief's KV at {gbps:g} Gbit/s: "
            f"{BRIEF_KV_BYTES * 8 / (gbps * 1e9) * 1e3:.1f} ms (+ RTT)"
        )
    for context in sizes.handoff_contexts:
        seconds = stack.time(1, BRIEF_HANDED, context, args.repeats)
        handoff.append({"context": context, "extend_s": seconds})
        say(f"  extend over {BRIEF_HANDED} ids at context {context}: {seconds * 1e3:.2f} ms")
    return handoff, copies


def time_prefill(say: Say, stack: Stack, sizes: Sizes, repeats: int) -> list[PrefillPoint]:
    """Prefill forwards: one request's new tokens over each cached prefix."""
    say("\nprefill forwards (one request: new tokens over a cached prefix)")
    prefill = []
    for context in sizes.contexts:
        for new in sizes.chunks:
            p = PrefillPoint(new, context, stack.time(1, new, context, repeats))
            prefill.append(p)
            say(f"  new {new:6} context {context:6}: {p.seconds * 1e3:9.2f} ms")
    return prefill


def time_decode(say: Say, stack: Stack, sizes: Sizes, repeats: int) -> list[DecodePoint]:
    """Decode forwards: a batch of one token each over each request's context."""
    say("\ndecode forwards (batch x one token over each request's context)")
    decode = []
    for context in sizes.contexts[1:] or sizes.contexts:
        for batch in sizes.batches:
            if batch * context > (1 << 21):  # the KV tensor stays under a few GB
                continue
            p = DecodePoint(batch, context, stack.time(batch, 1, context, repeats))
            decode.append(p)
            say(f"  batch {batch:4} context {context:6}: {p.seconds * 1e3:9.2f} ms")
    return decode


def fit_and_write_profile(
    say: Say, args, sizes: Sizes, prefill, decode, dtype_bytes: int, out: Path
) -> Fit | None:
    """Fit the timings and write ``chip_profile.yaml``; None (the timings kept, to fit by
    hand) when they cannot be fitted."""
    shape, peak, bw = SHAPES[args.model], sizes.peak, sizes.bw
    try:
        fit = fit_profile(shape, prefill, decode, peak, bw, dtype_bytes)
    except ValueError as exc:  # the timings are kept: fit them by hand
        say(f"\nfit failed: {exc}")
        return None
    say(
        f"\nfit (peak {peak:g} TFLOP/s, {bw:g} GB/s nominal): mfu {fit.mfu:.3f}, "
        f"mfu_half_tokens {fit.mfu_half_tokens:.0f}, mbu {fit.mbu:.3f}, step_overhead_s "
        f"{fit.step_overhead_s * 1e3:.2f} ms; worst error {fit.max_rel_error:.1%}"
    )
    yaml_text = profile_yaml(
        sizes.chip,
        args.model,
        shape,
        fit,
        peak,
        sizes.memory_gb,
        bw,
        args.interconnect_gbs,
        dtype_bytes,
    )
    (out / "chip_profile.yaml").write_text(yaml_text)
    return fit


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shape = SHAPES[args.model]
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    sizes = run_sizes(args)
    say = Say()
    start = time.monotonic()
    say(f"gpu_check: {args.model} ({shape.layers} layers) on {args.device} ({sizes.chip}), {dtype}")
    say(f"ls /sys/class/infiniband: {infiniband()}")
    stack = Stack(shape, min(args.stack_layers, shape.layers), args.device, dtype)
    handoff, copies = time_handoff(say, stack, args, sizes, dtype, dtype_bytes)
    prefill = time_prefill(say, stack, sizes, args.repeats)
    decode = time_decode(say, stack, sizes, args.repeats)
    fit = fit_and_write_profile(say, args, sizes, prefill, decode, dtype_bytes, out)
    result = {
        "device": args.device,
        "chip": sizes.chip,
        "model": args.model,
        "dtype_bytes": dtype_bytes,
        "infiniband": infiniband(),
        "handoff": {"handed": BRIEF_HANDED, "extends": handoff, "copy_s": copies},
        "prefill": [asdict(p) for p in prefill],
        "decode": [asdict(p) for p in decode],
        "fit": asdict(fit) if fit is not None else None,
        "nominal": {"peak_tflops": sizes.peak, "memory_bw_gbs": sizes.bw},
        "wall_s": time.monotonic() - start,
    }
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1))
    say(f"\nwrote {sorted(p.name for p in out.iterdir())} in {result['wall_s']:.0f} s")
    (out / "gpu_check.txt").write_text("\n".join(say.lines) + "\n")
    return 0 if fit is not None and math.isfinite(fit.max_rel_error) else 1


if __name__ == "__main__":
    sys.exit(main())
