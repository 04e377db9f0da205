"""Add the ``--pdd-*`` flags to ``python -m sglang.launch_server``."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.server_args.ServerArgs.add_cli_args",
    hook_type="after",
    why="SGLang has no registry for plugin CLI flags; PDD roles are chosen on launch_server.",
    how=(
        "After SGLang adds its arguments, add an 'sglang-pdd' argument group to the parser: "
        "one --pdd-* flag per PddServerConfig field (sglang_pdd/options.py)."
    ),
    remove_when="SGLang offers plugin-declared server arguments.",
)


def applies() -> bool:
    return True


def hook(result, parser, *args, **kwargs):
    """Add the sglang-pdd argument group: one flag per ``PddServerConfig`` field, its name,
    default and help taken from the field (docs/flags.md lists them)."""
    from sglang_pdd.config import FLAG_PREFIX, PddServerConfig
    from sglang_pdd.options import add_options

    group = parser.add_argument_group("sglang-pdd (cross-datacenter PDD)")
    add_options(group, PddServerConfig, prefix="pdd_", flag_prefix=FLAG_PREFIX)
    return result
