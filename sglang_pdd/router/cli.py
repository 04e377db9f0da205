"""``sglang-pdd router``: parse flags into a ``RouterConfig`` and serve."""

from __future__ import annotations

import argparse
import logging

from sglang_pdd.options import add_options, flags, options_from_args
from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.router.config import MainEndpoint, RouterConfig
from sglang_pdd.router.instances.breaker import BreakerConfig


def build_parser() -> argparse.ArgumentParser:
    """The router's flags: one per ``RouterConfig`` and policy field declared with ``option``
    (its name, help and default are there), the Main-Decode endpoints and --log-level."""
    p = argparse.ArgumentParser(
        prog="sglang-pdd router",
        description="PDD router: one SGLang-compatible endpoint in front "
        "of Prefill, Relay-Decode and Main-Decode servers.",
    )
    # Three flags per Main-Decode, paired in order into RouterConfig.main's MainEndpoints.
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
    p.add_argument(
        "--topology",
        metavar="FILE",
        help="a topology file (docs/deploy.md): its instances, WAN and router options set the "
        "flags above (the flags after it on the command line win); --prefill, --relay and "
        "--main* then come from the file only",
    )
    add_options(p, RouterConfig)
    p.add_argument("--log-level", default="info", help="logging level (default: %(default)s)")
    add_options(p.add_argument_group("pipeline policy"), PipelinePolicyConfig, "pipeline.")
    add_options(p.add_argument_group("handoff policy"), HandoffPolicyConfig, "handoff.")
    add_options(p.add_argument_group("circuit breaker"), BreakerConfig, "breaker.")
    return p


# Policy config fields (shared with the simulator's YAML, whose errors name the field) -> the
# router flag that sets them.
_POLICY_FLAGS = {**flags(PipelinePolicyConfig), **flags(HandoffPolicyConfig)}


def _name_the_flag(message: str) -> str:
    field, space, rest = message.partition(" ")
    return _POLICY_FLAGS[field] + space + rest if field in _POLICY_FLAGS else message


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    if len(args.main_control) != len(args.main):
        raise ValueError(
            f"--main-control must be given once per --main ({len(args.main)}), "
            f"got {len(args.main_control)}"
        )
    try:
        pipeline = PipelinePolicyConfig(
            **options_from_args(PipelinePolicyConfig, args, "pipeline.")
        )
        handoff = HandoffPolicyConfig(**options_from_args(HandoffPolicyConfig, args, "handoff."))
        breaker = BreakerConfig(**options_from_args(BreakerConfig, args, "breaker."))
    except ValueError as exc:
        raise ValueError(_name_the_flag(str(exc))) from exc
    if args.main_kv_events and len(args.main_kv_events) != len(args.main):
        raise ValueError(
            f"--main-kv-events must be given once per --main ({len(args.main)}) or "
            f"not at all, got {len(args.main_kv_events)}"
        )
    events = args.main_kv_events or [None] * len(args.main)
    return RouterConfig(
        **options_from_args(RouterConfig, args),
        main=tuple(
            MainEndpoint(u, c, e)
            for u, c, e in zip(args.main, args.main_control, events, strict=True)
        ),
        pipeline=pipeline,
        handoff=handoff,
        breaker=breaker,
    )


def main(argv: list[str]) -> int:
    """Entry point of ``sglang-pdd router``."""
    from aiohttp import web

    from sglang_pdd.router.api.app import build_app
    from sglang_pdd.router.state import RouterState
    from sglang_pdd.topology.router_args import expand_topology

    parser = build_parser()
    try:
        argv = expand_topology(argv)
    except ValueError as exc:
        parser.error(str(exc))
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="[%(asctime)s] %(message)s")
    # handler_cancellation: a client that leaves a non-streamed request cancels its handler,
    # whose clean-up then aborts the request on every instance (as a closed stream does).
    log = logging.getLogger("sglang_pdd.router")
    # uvloop, as SGLang's own server: the router's per-chunk work is event-loop bound.
    import asyncio

    import uvloop

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    web.run_app(
        build_app(RouterState(config)),
        host=config.host,
        port=config.port,
        handler_cancellation=True,
        loop=loop,
        print=lambda *_: log.info("sglang-pdd router on http://%s:%d", config.host, config.port),
    )
    return 0
