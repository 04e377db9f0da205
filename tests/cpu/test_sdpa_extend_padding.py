"""``patches/cpu_sdpa_extend_padding.py``: the CPU attention backend's extend pads each query to
the whole sequence; the padding is zeros (not uninitialized memory, whose denormal floats made a
handoff's extend up to 70x slower) and the output is exactly the unpatched one. No servers."""

from __future__ import annotations

import inspect

import pytest

from tests.conftest import sglang_installed

pytestmark = pytest.mark.skipif(not sglang_installed(), reason="needs SGLang's CPU backend")


def _extend_args(torch, prefix: int, extend: int, heads: int = 4, dim: int = 16):
    gen = torch.Generator().manual_seed(0)
    total = prefix + extend
    k_cache = torch.randn(total + 8, heads, dim, generator=gen)
    v_cache = torch.randn(total + 8, heads, dim, generator=gen)
    req_to_token = torch.arange(total + 8).reshape(1, -1)
    query = torch.randn(extend, heads, dim, generator=gen)
    return (
        query,
        torch.empty(extend, heads, dim),
        k_cache,
        v_cache,
        req_to_token,
        torch.tensor([0]),
        torch.tensor([total]),
        torch.tensor([prefix]),
        torch.tensor([extend]),
    )


def test_the_padding_rows_are_zeros_and_the_output_is_unchanged(monkeypatch):
    import torch
    from sglang.srt.layers.attention import torch_native_backend as backend

    from sglang_pdd.patches import cpu_sdpa_extend_padding as patch

    original = backend.TorchNativeAttnBackend._run_sdpa_forward_extend
    # What the patch relies on: the padded query comes from the module's torch.empty.
    assert "torch.empty(" in inspect.getsource(original)
    this = object.__new__(backend.TorchNativeAttnBackend)
    prefix, extend = 40, 7
    plain = _extend_args(torch, prefix, extend)
    original(this, *plain, scaling=0.25, causal=True)

    queries = []
    sdpa = backend.scaled_dot_product_attention

    def spy(query, *args, **kwargs):
        queries.append(query.clone())
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(backend, "scaled_dot_product_attention", spy)
    patched = _extend_args(torch, prefix, extend)
    patch.hook(original, this, *patched, scaling=0.25, causal=True)
    assert backend.torch is torch  # restored
    [query] = queries
    assert query.shape[2] == prefix + extend
    assert torch.count_nonzero(query[:, :, :prefix]) == 0
    assert torch.equal(patched[1], plain[1])  # the output rows, bit for bit
