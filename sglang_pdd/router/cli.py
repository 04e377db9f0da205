"""``sglang-pdd router``: parse flags into a ``RouterConfig`` and serve."""

from __future__ import annotations

import argparse
import logging

from sglang_pdd.policy import HANDOFF_MODES, HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.router.config import MAIN_TRANSFER_STARTS, MainEndpoint, RouterConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sglang-pdd router",
        description="PDD router: one SGLang-compatible endpoint in front "
        "of Prefill, Relay-Decode and Main-Decode servers.",
    )
    p.add_argument("--prefill", action="append", default=[], help="prefill server URL (repeat)")
    p.add_argument("--relay", action="append", default=[], help="Relay-Decode URL (repeat)")
    p.add_argument("--main", action="append", default=[], help="Main-Decode URL (repeat)")
    p.add_argument(
        "--main-control",
        action="append",
        default=[],
        help="tcp://HOST:PORT of each Main-Decode's --pdd-control-port, in --main order",
    )
    p.add_argument(
        "--main-kv-events",
        action="append",
        default=[],
        help="tcp://HOST:PORT of each Main-Decode's KV event publisher (its "
        "--kv-events-config endpoint), in --main order: the router's view of MD's "
        "cache then follows MD's radix tree; without it, the view holds what MD "
        "confirmed it received",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--handoff-mode", default="one-shot", choices=HANDOFF_MODES)
    p.add_argument(
        "--catchup-threshold",
        type=int,
        default=64,
        help="Catch-Up: hand over in chunks while the backlog exceeds this",
    )
    p.add_argument("--catchup-chunk", type=int, default=64, help="Catch-Up chunk size (tokens)")
    p.add_argument(
        "--ttft-slo-s",
        type=float,
        default=1.0,
        help="TTFT objective: a request whose first token from Main-Decode (prefill plus the KV's "
        "time on the live link) is estimated later than this streams from Relay-Decode first "
        "(P-RLD-MD); 0: always relay",
    )
    p.add_argument(
        "--auto-relay-busy-fraction",
        type=float,
        default=0.8,
        help="--handoff-mode auto: Catch-Up while RLD's live load is below this, One-Shot above",
    )
    p.add_argument(
        "--max-relay-load",
        type=float,
        default=1.0,
        help="send requests P-MD when the least busy RLD's live load reaches this (1.0: full)",
    )
    p.add_argument(
        "--anomaly-min-input-tokens",
        type=int,
        default=32768,
        help="anomaly filter: inputs at least this long ...",
    )
    p.add_argument(
        "--anomaly-max-output-tokens",
        type=int,
        default=32,
        help="... with max_new_tokens at most this finish on RLD alone (P-RLD)",
    )
    p.add_argument("--no-relay", action="store_true", help="P-MD only (no Relay-Decode)")
    p.add_argument(
        "--no-anomaly-filter",
        action="store_true",
        help="never finish long-input/short-output requests on Relay-Decode alone",
    )
    p.add_argument(
        "--wan-bandwidth-mbps",
        type=float,
        default=100.0,
        help="WAN bandwidth the pipeline policy assumes",
    )
    p.add_argument("--wan-rtt-ms", type=float, default=40.0, help="WAN RTT the policy assumes")
    p.add_argument(
        "--tokenizer-path", default=None, help="tokenizer to use (default: the servers' model path)"
    )
    p.add_argument(
        "--upstream-keepalive-s",
        type=float,
        default=2.0,
        help="reuse an idle connection to an instance for at most this long; keep it below "
        "SGLang's 5 s keep-alive minus the link's RTT (0: a new connection per request)",
    )
    p.add_argument(
        "--upstream-connect-timeout-s",
        type=float,
        default=10.0,
        help="give up connecting to an instance after this long (the request gets a 502)",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="clients must send 'Authorization: Bearer KEY' (as sglang.launch_server "
        "--api-key); /health*, /ready*, /metrics stay open",
    )
    p.add_argument(
        "--instance-api-key",
        default=None,
        help="key the router presents to every instance (P, RLD, MD) started with --api-key",
    )
    p.add_argument(
        "--upstream-idle-timeout-s",
        type=float,
        default=600.0,
        help="end a request whose decoding instance sends nothing for this long (504, aborted "
        "everywhere); a Main-Decode parked before the handoff is exempt until the handoff",
    )
    p.add_argument(
        "--handoff-gap-prior-s",
        type=float,
        default=None,
        help="the client-visible cost of a final handoff (RTT + extend + one MD step) assumed "
        "until one is measured (then their moving average); a relayed request whose remaining "
        "ids RLD makes sooner finishes on RLD (default: --wan-rtt-ms)",
    )
    p.add_argument(
        "--max-n",
        type=int,
        default=64,
        help="the most samples (sampling_params.n, OpenAI n) one request may ask for (400 above)",
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=256,
        help="the most prompts one batched /generate may carry (400 above)",
    )
    p.add_argument(
        "--max-body-mb",
        type=float,
        default=64.0,
        help="the largest request body accepted, in MiB (413 above)",
    )
    p.add_argument(
        "--no-tail-on-relay",
        dest="tail_on_relay",
        action="store_false",
        help="hand every relayed request off once MD is ready, even one RLD finishes sooner",
    )
    p.add_argument(
        "--handoff-retry-s",
        type=float,
        default=0.5,
        help="a final handoff Main-Decode defers for lack of KV room is made again this long "
        "after (with the ids Relay-Decode streamed meanwhile; RLD serves until MD takes one)",
    )
    p.add_argument(
        "--instance-check-interval-s",
        type=float,
        default=2.0,
        help="ask each decoding instance for /ready this often; one answering 503 (SGLang's "
        "graceful shutdown after SIGTERM, or paused) is drained: its requests move elsewhere "
        "and it gets no new ones until /ready answers 200 again (0: never ask)",
    )
    p.add_argument(
        "--control-curve-secret",
        default="",
        help="this router's CURVE key pair (a NAME.key_secret file from sglang-pdd "
        "control-keys), for Main-Decodes started with --pdd-control-curve-secret; their "
        "--pdd-control-curve-clients folder must hold this router's NAME.key",
    )
    p.add_argument(
        "--control-curve-server",
        default="",
        help="Main-Decode's CURVE public key (the NAME.key of its --pdd-control-curve-secret)",
    )
    p.add_argument(
        "--control-timeout-s",
        type=float,
        default=5.0,
        help="a Main-Decode control connection silent this long (ZeroMQ heartbeats) is dropped "
        "and redialed, the router watching its requests again; a control message that cannot "
        "be sent this long fails (the request stays on Relay-Decode or migrates)",
    )
    p.add_argument(
        "--migration-limit",
        type=int,
        default=2,
        help="times one greedy request may continue on other instances, from its prompt plus "
        "the ids already sent, after the instance serving it failed or went silent (0: never)",
    )
    p.add_argument(
        "--main-transfer-start",
        default="with-prefill",
        choices=MAIN_TRANSFER_STARTS,
        help="P-RLD-MD: request Main-Decode's KV from P together with Relay-Decode's (P holds "
        "it until the prefill ends; needs sglang-pdd on P) or only after P answered RLD's",
    )
    p.add_argument(
        "--seeded-sampling",
        action="store_true",
        help="every instance runs with --pdd-seeded-sampling: accept sampling_seed (OpenAI "
        "seed) with temperature > 0 (refused otherwise: each instance would draw differently)",
    )
    p.add_argument(
        "--incremental-streaming-output",
        action="store_true",
        help="/generate streams send only the new output ids and text in each chunk, as "
        "SGLang's flag of the same name (default: cumulative, as SGLang's default)",
    )
    p.add_argument("--log-level", default="info")
    return p


# Policy config fields (shared with the simulator's YAML) -> the router flag that sets them.
_POLICY_FLAGS = {
    "ttft_slo_s": "--ttft-slo-s",
    "max_relay_load": "--max-relay-load",
    "anomaly_min_input_tokens": "--anomaly-min-input-tokens",
    "anomaly_max_output_tokens": "--anomaly-max-output-tokens",
    "catchup_threshold_tokens": "--catchup-threshold",
    "catchup_chunk_tokens": "--catchup-chunk",
    "auto_relay_busy_fraction": "--auto-relay-busy-fraction",
}


def _name_the_flag(message: str) -> str:
    for field, flag in _POLICY_FLAGS.items():
        if message.startswith(field):
            return flag + message[len(field) :]
    return message


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    if len(args.main_control) != len(args.main):
        raise ValueError(
            f"--main-control must be given once per --main ({len(args.main)}), "
            f"got {len(args.main_control)}"
        )
    try:
        pipeline = PipelinePolicyConfig(
            ttft_slo_s=args.ttft_slo_s,
            enable_relay=not args.no_relay,
            enable_anomaly_filter=not args.no_anomaly_filter,
            max_relay_load=args.max_relay_load,
            anomaly_min_input_tokens=args.anomaly_min_input_tokens,
            anomaly_max_output_tokens=args.anomaly_max_output_tokens,
        )
        handoff = HandoffPolicyConfig(
            mode=args.handoff_mode,
            catchup_threshold_tokens=args.catchup_threshold,
            catchup_chunk_tokens=args.catchup_chunk,
            auto_relay_busy_fraction=args.auto_relay_busy_fraction,
        )
    except ValueError as exc:
        raise ValueError(_name_the_flag(str(exc))) from exc
    if args.main_kv_events and len(args.main_kv_events) != len(args.main):
        raise ValueError(
            f"--main-kv-events must be given once per --main ({len(args.main)}) or "
            f"not at all, got {len(args.main_kv_events)}"
        )
    events = args.main_kv_events or [None] * len(args.main)
    return RouterConfig(
        prefill=tuple(args.prefill),
        relay=tuple(args.relay),
        main=tuple(
            MainEndpoint(u, c, e)
            for u, c, e in zip(args.main, args.main_control, events, strict=True)
        ),
        host=args.host,
        port=args.port,
        pipeline=pipeline,
        handoff=handoff,
        wan_bandwidth_mbps=args.wan_bandwidth_mbps,
        wan_rtt_ms=args.wan_rtt_ms,
        tokenizer_path=args.tokenizer_path,
        upstream_keepalive_s=args.upstream_keepalive_s,
        upstream_connect_timeout_s=args.upstream_connect_timeout_s,
        upstream_idle_timeout_s=args.upstream_idle_timeout_s,
        handoff_retry_s=args.handoff_retry_s,
        handoff_gap_prior_s=args.handoff_gap_prior_s,
        tail_on_relay=args.tail_on_relay,
        max_n=args.max_n,
        max_batch_size=args.max_batch_size,
        max_body_mb=args.max_body_mb,
        migration_limit=args.migration_limit,
        control_timeout_s=args.control_timeout_s,
        control_curve_secret=args.control_curve_secret,
        instance_check_interval_s=args.instance_check_interval_s,
        control_curve_server=args.control_curve_server,
        api_key=args.api_key,
        instance_api_key=args.instance_api_key,
        main_transfer_start=args.main_transfer_start,
        incremental_streaming_output=args.incremental_streaming_output,
        seeded_sampling=args.seeded_sampling,
    )


def main(argv: list[str]) -> int:
    """Entry point of ``sglang-pdd router``."""
    from aiohttp import web

    from sglang_pdd.router.app import build_app
    from sglang_pdd.router.state import RouterState

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="[%(asctime)s] %(message)s")
    # handler_cancellation: a client that leaves a non-streamed request cancels its handler,
    # whose clean-up then aborts the request on every instance (as a closed stream does).
    log = logging.getLogger("sglang_pdd.router")
    web.run_app(
        build_app(RouterState(config)),
        host=config.host,
        port=config.port,
        handler_cancellation=True,
        print=lambda *_: log.info("sglang-pdd router on http://%s:%d", config.host, config.port),
    )
    return 0
