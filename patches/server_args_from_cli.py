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
    from sglang_pdd.config import DEFAULT_CONTROL_HOST, PddServerConfig, check_kv_events
    from sglang_pdd.transfer.wan_link import WanLinkConfig

    if not hasattr(args, "pdd_role"):
        return server_args  # a parser without our flags (e.g. SGLang's own tests)
    wan = None
    if args.pdd_wan_bandwidth_mbps is None:
        for flag, value in (
            ("--pdd-wan-delay-ms", args.pdd_wan_delay_ms),
            ("--pdd-wan-jitter-ms", args.pdd_wan_jitter_ms),
        ):
            if value:
                raise ValueError(f"{flag} needs --pdd-wan-bandwidth-mbps (the emulated link)")
    else:
        wan = WanLinkConfig(
            bandwidth_mbps=args.pdd_wan_bandwidth_mbps,
            one_way_delay_ms=args.pdd_wan_delay_ms,
            jitter_ms=args.pdd_wan_jitter_ms,
        )
    # Our own later --pdd-* flags keep getattr defaults: tests pass namespaces without them.
    config = PddServerConfig(
        role=args.pdd_role,
        wan_hosts=tuple(h.strip() for h in args.pdd_wan_hosts.split(",") if h.strip()),
        wan=wan,
        control_port=args.pdd_control_port,
        control_host=getattr(args, "pdd_control_host", DEFAULT_CONTROL_HOST),
        control_insecure=bool(getattr(args, "pdd_control_insecure", False)),
        kv_events_insecure=bool(getattr(args, "pdd_kv_events_insecure", False)),
        log_transfers=args.pdd_log_transfers,
        seeded_sampling=bool(getattr(args, "pdd_seeded_sampling", False)),
        parked_ttl_s=float(getattr(args, "pdd_parked_ttl_s", 600.0)),
        control_curve_secret=getattr(args, "pdd_control_curve_secret", ""),
        control_curve_clients=getattr(args, "pdd_control_curve_clients", ""),
        wan_fault_file=getattr(args, "pdd_wan_fault_file", ""),
    )
    config.check_against(
        args.disaggregation_mode, bool(args.disaggregation_decode_enable_radix_cache)
    )
    if config.role != "none":
        check_kv_events(server_args.kv_events_config, config.kv_events_insecure)
    server_args._pdd = config
    return server_args
