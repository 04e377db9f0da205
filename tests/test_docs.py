"""The docs as a reference: every flag an operator can pass (the router's and the ``--pdd-*``
flags of ``launch_server``) in docs/flags.md, generated and current; no history references."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from sglang_pdd.patches import server_args_cli
from sglang_pdd.router.cli import build_parser

FLAGS_DOC = (Path(__file__).resolve().parent.parent / "docs" / "flags.md").read_text()
DOCUMENTED = set(re.findall(r"`(--[a-z0-9-]+)", FLAGS_DOC))


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}


def test_every_router_flag_is_in_the_flag_reference():
    missing = sorted(_flags(build_parser()) - DOCUMENTED)
    assert not missing, f"docs/flags.md documents no {', '.join(missing)}"


def test_every_launch_server_pdd_flag_is_in_the_flag_reference():
    parser = argparse.ArgumentParser()
    server_args_cli.hook(None, parser)
    missing = sorted(_flags(parser) - DOCUMENTED)
    assert not missing, f"docs/flags.md documents no {', '.join(missing)}"


@pytest.mark.parametrize("flag", ["--handoff-switch", "--admin-api-key", "--pdd-role"])
def test_the_check_sees_real_flags(flag):
    assert flag in DOCUMENTED


def test_the_flag_reference_is_current():
    from sglang_pdd.flags_doc import render

    doc = (Path(__file__).resolve().parent.parent / "docs" / "flags.md").read_text()
    assert doc == render(), "docs/flags.md is stale: run sglang-pdd flags --out docs/flags.md"


# A history reference: which planning stop or tracker issue asked for something ("Stop 41",
# "issue 16's goal", "(issue 18 item 5)", "stops 34-35"). Docs and code say what is true and how
# to reproduce it; how it was reached lives in git. Words that merely start the same way
# ("nonstop", "issued", "stop_token_ids", "stop=[2]") do not match.
HISTORY = re.compile(r"\b(?:stop|issue)s?[\s-]*#?\d+", re.IGNORECASE)
ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("README.md", "docs", "sglang_pdd", "patches", "benchmark", "examples")
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".sh", ".txt", ".json", ".cfg"}


def _scanned_files():
    for name in SCANNED:
        top = ROOT / name
        files = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in files:
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


@pytest.mark.parametrize(
    "text",
    [
        "Stop 41",
        "(stop 32; run",
        "issue 16's goal",
        "(issue 18 item 5)",
        "stops 34-35",
        "Issue #8",
        "issue16",
    ],
)
def test_the_history_check_sees_history(text):
    assert HISTORY.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "nonstop 3",
        "issued 3 tokens",
        "stop_token_ids 2",
        "stop=[2]",
        "stop at 30 ids",
        "issues: 4",
        "a backstop 5",
    ],
)
def test_the_history_check_ignores_other_words(text):
    assert not HISTORY.search(text)


def test_no_history_references_in_docs_or_code():
    hits = []
    for path in _scanned_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in HISTORY.finditer(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}")
    assert not hits, (
        "say what is true and how to reproduce it, not which stop or issue asked for it:\n"
        + "\n".join(hits)
    )
