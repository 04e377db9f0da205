"""Make the Mooncake KV sender take the plain (non-pinned) page-index path on CPU."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.disaggregation.mooncake.conn.MooncakeKVSender.__init__",
    hook_type="after",
    why=(
        "prefill.py _send_kv_chunk copies page indices into pinned memory and records a "
        "torch.cuda.Event when the sender's supports_host_tensor_indices is true, which the "
        "Mooncake sender sets as a class attribute; both calls fail without CUDA."
    ),
    how=(
        "After each sender is built, set supports_host_tensor_indices=False on the instance, "
        "so SGLang uses its own kv_to_page_indices path (the same indices, computed on the host)."
    ),
    remove_when="SGLang gates the pinned-index path on the device being CUDA.",
)


def applies() -> bool:
    import torch

    return not torch.cuda.is_available()


def hook(result, self, *args, **kwargs):
    """Turn the CUDA-only index path off for this sender."""
    self.supports_host_tensor_indices = False
    return result
