"""On the CPU engine, start SGLang's scheduler and detokenizer processes with fork."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.entrypoints.engine._set_envs_and_config",
    hook_type="after",
    why=(
        "SGLang starts its scheduler and detokenizer processes with spawn (CUDA cannot be "
        "forked), so each re-imports SGLang, torch, transformers and flashinfer: about two "
        "thirds of a CPU server's start (44 s of CPU on a 2-core host, of which 41 s are "
        "imports). A CPU-engine server has no CUDA context to protect, and a test suite or "
        "CPU testbed starts dozens of servers."
    ),
    how=(
        "With --pdd-fork-subprocesses, after SGLang sets the start method to spawn, set it to "
        "fork: the children inherit the launcher's imports (and its installed hooks). The flag "
        "is refused, naming it, unless SGLANG_USE_CPU_ENGINE=1 and no CUDA device is present."
    ),
    remove_when="SGLang chooses fork (or a preloading forkserver) for its CPU engine itself.",
)


def applies() -> bool:
    return True  # the hook itself refuses the flag where it cannot apply


def hook(result, server_args, *args, **kwargs):
    """Switch the start method to fork when asked; refuse the flag off the CPU engine."""
    from sglang_pdd.config import attached_config

    if not attached_config(server_args).fork_subprocesses:
        return result
    import multiprocessing

    import torch

    from sglang_pdd.cpu.activation import CPU_ENGINE_ENV, cpu_engine_requested

    if not cpu_engine_requested() or torch.cuda.is_available():
        raise ValueError(
            f"--pdd-fork-subprocesses needs SGLang's CPU engine ({CPU_ENGINE_ENV}=1) on a host "
            "without a CUDA device: CUDA cannot be used in a forked process"
        )
    multiprocessing.set_start_method("fork", force=True)
    return result
