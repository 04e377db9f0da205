"""The code is formatted by ``ruff format`` (line length 100) and passes ``ruff check``: the
formatter formats, and ``# fmt: skip`` is kept for the few tables that read better aligned."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["sglang_pdd", "patches", "tests", "benchmark", "examples", "setup.py"]
MAX_FMT_SKIPS = 10

ruff = shutil.which("ruff")
needs_ruff = pytest.mark.skipif(ruff is None, reason="ruff is not installed")


@needs_ruff
def test_the_tree_is_ruff_formatted():
    out = subprocess.run(
        [ruff, "format", "--check", *PATHS], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


@needs_ruff
def test_the_tree_passes_ruff_check():
    out = subprocess.run([ruff, "check", *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_format_skips_are_a_handful():
    skips = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in ROOT.glob("**/*.py")
        if "build" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.rstrip().endswith("# fmt: skip")
    ]
    assert len(skips) <= MAX_FMT_SKIPS, skips
