"""Pure-PyTorch bodies for the ``sgl_kernel`` CPU ops on sglang-pdd's paths.

Each function keeps the signature and in-place semantics of the native op it stands in for
(``sgl_kernel`` 0.4.10); ``tests/cpu/test_ops.py`` checks each against a reference computed
another way on random inputs.
"""

from __future__ import annotations

import ctypes

import torch

IMPLEMENTED = (
    "assign_req_to_token_pool_cpu",
    "copy_all_layer_kv_cache_cpu",
    "rmsnorm",
    "fused_add_rmsnorm",
    "silu_and_mul",
)
# Ops SGLang calls through ``torch.ops.sgl_kernel`` rather than the Python module: the stand-in
# registers these with ``torch.library`` (name -> schema).
TORCH_OPS = {
    "murmur_hash32_cpu": "murmur_hash32_cpu(Tensor seed, Tensor positions, Tensor col_indices)"
    " -> Tensor",
}

_MASK32 = 0xFFFFFFFF


def _mix32(h, k):
    """One MurmurHash3 block mix (works on Python ints and on int64 tensors alike)."""
    k = (k * 0xCC9E2D51) & _MASK32
    k = ((k << 15) | (k >> 17)) & _MASK32
    k = (k * 0x1B873593) & _MASK32
    h = h ^ k
    h = ((h << 13) | (h >> 19)) & _MASK32
    return (h * 5 + 0xE6546B64) & _MASK32


def murmur_hash32_cpu(
    seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor
) -> torch.Tensor:
    """SGLang's seeded-sampling hash: ``[n, m]`` uint32, row ``i`` column ``j`` the MurmurHash3
    of (seed_i low 32 bits, seed_i high 32 bits, positions_i, col_indices_j), as SGLang's
    Triton kernel (``sglang/kernels/ops/sampling/murmur_hash.py``) computes it.

    The three per-row blocks are mixed exactly on Python ints; the column block and the final
    mix run on int64 tensors (each product's low 32 bits survive int64 wrap-around)."""
    rows = []
    for s, p in zip(seed.tolist(), positions.tolist(), strict=True):
        s &= 0xFFFFFFFFFFFFFFFF
        h = _mix32(0, s & _MASK32)
        h = _mix32(h, (s >> 32) & _MASK32)
        rows.append(_mix32(h, p & _MASK32))
    h = torch.tensor(rows, dtype=torch.int64).unsqueeze(1)
    k = (col_indices.to(torch.int64) & _MASK32).unsqueeze(0)
    h = _mix32(h, k) ^ 16
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    h = h ^ (h >> 16)
    return h.to(torch.uint32)


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new KV slots into its row of the request-to-token table.

    Request ``i`` takes the next ``end_offset[i] - start_offset[i]`` entries of ``out_cache_loc``
    (requests are packed back to back) into ``req_to_token[req_pool_indices[i],
    start_offset[i]:end_offset[i]]``.
    """
    del pool_len  # the native op needs it for pointer arithmetic; the row stride gives it here
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    offset = 0
    for row, start, end in zip(rows, starts, ends, strict=True):
        length = end - start
        if length > 0:
            req_to_token[row, start:end] = out_cache_loc[offset : offset + length].to(
                req_to_token.dtype
            )
        offset += max(length, 0)


def _byte_view(address: int, nbytes: int) -> torch.Tensor:
    """A uint8 tensor aliasing ``nbytes`` of memory at ``address`` (no copy)."""
    buffer = (ctypes.c_uint8 * nbytes).from_address(address)
    return torch.frombuffer(buffer, dtype=torch.uint8)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """In every KV buffer (one per layer and K/V), copy token row ``src_loc[j]`` to ``tgt_loc[j]``.

    ``data_ptrs[b]`` is buffer ``b``'s base address and ``strides[b]`` its row size in bytes, as
    the native op takes them. All source rows are read before any target is written, so
    overlapping moves behave as the native kernel's "safe for in-place copy" contract says.
    """
    if tgt_loc.numel() == 0:
        return
    src = src_loc.to(torch.int64)
    tgt = tgt_loc.to(torch.int64)
    rows = int(torch.maximum(src.max(), tgt.max()).item()) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        table = _byte_view(int(address), rows * int(stride)).view(rows, int(stride))
        table[tgt] = table[src].clone()


def rmsnorm(
    input: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    enable_pdl: bool | None = None,
) -> torch.Tensor:
    """RMS normalisation over the last dimension, computed in float32."""
    del enable_pdl
    x = input.float()
    result = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(
        input.dtype
    )
    if out is None:
        return result
    out.copy_(result)
    return out


def fused_add_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    enable_pdl: bool | None = None,
) -> None:
    """In place: ``residual += input``; ``input = rmsnorm(residual)``."""
    del enable_pdl
    summed = input.float() + residual.float()
    residual.copy_(summed.to(residual.dtype))
    input.copy_(rmsnorm(summed, weight, eps).to(input.dtype))


def silu_and_mul(
    input: torch.Tensor, out: torch.Tensor | None = None, enable_pdl: bool | None = None
) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` for an input of last dimension ``2d``."""
    del enable_pdl
    d = input.shape[-1] // 2
    result = torch.nn.functional.silu(input[..., :d]) * input[..., d:]
    if out is None:
        return result
    out.copy_(result)
    return out
