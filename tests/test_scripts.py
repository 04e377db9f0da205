"""Every ``sglang_pdd`` name the scripts under ``benchmark/`` and ``examples/`` import (at the
top or inside a function) exists: a moved module fails here, not in an operator's run."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*ROOT.glob("benchmark/*.py"), *ROOT.glob("examples/*.py")])


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang_pdd"):
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sglang_pdd"):
                    yield alias.name, None


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_every_sglang_pdd_import_resolves(script):
    for module, name in _imports(script):
        imported = importlib.import_module(module)
        if name is not None and not hasattr(imported, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, or ImportError
