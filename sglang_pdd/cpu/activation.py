"""Decide whether the ``sgl_kernel`` stand-in is needed, and switch it on.

The stand-in is a directory holding a package named ``sgl_kernel``; switching it on prepends that
directory to ``sys.path`` (and ``PYTHONPATH``). Spawned SGLang subprocesses inherit the parent's
``sys.path`` through ``multiprocessing``'s preparation data, which is applied before the child
unpickles its target and so before the scheduler module imports ``sgl_kernel``: this is why the
plugin's entry point in the launching process is enough, although the scheduler's own plugin load
runs only after its imports.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

SHIM_DIR = str(Path(__file__).with_name("shim"))
CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"
# Lets tests and operators force a decision: "auto" (default), "on", "off".
FORCE_ENV = "SGLANG_PDD_CPU_KERNELS"
_FORCE_VALUES = ("auto", "on", "off")


def cpu_engine_requested() -> bool:
    """True when SGLang was asked to run its CPU engine."""
    return os.environ.get(CPU_ENGINE_ENV, "0") == "1"


def real_sgl_kernel_loads() -> bool:
    """Try the installed ``sgl_kernel``; leave no half-imported modules behind on failure."""
    if is_active():
        return False
    try:
        importlib.import_module("sgl_kernel")
        return True
    except (ImportError, OSError) as exc:
        logger.info("sgl_kernel does not load here (%s)", str(exc).strip().splitlines()[0])
        for name in [m for m in sys.modules if m == "sgl_kernel" or m.startswith("sgl_kernel.")]:
            del sys.modules[name]
        return False


def is_active() -> bool:
    """True when the stand-in directory is on ``sys.path``."""
    return SHIM_DIR in sys.path


def should_activate() -> bool:
    """The stand-in is needed only for the CPU engine on a machine where sgl_kernel cannot load."""
    force = os.environ.get(FORCE_ENV, "auto").lower()
    if force not in _FORCE_VALUES:
        raise ValueError(f"{FORCE_ENV}={force!r}: accepted values are {', '.join(_FORCE_VALUES)}")
    if force != "auto":
        return force == "on"
    if not cpu_engine_requested():
        return False
    if "sgl_kernel" in sys.modules and not is_active():
        return False  # the real one is already imported and working
    return not real_sgl_kernel_loads()


def activate() -> bool:
    """Switch the stand-in on if ``should_activate()``; idempotent. Returns whether it is on."""
    if is_active():
        return True
    if not should_activate():
        return False
    sys.path.insert(0, SHIM_DIR)
    parts = [SHIM_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    importlib.invalidate_caches()
    logger.info("sglang-pdd: pure-PyTorch sgl_kernel stand-in active (%s)", SHIM_DIR)
    return True
