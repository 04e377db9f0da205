"""How many bytes of KV cache one token occupies: the one formula the router and the testbed's
model use (Main-Decode measures its own pool instead: ``main_decode.state.kv_bytes_per_token``)."""

from __future__ import annotations

# Bytes per element of the KV dtypes SGLang serves (``--kv-cache-dtype``, else ``--dtype``).
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
}


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K and V for every layer: 2 x layers x KV heads x head dim x bytes per element."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def dtype_bytes(name: str) -> int:
    """Bytes per element of the dtype SGLang names ``name``; ValueError for one it does not."""
    try:
        return DTYPE_BYTES[name.removeprefix("torch.")]
    except KeyError:
        raise ValueError(
            f"unknown KV dtype {name!r}: expected one of {sorted(DTYPE_BYTES)}"
        ) from None
