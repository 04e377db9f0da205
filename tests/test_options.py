"""``option`` fields -> argparse flags and back: defaults, help, kinds of flag, validation."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import pytest

from sglang_pdd.options import add_options, field_default, flags, option, options_from_args

MODES = ("fast", "slow")


@dataclass(frozen=True)
class Inner:
    enable_cache: bool = option(True, "no cache", flag="--no-cache")
    rate: float | None = option(None, "a rate (default: unlimited)")


@dataclass(frozen=True)
class Demo:
    urls: tuple[str, ...] = option(help="a URL (repeat)", repeat=True)
    size: int = option(4, "how many")
    scale: float = option(0.5, "how much, 100% of it")
    mode: str = option("fast", "how", choices=MODES)
    tags: tuple[str, ...] = option(default_factory=lambda: ("a",), help="a tag", repeat=True)
    verbose: bool = option(False, "talk", flag="--loud")
    name: str = option("", "a name", metavar="WHO")
    other: int = 0  # no flag
    inner: Inner = dataclasses.field(default_factory=Inner)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"--size must be >= 1, got {self.size}")
        if not self.urls:
            raise ValueError("--urls is required")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="demo")
    add_options(p, Demo)
    add_options(p.add_argument_group("inner"), Inner, "inner.")
    return p


def _demo(*argv: str) -> Demo:
    args = _parser().parse_args(["--urls", "http://x", *argv])
    return Demo(
        **options_from_args(Demo, args), inner=Inner(**options_from_args(Inner, args, "inner."))
    )


def test_defaults_come_from_the_fields():
    assert _demo() == Demo(urls=("http://x",))
    p = _parser()
    for cls, prefix in ((Demo, ""), (Inner, "inner.")):
        for f in dataclasses.fields(cls):
            if f.name in flags(cls) and field_default(f) is not dataclasses.MISSING:
                default = p.get_default(prefix + f.name)
                assert (tuple(default) if f.name == "tags" else default) == field_default(f)
    assert p.get_default("urls") == []


def test_flags_set_the_fields():
    argv = "--urls http://y --size 7 --scale 2 --mode slow --tags b --loud --name n --no-cache"
    d = _demo(*argv.split(), "--rate", "1.5")
    assert d.urls == ("http://x", "http://y") and d.tags == ("a", "b")
    assert d.size == 7 and d.scale == 2.0 and isinstance(d.scale, float)
    assert d.mode == "slow" and d.verbose and d.name == "n"
    assert d.inner == Inner(enable_cache=False, rate=1.5)
    assert flags(Demo) == {
        "urls": "--urls",
        "size": "--size",
        "scale": "--scale",
        "mode": "--mode",
        "tags": "--tags",
        "verbose": "--loud",
        "name": "--name",
    }
    assert flags(Inner) == {"enable_cache": "--no-cache", "rate": "--rate"}


def test_help_shows_defaults_and_names_values():
    text = " ".join(_parser().format_help().split())
    assert "--size SIZE how many (default: 4)" in text
    assert "how much, 100% of it (default: 0.5)" in text
    assert "--mode {fast,slow} how (default: fast)" in text
    assert "--name WHO a name" in text and "a name (default" not in text
    assert "a rate (default: unlimited)" in text and "(default: None)" not in text
    assert "--no-cache no cache" in text and "(default: True)" not in text
    assert "a tag" in text and "(default: ['a'])" not in text


def test_bad_values():
    with pytest.raises(ValueError, match="--size must be >= 1, got 0"):
        _demo("--size", "0")
    with pytest.raises(ValueError, match="--urls is required"):
        Demo(**options_from_args(Demo, _parser().parse_args([])))
    with pytest.raises(SystemExit):  # argparse: not an int, not a choice
        _parser().parse_args(["--size", "x"])
    with pytest.raises(SystemExit):
        _parser().parse_args(["--mode", "eager"])
