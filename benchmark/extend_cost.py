"""The extend forward alone, in PyTorch: what MD computes to rebuild N handed-off ids' KV.

One decoder layer of a named model shape (random weights) runs N new tokens attending to a
context of C cached tokens plus themselves; the time is multiplied by the layer count (the
layers cost the same). Beside it, the time to copy the same KV over links of given speeds: the
handoff sends N token ids instead. Used by ``benchmark/handoff.py --extend-only``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def kv_bytes(self, tokens: int, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes * tokens


SHAPES = {
    "llama-3-8b": ModelShape(32, 4096, 32, 8, 14336),
    "qwen2.5-7b": ModelShape(28, 3584, 28, 4, 18944),
    "tiny": ModelShape(2, 64, 4, 2, 128),  # the testbed's generated model
}


def _layer(shape: ModelShape, device: str, dtype):
    import torch

    def w(rows, cols):
        return torch.randn(rows, cols, device=device, dtype=dtype) * rows**-0.5

    qkv = w(shape.hidden, (shape.heads + 2 * shape.kv_heads) * shape.head_dim)
    out = w(shape.heads * shape.head_dim, shape.hidden)
    gate_up = w(shape.hidden, 2 * shape.intermediate)
    down = w(shape.intermediate, shape.hidden)

    def forward(x, k_cache, v_cache):
        n, hd = x.shape[0], shape.head_dim
        q, k, v = (x @ qkv).split(
            [shape.heads * hd, shape.kv_heads * hd, shape.kv_heads * hd], dim=-1
        )
        q = q.view(n, shape.heads, hd).transpose(0, 1)
        k = torch.cat([k_cache, k.view(n, shape.kv_heads, hd).transpose(0, 1)], dim=1)
        v = torch.cat([v_cache, v.view(n, shape.kv_heads, hd).transpose(0, 1)], dim=1)
        groups = shape.heads // shape.kv_heads
        k, v = k.repeat_interleave(groups, 0), v.repeat_interleave(groups, 0)
        # Each new token sees the whole context and the new tokens before it.
        context = k.shape[1] - n
        mask = torch.ones(n, k.shape[1], dtype=torch.bool, device=x.device).tril(context)
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h = x + attn.transpose(0, 1).reshape(n, -1) @ out
        g, u = (h @ gate_up).chunk(2, dim=-1)
        return h + (torch.nn.functional.silu(g) * u) @ down

    return forward


def extend_seconds(
    shape: ModelShape, device: str, new: int, context: int, repeats: int = 3
) -> float:
    """Median seconds of the extend forward over ``new`` ids on ``context`` cached ones."""
    import torch

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    forward = _layer(shape, device, dtype)
    x = torch.randn(new, shape.hidden, device=device, dtype=dtype)
    k_cache = torch.randn(shape.kv_heads, context, shape.head_dim, device=device, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    times = []
    with torch.inference_mode():
        for i in range(repeats + 1):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            forward(x, k_cache, v_cache)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            if i:  # the first run warms up
                times.append(time.perf_counter() - start)
    return statistics.median(times) * shape.layers


def extend_table(
    model: str, device: str, handed: list[int], contexts: list[int], link_gbps: list[float]
) -> str:
    """The printed comparison: extend time against copying the KV, per (context, N)."""
    if model not in SHAPES:
        raise SystemExit(f"--model {model!r}: known shapes are {', '.join(SHAPES)}")
    shape = SHAPES[model]
    dtype_bytes = 2 if device.startswith("cuda") else 4
    links = "".join(f" {f'copy@{g:g}G ms':>13}" for g in link_gbps)
    lines = [
        f"extend forward of {model} ({shape.layers} layers) on {device}",
        f"{'context':>7} {'N':>6} {'extend ms':>10} {'KV MB':>9}{links}",
    ]
    for context in contexts:
        for n in handed:
            kv = shape.kv_bytes(n, dtype_bytes)
            seconds = extend_seconds(shape, device, n, context)
            copies = "".join(f" {kv * 8 / (g * 1e9) * 1e3:13.2f}" for g in link_gbps)
            lines.append(f"{context:7} {n:6} {seconds * 1e3:10.2f} {kv / 1e6:9.2f}{copies}")
    return "\n".join(lines)
