"""Add the ``--pdd-*`` flags to ``python -m sglang.launch_server``."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.server_args.ServerArgs.add_cli_args",
    hook_type="after",
    why="SGLang has no registry for plugin CLI flags; PDD roles are chosen on launch_server.",
    how="After SGLang adds its arguments, add an 'sglang-pdd' argument group to the parser.",
    remove_when="SGLang offers plugin-declared server arguments.",
)


def applies() -> bool:
    return True


def hook(result, parser, *args, **kwargs):
    """Add the sglang-pdd argument group (see docs/flags.md)."""
    from sglang_pdd.config import DEFAULT_CONTROL_HOST, ROLES

    group = parser.add_argument_group("sglang-pdd (cross-datacenter PDD)")
    group.add_argument(
        "--pdd-role",
        default="none",
        choices=ROLES,
        help="PDD role of this server: prefill (with --disaggregation-mode prefill), relay or "
        "main (Relay-/Main-Decode, with --disaggregation-mode decode); none: plain SGLang.",
    )
    group.add_argument(
        "--pdd-wan-hosts",
        default="",
        help="Prefill: comma-separated IPs of KV receivers across the WAN (e.g. Main-Decode's "
        "SGLANG_HOST_IP). Sends to them get their own transfer queues (Relay-Decode's never "
        "wait behind them) and cross the emulated link below when one is set.",
    )
    group.add_argument(
        "--pdd-wan-bandwidth-mbps",
        type=float,
        default=None,
        help="Emulated WAN bandwidth in Mbit/s for KV sent to --pdd-wan-hosts.",
    )
    group.add_argument(
        "--pdd-wan-delay-ms",
        type=float,
        default=0.0,
        help="Emulated one-way WAN delay in milliseconds.",
    )
    group.add_argument(
        "--pdd-wan-jitter-ms",
        type=float,
        default=0.0,
        help="Emulated WAN delay jitter (uniform, +/- this many ms).",
    )
    group.add_argument(
        "--pdd-wan-fault-file",
        default="",
        help="Prefill, with --pdd-wan-bandwidth-mbps: a file whose content (up, stall, drop) "
        "sets the emulated WAN's state before each KV write to --pdd-wan-hosts, to rehearse a "
        "link failure in the middle of a transfer; no file: up.",
    )
    group.add_argument(
        "--pdd-control-port",
        type=int,
        default=0,
        help="Main-Decode: TCP port of the handoff control socket the router connects to.",
    )
    group.add_argument(
        "--pdd-control-host",
        default=DEFAULT_CONTROL_HOST,
        help="Main-Decode: address the control socket binds (name the interface the router "
        "reaches it on; 0.0.0.0: every interface). A non-loopback address needs CURVE keys "
        "or --pdd-control-insecure.",
    )
    group.add_argument(
        "--pdd-control-insecure",
        action="store_true",
        help="Main-Decode: let the control socket bind a non-loopback --pdd-control-host "
        "without CURVE keys (logged as a warning at start).",
    )
    group.add_argument(
        "--pdd-kv-events-insecure",
        action="store_true",
        help="Let SGLang's KV-event publisher (--kv-events-config) bind a non-loopback "
        "address: its events carry every cached prompt's token ids, unauthenticated. Without "
        "it such a config is refused; bind loopback and tunnel across sites instead.",
    )
    group.add_argument(
        "--pdd-control-curve-secret",
        default="",
        help="Main-Decode: this server's CURVE key pair (a NAME.key_secret file from "
        "sglang-pdd control-keys). With --pdd-control-curve-clients, the control socket is "
        "encrypted and only routers whose public key is in that folder can reach it.",
    )
    group.add_argument(
        "--pdd-control-curve-clients",
        default="",
        help="Main-Decode: folder of the public keys (NAME.key files) of the routers allowed on "
        "the control socket (with --pdd-control-curve-secret).",
    )
    group.add_argument(
        "--pdd-seeded-sampling",
        action="store_true",
        help="Sample with SGLang's seeded sampler (per-position hash of sampling_seed) on "
        "this server without --enable-deterministic-inference, so that a seeded request gives "
        "the same tokens on every instance it passes through; requests without a seed get a "
        "random one. Give it to every instance of a PDD cluster (and to the router as "
        "--seeded-sampling).",
    )
    group.add_argument(
        "--pdd-parked-ttl-s",
        type=float,
        default=600.0,
        help="Main-Decode: end a relayed request that sees no handoff, release or other control "
        "message for this long (its KV is cached, as for a release), and forget a watch for a "
        "request that never arrives as long.",
    )
    group.add_argument(
        "--pdd-log-transfers",
        action="store_true",
        help="Log every KV transfer call (destination and bytes) of this server.",
    )
    return result
