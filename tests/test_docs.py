"""Every flag an operator can pass is documented in the README: the router's and the
``--pdd-*`` flags of ``launch_server``."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from sglang_pdd.patches import server_args_cli
from sglang_pdd.router.cli import build_parser

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
DOCUMENTED = set(re.findall(r"`(--[a-z0-9-]+)", README))


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}


def test_every_router_flag_is_in_the_readme():
    missing = sorted(_flags(build_parser()) - DOCUMENTED)
    assert not missing, f"README.md documents no {', '.join(missing)}"


def test_every_launch_server_pdd_flag_is_in_the_readme():
    parser = argparse.ArgumentParser()
    server_args_cli.hook(None, parser)
    missing = sorted(_flags(parser) - DOCUMENTED)
    assert not missing, f"README.md documents no {', '.join(missing)}"


@pytest.mark.parametrize("flag", ["--handoff-switch", "--admin-api-key", "--pdd-role"])
def test_the_check_sees_real_flags(flag):
    assert flag in DOCUMENTED


def test_the_flag_reference_is_current():
    from sglang_pdd.flags_doc import render

    doc = (Path(__file__).resolve().parent.parent / "docs" / "flags.md").read_text()
    assert doc == render(), "docs/flags.md is stale: run sglang-pdd flags --out docs/flags.md"
