"""The SGLang surface sglang-pdd relies on (``sglang_pdd/sglang_surface.py``) holds in the pinned
SGLang, the check can fail, and the table covers every hook target and names real call sites."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sglang_pdd.patches import load_patch_modules
from sglang_pdd.sglang_surface import (
    ATTR,
    CLASS,
    CLASS_ATTR,
    FUNCTION,
    METHOD,
    SURFACE,
    Use,
    check_surface,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_surface_holds_in_the_installed_sglang(sglang_process_report):
    """The upgrade check: whatever this names changed in SGLang; fix our code, then the table.
    Checked in a fresh SGLang process with the CPU engine and every hook applied, as a server's
    scheduler runs (``sglang_process_report``)."""
    assert sglang_process_report["surface"] == []


def test_a_wrong_entry_is_reported():
    pytest.importorskip("sglang", reason="needs the pinned SGLang installed")
    orchestrator = "sglang.srt.sampling.penaltylib.orchestrator"
    frequency = "sglang.srt.sampling.penaltylib.frequency_penalty"
    good = [
        Use(frequency, "BatchedFrequencyPenalizer.frequency_penalties", ATTR, "x"),  # self.X =
        Use(frequency, "BatchedFrequencyPenalizer._is_prepared", ATTR, "x"),  # in a base class
        Use(orchestrator, "BatchedPenalizerOrchestrator", CLASS, "x", ("batch",)),
    ]
    assert check_surface(good) == []
    wrong = {
        "made-up attribute": Use(
            orchestrator, "BatchedPenalizerOrchestrator.no_such_attribute", ATTR, "x"
        ),
        "made-up class attribute": Use(
            orchestrator, "BatchedPenalizerOrchestrator.no_such_thing", CLASS_ATTR, "x"
        ),
        "made-up method": Use(orchestrator, "BatchedPenalizerOrchestrator.no_such", METHOD, "x"),
        "made-up class": Use(orchestrator, "NoSuchClass.method", METHOD, "x"),
        "made-up module": Use("sglang.srt.no_such_module", "f", FUNCTION, "x"),
        "gone parameter": Use(
            orchestrator, "BatchedPenalizerOrchestrator.__init__", METHOD, "x", ("no_such_param",)
        ),
        "moved parameter": Use(
            orchestrator,
            "BatchedPenalizerOrchestrator.__init__",
            METHOD,
            "x",
            ("batch", "vocab_size"),  # the real order is (vocab_size, batch, penalizers)
            positional=True,
        ),
    }
    problems = check_surface(wrong.values())
    assert len(problems) == len(wrong), problems
    for line, use in zip(problems, wrong.values(), strict=True):
        assert line.startswith(use.target), line


def test_every_hook_target_is_in_the_surface():
    # Each target then exists, with its signature, wherever the surface holds (above).
    targets = {use.target for use in SURFACE}
    missing = [m.__name__ for m in load_patch_modules() if m.RECORD.target not in targets]
    assert missing == []


def test_every_entry_names_files_that_use_it():
    for use in SURFACE:
        assert use.kind in ("function", "method", "class", "attr", "class_attr"), use
        files = use.used_in.split(", ")
        assert len(set(files)) == len(files), use
        for name in files:
            top = name.split("/", 1)[0]
            text = (ROOT / name if top == "patches" else ROOT / "sglang_pdd" / name).read_text()
            assert use.name.rsplit(".", 1)[-1] in text, (use.target, name)


def test_entries_are_listed_once():
    keys = [(use.target, use.kind) for use in SURFACE]
    assert len(keys) == len(set(keys)), [k for k in keys if keys.count(k) > 1]


def test_the_module_imports_no_sglang():
    code = (
        "import sys, sglang_pdd.sglang_surface\n"
        "print(any(m == 'sglang' or m.startswith('sglang.') for m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
