"""Turn the parsed ``--pdd-*`` flags into a ``PddServerConfig`` on ``ServerArgs``."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.server_args.ServerArgs.from_cli_args",
    hook_type="after",
    why=(
        "ServerArgs is a msgspec struct with a fixed field set; plugin flags must travel to the "
        "scheduler subprocesses some other way."
    ),
    how=(
        "Validate the flags into a frozen PddServerConfig and store it as server_args._pdd "
        "(underscore attributes survive ServerArgs pickling); refuse contradictory flags with "
        "a ValueError that names them."
    ),
    remove_when="SGLang offers plugin-declared server arguments.",
)


def applies() -> bool:
    return True


def hook(server_args, cls, args, *rest, **kwargs):
    """Build and attach the config; raises ValueError on contradictory flags."""
    from sglang_pdd.config import PddServerConfig, check_kv_events
    from sglang_pdd.options import options_from_args

    if not hasattr(args, "pdd_role"):
        return server_args  # a parser without our flags (e.g. SGLang's own tests)
    config = PddServerConfig(**options_from_args(PddServerConfig, args, prefix="pdd_"))
    config.check_against(
        args.disaggregation_mode, bool(args.disaggregation_decode_enable_radix_cache)
    )
    if config.role != "none":
        check_kv_events(server_args.kv_events_config, config.kv_events_insecure)
    server_args._pdd = config
    return server_args
