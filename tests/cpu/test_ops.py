"""Each pure-PyTorch sgl_kernel stand-in against a reference computed another way."""

from __future__ import annotations

import pytest
import torch

from sglang_pdd.cpu import ops


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_assign_req_to_token_pool_matches_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    pool_rows, pool_len, batch = 8, 64, 5
    req_to_token = torch.randint(0, 1000, (pool_rows, pool_len), generator=gen, dtype=torch.int32)
    expected = req_to_token.clone()
    rows = torch.randperm(pool_rows, generator=gen)[:batch]
    starts = torch.randint(0, 30, (batch,), generator=gen)
    lengths = torch.randint(0, 20, (batch,), generator=gen)
    ends = starts + lengths
    out_cache_loc = torch.randint(0, 10_000, (int(lengths.sum()),), generator=gen)
    # Reference: walk the packed output with an explicit cursor, one element at a time.
    cursor = 0
    for i in range(batch):
        for pos in range(int(starts[i]), int(ends[i])):
            expected[rows[i], pos] = int(out_cache_loc[cursor])
            cursor += 1
    ops.assign_req_to_token_pool_cpu(rows, req_to_token, starts, ends, out_cache_loc, pool_len)
    assert torch.equal(req_to_token, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_copy_all_layer_kv_cache_matches_reference(dtype):
    gen = torch.Generator().manual_seed(3)
    layers = [torch.randn(50, 2, 8, generator=gen).to(dtype) for _ in range(4)]
    expected = [t.clone() for t in layers]
    src = torch.tensor([3, 7, 11, 20, 21])
    tgt = torch.tensor([40, 41, 7, 0, 49])  # 7 is both a source and a target
    for ref in expected:
        snapshot = ref.clone()
        for s, t in zip(src.tolist(), tgt.tolist(), strict=True):
            ref[t] = snapshot[s]
    data_ptrs = torch.tensor([t.data_ptr() for t in layers], dtype=torch.uint64)
    strides = torch.tensor([t[0].numel() * t.element_size() for t in layers], dtype=torch.int64)
    ops.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt, src)
    for got, ref in zip(layers, expected, strict=True):
        assert torch.equal(got, ref)


def test_copy_all_layer_kv_cache_with_no_locations_is_a_no_op():
    layer = torch.randn(4, 4)
    before = layer.clone()
    empty = torch.empty(0, dtype=torch.int64)
    ptrs = torch.tensor([layer.data_ptr()], dtype=torch.uint64)
    ops.copy_all_layer_kv_cache_cpu(ptrs, torch.tensor([16]), empty, empty)
    assert torch.equal(layer, before)


def test_rmsnorm_matches_torch_reference():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(6, 32, generator=gen, dtype=torch.float32)
    w = torch.randn(32, generator=gen)
    ref = torch.nn.functional.rms_norm(x, (32,), w, eps=1e-5)
    torch.testing.assert_close(ops.rmsnorm(x, w, 1e-5), ref)
    out = torch.empty_like(x)
    assert ops.rmsnorm(x, w, 1e-5, out=out) is out
    torch.testing.assert_close(out, ref)


def test_fused_add_rmsnorm_updates_both_in_place():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 16, generator=gen)
    residual = torch.randn(3, 16, generator=gen)
    w = torch.randn(16, generator=gen)
    summed = x + residual
    ref = torch.nn.functional.rms_norm(summed, (16,), w, eps=1e-6)
    ops.fused_add_rmsnorm(x, residual, w, 1e-6)
    torch.testing.assert_close(residual, summed)
    torch.testing.assert_close(x, ref)


def test_silu_and_mul_matches_reference():
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(4, 2 * 24, generator=gen)
    gate, up = x.chunk(2, dim=-1)
    ref = gate * torch.sigmoid(gate) * up
    torch.testing.assert_close(ops.silu_and_mul(x), ref)


def _murmur_reference(seed: int, pos: int, col: int) -> int:
    """MurmurHash3 (x86, 32-bit) of the 16 bytes seed_lo, seed_hi, pos, col, little-endian,
    hash seed 0, written out from the published algorithm one 4-byte block at a time."""
    import struct

    data = struct.pack("<QII", seed & (2**64 - 1), pos & (2**32 - 1), col & (2**32 - 1))
    h = 0
    for (k,) in struct.iter_unpack("<I", data):
        k = (k * 0xCC9E2D51) % 2**32
        k = ((k << 15) | (k >> 17)) % 2**32
        k = (k * 0x1B873593) % 2**32
        h ^= k
        h = ((h << 13) | (h >> 19)) % 2**32
        h = (h * 5 + 0xE6546B64) % 2**32
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2**32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % 2**32
    return h ^ (h >> 16)


def test_murmur_hash32_matches_the_published_algorithm():
    seeds = torch.tensor([0, 42, -7, 2**62 + 12345], dtype=torch.int64)
    positions = torch.tensor([0, 17, 4095, 100_000], dtype=torch.int64)
    cols = torch.tensor([0, 1, 255, 1023, 70_000], dtype=torch.int64)
    got = ops.murmur_hash32_cpu(seeds, positions, cols)
    assert got.dtype == torch.uint32 and got.shape == (4, 5)
    for i, (s, p) in enumerate(zip(seeds.tolist(), positions.tolist(), strict=True)):
        for j, c in enumerate(cols.tolist()):
            assert int(got[i, j].to(torch.int64)) == _murmur_reference(s, p, c)


def test_the_stand_in_registers_murmur_with_torch():
    """SGLang calls ``torch.ops.sgl_kernel.murmur_hash32_cpu.default`` on the CPU (checked in a
    fresh interpreter, so that this process's ``sgl_kernel`` stays what it was)."""
    import subprocess
    import sys

    from sglang_pdd.cpu.activation import SHIM_DIR

    code = (
        f"import sys; sys.path.insert(0, {SHIM_DIR!r}); import sgl_kernel, torch\n"
        "assert sgl_kernel.IS_SGLANG_PDD_STANDIN\n"
        "from sglang_pdd.cpu import ops\n"
        "args = (torch.tensor([5]), torch.tensor([9]), torch.arange(4))\n"
        "got = torch.ops.sgl_kernel.murmur_hash32_cpu.default(*args)\n"
        "assert torch.equal(got, ops.murmur_hash32_cpu(*args)), got\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
