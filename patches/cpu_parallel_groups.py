"""Tensor-parallel groups on SGLang's CPU engine: no NCCL communicator."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.distributed.parallel_state.init_model_parallel_group",
    hook_type="around",
    why=(
        "With --tp-size > 1 SGLang builds each parallel group with a PyNccl communicator unless "
        "the platform says otherwise; on the CPU engine that fails ('Expected a cuda device, "
        "but got: cpu'), so a multi-rank server cannot start without a GPU."
    ),
    how=(
        "When the CPU engine is requested and no CUDA device exists, call it with "
        "use_pynccl=False; the group then falls back to torch.distributed over gloo."
    ),
    remove_when="SGLang's CPU platform turns PyNccl off for its parallel groups itself.",
)


def applies() -> bool:
    import torch

    from sglang_pdd.cpu.activation import cpu_engine_requested

    return cpu_engine_requested() and not torch.cuda.is_available()


def hook(original, *args, **kwargs):
    """Build the group without PyNccl (``applies()`` checked there is no CUDA device)."""
    if len(args) > 3:  # (group_ranks, local_rank, backend, use_pynccl, ...)
        args = (*args[:3], False, *args[4:])
    else:
        kwargs["use_pynccl"] = False
    return original(*args, **kwargs)
