"""The Dockerfile builds on the SGLang release the plugin pins, and copies what setup.py
installs (no Docker here: the file is checked, not built)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_base_image_is_the_pinned_sglang_release():
    dockerfile = (ROOT / "Dockerfile").read_text()
    (image,) = re.findall(r"^ARG SGLANG_IMAGE=lmsysorg/sglang:v(\S+)$", dockerfile, re.M)
    (pinned,) = re.findall(
        r"^sglang==(\S+)$", (ROOT / "scripts/requirements.txt").read_text(), re.M
    )
    assert image == pinned


def test_it_copies_every_package_setup_py_installs():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for path in ("setup.py", "pyproject.toml", "sglang_pdd", "patches"):
        assert re.search(rf"^COPY .*\b{re.escape(path)}\b", dockerfile, re.M), path
    assert "--no-deps" in dockerfile  # the image's CUDA SGLang and Mooncake stay as they are
