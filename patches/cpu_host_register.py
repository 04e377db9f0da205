"""Skip cudaHostRegister for host KV pools when there is no CUDA device."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.mem_cache.pool_host.common._cuda_host_register",
    hook_type="around",
    why=(
        "The decode server builds a host pool for retraction backup and pins it with "
        "torch.cuda.cudart().cudaHostRegister, which fails on a machine without CUDA."
    ),
    how=(
        "Without a CUDA device the call is skipped: on the CPU engine the 'device' KV already "
        "lives in host memory, so there is nothing to pin for DMA."
    ),
    remove_when="SGLang skips host registration on its CPU platform itself.",
)


def applies() -> bool:
    import torch

    return not torch.cuda.is_available()


def hook(original, buffer, *args, **kwargs):
    """Pin only where a CUDA device exists (``applies()`` already checked there is none)."""
    return None
