"""A relayed request that finished on Relay-Decode before Main-Decode took over: MD still
receives the prompt's KV, keeps it in its radix cache (aligned with P's) and ends the request.

``finish_on_relay`` lets what is under way for MD live on past the client's answer (cancelling
P's second send or MD's request would abort the transfer), or starts room 2 late, as cache
warming, when P's first send has not answered yet.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp

from sglang_pdd.router.instances.transfers import DROPPED
from sglang_pdd.router.pipeline.relayed_context import RelayedContext
from sglang_pdd.router.upstream.calls import UpstreamError, abort, post_json
from sglang_pdd.router.upstream.chunk_queue import PumpedStream
from sglang_pdd.wire.messages import Ready

logger = logging.getLogger("sglang_pdd.router")


def finish_on_relay(
    ctx: RelayedContext,
    main_q: PumpedStream | None,
    prefill1: asyncio.Task,
    gate: asyncio.Task | None,
    prefill2: asyncio.Task | None,
    main_rid: str,
    room2: int,
    events: asyncio.Queue,
) -> None:
    """The request finished on RLD before MD took over (see the module)."""
    router = ctx.router
    if main_q is None:
        # P's first send has not answered yet: room 2 still goes out once it has, so that
        # MD's cache holds this prompt too.
        ctx.detach(prefill1, gate)
        ctx.released = True
        router.run_in_background(_warm_main_after(ctx, gate, main_rid, room2, events))
        return
    # P's second send and MD's request must live on (cancelling either would abort the
    # transfer).
    ctx.site.transfers.mark_warming(main_rid)
    ctx.detach(prefill2, main_q.task)
    ctx.released = True
    router.run_in_background(_report_late_transfer(ctx, events, main_rid, main_q.task))
    router.run_in_background(_abort_prefill_if_main_failed(ctx, main_q))


def take_ready_event(events: asyncio.Queue) -> Ready | None:
    """Empty ``events``; return the first ``Ready`` among them, if any."""
    ready = None
    while not events.empty():
        event = events.get_nowait()
        if isinstance(event, Ready):
            ready = ready or event
    return ready


async def _report_late_transfer(ctx: RelayedContext, events: asyncio.Queue, main_rid: str, until):
    """After MD's released request ends (``until``), log the KV it received for it: the
    client's record was sent before that KV landed."""
    try:
        result = await until
    finally:
        ctx.router.control_for(ctx.main).forget(main_rid)
        ctx.drop_transfer()  # never landed (MD failed): free its waiters
    ready = take_ready_event(events)
    if ready is not None and ctx.record.main_ready_s is None:
        late = {"wan_bytes": ready.kv_bytes or 0, "main_cached_tokens": ready.cached_tokens}
        logger.info(
            "pdd-late-transfer rid=%s instance_rid=%s %s", ctx.rid, ctx.ids.rid, json.dumps(late)
        )
        ctx.router.metrics.wan_bytes.inc(late["wan_bytes"])
    if ready is not None:
        ctx.main_ended()
    return result


async def _warm_main_after(
    ctx: RelayedContext, gate: asyncio.Task, main_rid: str, room2: int, events: asyncio.Queue
) -> None:
    """Send room 2 (P's radix hit, over the WAN) to Main-Decode for a request that already
    finished on Relay-Decode, and release it there: MD caches the prompt's KV and ends it.

    This is cache warming, not serving: it waits while serving transfers use MD's link, and
    a later request that extends this prompt may carry it instead (the warm is dropped)."""
    router = ctx.router
    control = router.control_for(ctx.main)
    try:
        transfer = await asyncio.shield(gate)
    except (UpstreamError, aiohttp.ClientError, asyncio.CancelledError) as exc:
        logger.info(
            "sglang-pdd router: %s: prefill failed (%s); Main-Decode not warmed", ctx.rid, exc
        )
        await abort(router.session, ctx.main.url, main_rid)
        control.forget(main_rid)
        return
    ctx.site.transfers.mark_warming(main_rid)
    await transfer.dispatch.wait()
    if transfer.state != DROPPED:
        await ctx.claim_shared(transfer)  # dropped if another router's carries it
    if transfer.state == DROPPED:  # a later request of this prefix carried it, or the cap
        control.forget(main_rid)
        return
    logger.info(
        "sglang-pdd router: %s finished on Relay-Decode before its KV left; sending "
        "it to Main-Decode's cache now",
        ctx.rid,
    )
    if not control.release_nowait(main_rid):
        control.forget(main_rid)
        return
    results = await _report_late_transfer(
        ctx,
        events,
        main_rid,
        asyncio.gather(
            ctx.prefill(ctx.ids.prefill_for_main, room2),
            post_json(
                router.session,
                f"{ctx.main.url}/generate",
                ctx.sub_body(main_rid, room2),
                # A partitioned MD must not hold this warm (and its transfer) for good.
                timeout_s=router.config.upstream_idle_timeout_s,
            ),
            return_exceptions=True,
        ),
    )
    for result in results:
        if isinstance(result, BaseException):
            logger.warning("sglang-pdd router: %s: warming Main-Decode failed: %s", ctx.rid, result)


async def _abort_prefill_if_main_failed(ctx: RelayedContext, main_q: PumpedStream) -> None:
    """When MD's stream for this request failed (MD died), P's send to MD can never complete:
    abort it on P rather than leave it waiting for SGLang's transfer timeout."""
    await asyncio.shield(main_q.task)
    if main_q.error is not None:
        await abort(ctx.router.session, ctx.prefill_url, ctx.ids.prefill_for_main)
