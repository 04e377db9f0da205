"""Skip cudaHostUnregister for host KV pools when there is no CUDA device."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.mem_cache.pool_host.common._cuda_host_unregister",
    hook_type="around",
    why="The counterpart of cpu_host_register: tearing the host pool down calls cudart too.",
    how="Without a CUDA device nothing was registered, so nothing is unregistered.",
    remove_when="SGLang skips host registration on its CPU platform itself.",
)


def applies() -> bool:
    import torch

    return not torch.cuda.is_available()


def hook(original, buffer, *args, **kwargs):
    """Nothing was registered on this machine, so there is nothing to undo."""
    return None
