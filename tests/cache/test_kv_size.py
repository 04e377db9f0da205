"""``cache.kv_size``: the one KV-bytes-per-token formula (pure)."""

import pytest

from sglang_pdd.cache.kv_size import DTYPE_BYTES, dtype_bytes, kv_bytes_per_token
from sglang_pdd.testbed.tiny_model import TinyModelConfig


def test_formula_is_k_and_v_for_every_layer():
    # Llama-3-8B: 32 layers, 8 KV heads of 128 in bfloat16: 128 KiB per token.
    assert kv_bytes_per_token(32, 8, 128, dtype_bytes("bfloat16")) == 131072


@pytest.mark.parametrize(("name", "width"), [("float32", 4), ("torch.float16", 2), ("fp8_e4m3", 1)])
def test_dtype_widths(name, width):
    assert dtype_bytes(name) == width


def test_unknown_dtype_is_refused_naming_the_accepted_ones():
    with pytest.raises(ValueError, match="unknown KV dtype 'float64'.*bfloat16"):
        dtype_bytes("float64")


def test_the_testbed_model_uses_the_same_formula():
    cfg = TinyModelConfig(layers=3, hidden=96, heads=6, kv_heads=3)
    assert cfg.kv_bytes_per_token(4) == kv_bytes_per_token(3, 3, 16, DTYPE_BYTES["float32"])
