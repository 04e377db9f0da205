"""The entry point, the patch record, and the loud failure when a hook does not take."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

from sglang_pdd.patches import PATCH_MODULES, load_patch_modules

sglang = pytest.importorskip("sglang", reason="needs the pinned SGLang installed")


def test_entry_point_is_registered():
    eps = importlib.metadata.entry_points(group="sglang.srt.plugins")
    assert any(ep.value == "sglang_pdd.plugin:register" for ep in eps)


def test_every_patch_has_a_complete_record():
    modules = load_patch_modules()
    assert len(modules) == len(PATCH_MODULES)
    for module in modules:
        record = module.RECORD
        assert record.hook_type in ("before", "after", "around", "replace"), module.__name__
        for field in ("target", "why", "how", "remove_when"):
            assert len(getattr(record, field)) > 10, (module.__name__, field)
        assert callable(module.hook) and callable(module.applies)


def test_every_module_in_patches_is_listed():
    # A patch module missing from PATCH_MODULES would never be applied nor recorded.
    from pathlib import Path

    import sglang_pdd.patches as patches

    files = {p.stem for p in Path(patches.__file__).parent.glob("*.py") if p.stem != "__init__"}
    assert files == set(PATCH_MODULES)


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_register_is_idempotent_and_verifies_every_hook(sglang_process_report):
    # load_plugins, register and load_plugins again in one process apply every hook once.
    assert sglang_process_report["hooks"] == len(PATCH_MODULES)


def test_contradictory_flags_are_refused(sglang_process_report):
    # launch_server's own parsing, after load_plugins, refuses them by name.
    refusal = sglang_process_report["refusal"]
    assert refusal is not None and "--pdd-role relay needs --disaggregation-mode decode" in refusal


def test_flags_are_in_launch_server_help(sglang_process_report):
    assert sglang_process_report["help_exit"] == 0
    for flag in ("--pdd-role", "--pdd-wan-hosts", "--pdd-control-port", "--pdd-control-host"):
        assert flag in sglang_process_report["help"], flag


def test_a_hook_that_does_not_take_stops_the_process():
    result = _run(
        """
        import types
        import sglang_pdd.patches as patches
        from sglang_pdd.patches import PatchRecord
        bogus = types.ModuleType("bogus_patch")
        bogus.RECORD = PatchRecord(
            target="sglang.srt.server_args.ServerArgs.no_such_method_anywhere",
            hook_type="after", why="test", how="test", remove_when="test")
        bogus.applies = lambda: True
        bogus.hook = lambda result, *a, **k: result
        patches.load_patch_modules = lambda: [bogus]
        from sglang.srt.plugins import load_plugins
        load_plugins()
        print("SHOULD NOT GET HERE")
        """
    )
    assert result.returncode != 0
    assert "SHOULD NOT GET HERE" not in result.stdout
    assert "no_such_method_anywhere" in result.stderr


def test_hook_record_document_is_current():
    from pathlib import Path

    result = subprocess.run(
        [sys.executable, "-m", "sglang_pdd.cli", "hooks"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    doc = (Path(__file__).resolve().parent.parent / "docs" / "hooks.md").read_text()
    assert result.stdout.strip() in doc, "docs/hooks.md is stale: regenerate with sglang-pdd hooks"


def test_mooncake_comes_only_with_the_cpu_extra():
    """A GPU SGLang environment keeps its own Mooncake: the CPU wheel is the ``cpu`` extra."""
    import importlib.metadata

    requires = importlib.metadata.requires("sglang-pdd")
    mooncake = [r for r in requires if r.startswith("mooncake")]
    assert mooncake == ['mooncake-transfer-engine-non-cuda; extra == "cpu"'], requires
