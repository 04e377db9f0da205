"""The ``sglang.srt.plugins`` entry point: ``register()``.

SGLang calls it once per process (HTTP server, scheduler, detokenizer), through
``load_plugins()``, which swallows and only logs exceptions. ``register`` therefore applies the
hooks itself and then verifies each one took; a hook that did not take ends the process with
``PluginHookError`` (a ``SystemExit``, which SGLang's loader does not catch) so a half-patched
server never starts.
"""

from __future__ import annotations

import logging
import pkgutil

logger = logging.getLogger("sglang_pdd")

_applied: list[str] = []
_registered = False


class PluginHookError(SystemExit):
    """A hook registered by sglang-pdd did not take effect; the process must not go on."""


def applied_targets() -> list[str]:
    """Targets hooked in this process, in registration order."""
    return list(_applied)


_HOOK_TYPES = ("before", "after", "around", "replace")


def _is_hooked(target: str, hook) -> bool:
    """True when ``target`` now resolves to a wrapper chain that contains ``hook``."""
    owner_path, attr = target.rsplit(".", 1)
    owner = pkgutil.resolve_name(owner_path)
    current = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr)
    current = getattr(current, "__func__", current)  # classmethod / staticmethod
    seen = 0
    while current is not None and seen < 64:
        closure = getattr(current, "__closure__", None) or ()
        if any(cell.cell_contents is hook for cell in closure if _has_contents(cell)):
            return True
        current = getattr(current, "__wrapped__", None)
        seen += 1
    return False


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - probing an empty closure cell raises
    except ValueError:
        return False
    return True


def register() -> None:
    """Install sglang-pdd into this SGLang process. Idempotent; imports lazily."""
    global _registered
    if _registered:
        return
    _registered = True

    from sglang_pdd.cpu.activation import activate

    activate()

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_pdd.patches import load_patch_modules

    wanted = []
    for module in load_patch_modules():
        record = module.RECORD
        if record.hook_type not in _HOOK_TYPES:
            raise PluginHookError(f"sglang-pdd: {module.__name__} has bad hook_type")
        if not module.applies():
            continue
        HookRegistry.register(record.target, module.hook, HookType(record.hook_type))
        wanted.append((record.target, module.hook))

    # load_plugins() applies hooks only after every plugin ran; applying now (idempotent: targets
    # already patched are skipped later) lets us verify before SGLang goes on.
    HookRegistry.apply_hooks()
    failed = [target for target, hook in wanted if not _is_hooked(target, hook)]
    if failed:
        raise PluginHookError(
            "sglang-pdd: these hooks did not take effect, refusing to run half-patched: "
            + ", ".join(failed)
            + " (see the 'Failed to apply hooks' log lines above; the installed SGLang probably "
            "changed these targets: check patches/ against it)"
        )
    _applied.extend(target for target, _ in wanted)
    logger.info("sglang-pdd: %d hooks applied and verified", len(wanted))
