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
def sglang_process_report() -> list[str]:
    """One fresh SGLang process, as a server's scheduler would be (``SGLANG_USE_CPU_ENGINE``):
    it loads the plugins twice (registering is idempotent), then checks the SGLang surface with
    every hook applied. Its stdout lines: the number of hooks applied, then the surface check's
    problems or ``SURFACE-HOLDS``. One process for both checks: each SGLang import costs ~15 s.
    """
    if not sglang_installed():
        pytest.skip("needs the pinned SGLang installed")
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        from sglang.srt.plugins import load_plugins
        from sglang_pdd import plugin
        load_plugins()
        first = plugin.applied_targets()
        plugin.register()
        load_plugins()
        assert plugin.applied_targets() == first, (first, plugin.applied_targets())
        print(len(first))
        from sglang_pdd.sglang_surface import check_surface
        problems = check_surface()
        print("\\n".join(problems) if problems else "SURFACE-HOLDS")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()


def pytest_collection_modifyitems(session, config, items):
    """Run the e2e tests (real servers, most of the machine's memory) after everything else, so
    that the tests that import SGLang in a fresh subprocess never compete with them."""
    e2e = REPO / "tests" / "e2e"
    items.sort(key=lambda item: Path(str(item.path)).is_relative_to(e2e))
