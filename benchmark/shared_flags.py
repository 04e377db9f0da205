"""The flags several measurements share, defined once: each measurement's parser adds the ones
it takes (with its own default where the measurement's output differs)."""

from __future__ import annotations

import argparse


def parser(doc: str | None, raw: bool = True) -> argparse.ArgumentParser:
    """A measurement's parser, its docstring as the description (kept as written)."""
    if raw:
        return argparse.ArgumentParser(
            description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
    return argparse.ArgumentParser(description=doc)


def model_path(ap: argparse.ArgumentParser) -> None:
    """``--model-path``: the served model (default: the generated tiny model)."""
    ap.add_argument("--model-path", default=None, help="default: a generated 2-layer model")


def json_out(ap: argparse.ArgumentParser, default: str | None, help: str | None = None) -> None:
    """``--json``: where the run's numbers go."""
    ap.add_argument("--json", default=default, help=help)


def seed(ap: argparse.ArgumentParser) -> None:
    """``--seed``: every random draw of the run (prompts, arrivals, faults, the tiny model)."""
    ap.add_argument("--seed", type=int, default=0)


def repeats(ap: argparse.ArgumentParser, default: int, help: str | None = None) -> None:
    """``--repeats``: how many times each point is measured."""
    ap.add_argument("--repeats", type=int, default=default, help=help)


def rounds(ap: argparse.ArgumentParser, default: int, help: str | None = None) -> None:
    """``--rounds``: alternating rounds of the paths compared."""
    ap.add_argument("--rounds", type=int, default=default, help=help)


def device(ap: argparse.ArgumentParser, default: str, help: str | None = None) -> None:
    """``--device``: where PyTorch runs (cpu or cuda)."""
    ap.add_argument("--device", default=default, help=help)


def out_dir(ap: argparse.ArgumentParser, help: str, default: str | None = None) -> None:
    """``--out``: the folder for the result files (required without a default)."""
    ap.add_argument("--out", default=default, required=default is None, help=help)


def log_dir(ap: argparse.ArgumentParser) -> None:
    """``LOG_DIR``: a testbed run's log folder (it prints it), read after the run."""
    ap.add_argument("log_dir", help="a testbed run's log folder")
