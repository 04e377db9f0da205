"""The record of every hook sglang-pdd puts into SGLang: one module per patched target.

Each module defines ``RECORD`` (a ``PatchRecord``: target, hook type, why, how, and when the hook
can be removed), ``hook`` (the callable HookRegistry installs) and ``applies()`` (whether this
process needs it). Upgrading SGLang is a walk down ``PATCH_MODULES``: for each, check the target
still exists with the same shape and whether its removal condition now holds;
``tests/test_sglang_surface.py`` checks those shapes and every other SGLang name the code relies
on (``sglang_pdd/sglang_surface.py``).
``sglang-pdd hooks`` prints this record.

This folder is the package ``sglang_pdd.patches``: ``setup.py`` lists it among the packages and
maps it here (``package_dir={"sglang_pdd.patches": "patches"}``), for a wheel and an editable
install alike, so code and tests import ``sglang_pdd.patches.<module>``; there is no ``patches``
package of its own and no ``sglang_pdd/patches/`` folder.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

PATCH_MODULES: tuple[str, ...] = (
    "cpu_host_register",
    "cpu_host_unregister",
    "cpu_mooncake_sender_indices",
    "cpu_parallel_groups",
    "cpu_fork_subprocesses",
    "scheduler_init",
    "emulated_forward",
    "server_args_cli",
    "server_args_from_cli",
    "kv_transfer_ledger",
    "kv_transfer_queue_split",
    "kv_wan_engine",
    "prefill_twin_hold",
    "main_decode_queue",
    "main_handoff_batch",
    "main_admission",
    "main_control_ingest",
    "main_abort",
    "main_idle",
    "penalizer_order",
    "seeded_sampling",
    "cpu_seeded_sampler_eager",
    "cpu_sdpa_extend_padding",
)


@dataclass(frozen=True)
class PatchRecord:
    """What one hook patches and why; the upgrade checklist entry for it."""

    target: str  # dotted path HookRegistry resolves
    hook_type: str  # "before" | "after" | "around" | "replace"
    why: str
    how: str
    remove_when: str


def load_patch_modules() -> list[ModuleType]:
    """Import every patch module (each imports SGLang only inside its hook)."""
    return [importlib.import_module(f"{__name__}.{name}") for name in PATCH_MODULES]


def print_record(argv: list[str]) -> int:
    """``sglang-pdd hooks``: print the patch record (the SGLang upgrade checklist)."""
    del argv
    for module in load_patch_modules():
        r = module.RECORD
        print(f"{r.target}  [{r.hook_type}]  ({module.__name__.rsplit('.', 1)[-1]})")
        print(f"  why:         {r.why}")
        print(f"  how:         {r.how}")
        print(f"  remove when: {r.remove_when}\n")
    return 0
