"""Ops with no CPU implementation: they exist (SGLang imports them) but raise when called."""

from __future__ import annotations

# Name fragments -> the SGLang feature that calls such ops, for the error message.
_FEATURES: tuple[tuple[str, str], ...] = (
    ("tree", "speculative decoding (EAGLE/MTP tree verification)"),
    ("draft", "speculative decoding (draft KV allocation)"),
    ("accept", "speculative decoding (accepted-token bookkeeping)"),
    ("bonus", "speculative decoding (bonus tokens)"),
    ("rotate_input_ids", "speculative decoding (multi-layer EAGLE)"),
    ("speculative", "speculative decoding"),
    ("moe", "mixture-of-experts layers"),
    ("expert", "mixture-of-experts layers"),
    ("topk", "mixture-of-experts routing"),
    ("quant", "quantized models"),
    ("fp8", "FP8 quantized models"),
    ("int8", "INT8 quantized models"),
    ("int4", "INT4 quantized models"),
    ("marlin", "GPTQ/AWQ quantized models"),
    ("gguf", "GGUF models"),
    ("mla", "multi-head latent attention (DeepSeek models)"),
    ("conv1d", "Mamba / linear-attention models"),
    ("delta_rule", "linear-attention models"),
    ("gdn", "linear-attention models"),
    ("allreduce", "tensor parallelism"),
    ("allgather", "tensor parallelism"),
    ("shm_", "tensor parallelism"),
    ("flash", "FlashAttention / FlashMLA attention backends"),
    ("attention", "the Intel AMX attention backend"),
    ("transfer_kv", "hierarchical KV cache (HiCache) host transfers"),
    ("grammar", "constrained decoding on GPU"),
    ("bitmask", "constrained decoding on GPU"),
)


def feature_of(op_name: str) -> str:
    """The SGLang feature that needs ``op_name``, as well as a name fragment can tell."""
    lowered = op_name.lower()
    for fragment, feature in _FEATURES:
        if fragment in lowered:
            return feature
    return "an SGLang feature outside sglang-pdd's CPU paths"


class UnsupportedKernelError(NotImplementedError):
    """Raised when SGLang calls an ``sgl_kernel`` op that has no CPU implementation here."""


class UnsupportedOp:
    """A named placeholder that raises ``UnsupportedKernelError`` when called."""

    def __init__(self, qualified_name: str) -> None:
        self.qualified_name = qualified_name
        self.__name__ = qualified_name.rsplit(".", 1)[-1]

    def __call__(self, *args, **kwargs):
        raise UnsupportedKernelError(
            f"{self.qualified_name} has no CPU implementation in sglang-pdd; it is needed by "
            f"{feature_of(self.__name__)}, which the CPU engine without a native sgl_kernel does "
            "not support. Disable that feature or run on a machine where sgl_kernel loads."
        )

    def __repr__(self) -> str:
        return f"<unsupported sgl_kernel op {self.qualified_name}>"
