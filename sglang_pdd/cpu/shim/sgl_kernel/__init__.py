"""Stand-in ``sgl_kernel`` for SGLang's CPU engine where the real wheel cannot load.

Installed by ``sglang_pdd.cpu.activation`` only in that situation. Ops on the paths sglang-pdd
uses have pure-PyTorch bodies (``sglang_pdd.cpu.ops``); every other name, and every submodule,
resolves to a placeholder that raises, naming the op and the SGLang feature that needs it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

from sglang_pdd.cpu import ops as _ops
from sglang_pdd.cpu.unsupported import UnsupportedOp

__version__ = "0.0.0+sglang-pdd-cpu"
IS_SGLANG_PDD_STANDIN = True

for _name in _ops.IMPLEMENTED:
    globals()[_name] = getattr(_ops, _name)


def _register_torch_ops():
    """Define the ops SGLang calls as ``torch.ops.sgl_kernel.<name>`` (CPU kernels only)."""
    import torch

    library = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name, schema in _ops.TORCH_OPS.items():
        try:
            getattr(torch.ops.sgl_kernel, name)
            continue  # already defined (another copy of the stand-in in this process)
        except AttributeError:
            pass
        library.define(schema)
        library.impl(name, getattr(_ops, name), "CPU")
    return library


_TORCH_LIBRARY = _register_torch_ops()  # kept alive: dropping it unregisters the ops


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return UnsupportedOp(f"sgl_kernel.{name}")


class _StandinSubmodule(types.ModuleType):
    """``sgl_kernel.<sub>``: implemented ops by name, placeholders for everything else."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _ops.IMPLEMENTED:
            return getattr(_ops, name)
        return UnsupportedOp(f"{self.__name__}.{name}")


# Submodules SGLang imports ops from on CPU paths; any other submodule is missing, as SGLang's
# own ``try: from sgl_kernel.x import ... except ImportError`` fallbacks expect.
STANDIN_SUBMODULES = ("kvcacheio", "speculative", "elementwise", "mamba", "memory", "allreduce")
# Pure-Python data modules of the real wheel, loaded from its files when it is installed.
REAL_PURE_PYTHON_SUBMODULES = ("scalar_type",)


def _real_submodule_spec(fullname: str):
    """Spec for a pure-Python file of the installed (unloadable) wheel, or None."""
    import importlib.util
    from pathlib import Path

    for entry in sys.path:
        if entry == str(Path(__file__).parent.parent):
            continue
        candidate = Path(entry) / "sgl_kernel" / (fullname.rsplit(".", 1)[-1] + ".py")
        if candidate.is_file():
            return importlib.util.spec_from_file_location(fullname, candidate)
    return None


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(__name__ + "."):
            return None
        child = fullname[len(__name__) + 1 :]
        if child in REAL_PURE_PYTHON_SUBMODULES:
            return _real_submodule_spec(fullname)
        if child in STANDIN_SUBMODULES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandinSubmodule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        setattr(sys.modules[parent], child, module)


if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _SubmoduleFinder())
