"""Shared fixtures: a generated tiny model and real SGLang servers, started once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser):
    parser.addoption(
        "--shared-dir",
        default=os.environ.get("SGLANG_PDD_SHARED", str(REPO.parent / "shared")),
        help="the project's shared/ folder (traces); default ../shared beside the checkout",
    )


@pytest.fixture(scope="session")
def shared_dir(pytestconfig) -> Path:
    return Path(pytestconfig.getoption("--shared-dir"))


def sglang_installed() -> bool:
    try:
        import sglang  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer random Llama with a local tokenizer (256 KV bytes per token in bf16)."""
    if not sglang_installed():
        pytest.skip("sglang is not installed in this environment")
    from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny-model"), TinyModelConfig(seed=0))


@pytest.fixture(scope="session")
def sglang_process_report(tiny_model) -> dict:
    """One fresh SGLang process, as ``sglang.launch_server`` and a server's scheduler would be
    (``SGLANG_USE_CPU_ENGINE``). It loads the plugins twice (registering is idempotent), checks
    the SGLang surface with every hook applied, then parses two command lines with the parser
    ``launch_server`` uses right after ``load_plugins()`` (``prepare_server_args``): ``--help``
    and contradictory PDD flags. One process for all: each SGLang import costs ~15 s.

    Returns: ``hooks`` (how many applied), ``surface`` (the check's problems), ``help_exit``
    and ``help`` (the exit code and the text of ``--help``), ``refusal`` (the contradictory
    flags' error, ``None`` if they were accepted)."""
    import json
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import contextlib, io, json, sys
        from sglang.srt.plugins import load_plugins
        from sglang_pdd import plugin
        load_plugins()
        first = plugin.applied_targets()
        plugin.register()
        load_plugins()
        assert plugin.applied_targets() == first, (first, plugin.applied_targets())
        from sglang_pdd.sglang_surface import check_surface
        report = {"hooks": len(first), "surface": check_surface()}
        from sglang.srt.server_args import prepare_server_args
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            try:
                prepare_server_args(["--help"])
            except SystemExit as exit:
                report["help_exit"] = exit.code
        report["help"] = text.getvalue()
        contradictory = ["--model-path", sys.argv[1], "--pdd-role", "relay"]
        try:
            prepare_server_args(contradictory + ["--disaggregation-mode", "prefill"])
            report["refusal"] = None
        except (ValueError, SystemExit) as refused:
            report["refusal"] = str(refused)
        print(json.dumps(report))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tiny_model)],
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def pytest_collection_modifyitems(session, config, items):
    """Run the e2e tests (real servers, most of the machine's memory) after everything else, so
    that the tests that import SGLang in a fresh subprocess never compete with them."""
    e2e = REPO / "tests" / "e2e"
    items.sort(key=lambda item: Path(str(item.path)).is_relative_to(e2e))
