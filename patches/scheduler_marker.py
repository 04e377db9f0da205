"""Log, from inside each scheduler process, that sglang-pdd's hooks are in place there."""

from __future__ import annotations

import logging
import os

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler.__init__",
    hook_type="after",
    why=(
        "Operators and tests need proof that the plugin loaded in the spawned scheduler "
        "subprocess (SGLang only logs plugin failures, and the scheduler imports its modules "
        "before loading plugins)."
    ),
    how=(
        "After the scheduler is built, log one line naming the pid and the hooks applied in this "
        "process, and whether the sgl_kernel stand-in is active."
    ),
    remove_when="Never needed by SGLang itself; remove if the startup line is not wanted.",
)

MARKER = "sglang-pdd: scheduler hooks active"
logger = logging.getLogger("sglang_pdd")


def applies() -> bool:
    return True


def hook(result, self, *args, **kwargs):
    """Emit the marker line."""
    from sglang_pdd.cpu.activation import is_active
    from sglang_pdd.plugin import applied_targets

    logger.warning(
        "%s pid=%d cpu_kernel_standin=%s targets=%s",
        MARKER,
        os.getpid(),
        is_active(),
        ",".join(applied_targets()),
    )
    return result
