"""The transfer claims of one ``PddRequestRun``: how its KV to Main-Decode gets on the link.

Before a request sends its prompt's KV to MD it registers the transfer on MD's link
(``router.instances.transfers``), unless a transfer already on the link carries part of its
prompt: it then waits for that one (MD then asks P only for what it still lacks). With several
routers, the claim is also made on the ledger they share (``MainSite.claim_shared``).
Each function takes the request's ``pdd_request.PddRequestRun`` as ``run`` (its methods of
the same names call them; this module does not import it, which imports this one).
"""

from __future__ import annotations

import asyncio
import logging

from sglang_pdd.cache.prefix_blocks import block_hashes
from sglang_pdd.router.instances.transfers import DEFERRED, MainTransfer

logger = logging.getLogger("sglang_pdd.router")
# How long a request waits for a transfer of its prefix already on MD's link before sending
# its own (a transfer that never lands must not hold every later request of its prefix).
DEPENDENCY_TIMEOUT_S = 60


def try_claim(run, main_rid: str, *, learn: bool):
    """Register this request's transfer to MD unless a transfer carrying part of its prompt
    is on the link: ``(transfer, None)`` or ``(None, what to wait for)``. Synchronous, so
    no other request can slip in between the check and the registration."""
    ids, hashes = run.body["input_ids"], _hashes(run)
    cached = run.site.cached_tokens(ids, hashes)
    _, dep, carries, _ = run.site.transfers.plan(hashes, cached, len(ids))  # as main_plan
    if dep is not None and carries and dep.state == DEFERRED:
        run.site.transfers.drop(dep)  # this request's KV carries the warm's prompt too
        run.record.reason += f"; carries the deferred warm of {dep.rid}"
        dep = None
    if dep is not None:
        return None, dep
    return _start_transfer(run, main_rid, warming=run.released, learn=learn), None


async def claim(run, main_rid: str, *, learn: bool):
    """Wait until no transfer on MD's link carries this prompt's prefix, then register this
    request's own (MD then asks P only for what it still lacks)."""
    started = None
    while True:
        transfer, dep = try_claim(run, main_rid, learn=learn)
        waited = 0.0 if started is None else run.since() - started
        holder = None if transfer is None else await claim_shared(run, transfer, waited)
        if transfer is not None and holder is None:
            if started is not None:
                run.record.waited_s = round(run.since() - started, 4)
            return transfer
        if started is None:
            started = run.since()
            run.site.transfers.stats.waited += 1
        if holder is not None:  # another router's transfer carries part of this prompt
            await run.site.ledger.wait_ended(holder)
            continue
        run.site.transfers.promote(dep)  # a deferred warm we need goes now
        try:
            await asyncio.wait_for(dep.off_link.wait(), DEPENDENCY_TIMEOUT_S)
        except TimeoutError:
            # MD never reported that KV: stop waiting and send this prompt's own.
            logger.warning(
                "sglang-pdd router: %s: transfer %s did not land in %ds; "
                "sending this request's KV anyway",
                run.rid,
                dep.rid,
                DEPENDENCY_TIMEOUT_S,
            )
            run.site.transfers.drop(dep)


async def claim_shared(run, transfer: MainTransfer, waited_s: float = 0.0) -> str | None:
    """Claim ``transfer`` on the ledger shared with other routers: None, or the rid of
    another router's transfer to wait for (``transfer`` is then dropped)."""
    holder = await run.site.claim_shared(transfer, waited_s)
    if holder is not None:
        run._transfer = None
    return holder


def _hashes(run) -> list[int]:
    if run.main_plan is not None:
        return run.main_plan.hashes
    return block_hashes(run.body["input_ids"], run.router.config.cache_block_tokens)


def _start_transfer(
    run, main_rid: str, *, warming: bool = False, learn: bool = True
) -> MainTransfer:
    """Register the KV this request is about to send to MD (what MD's cache lacks now)."""
    ids = run.body["input_ids"]
    hashes = _hashes(run)
    cached = run.site.cached_tokens(ids, hashes)
    nbytes = (len(ids) - cached) * run.router.kv_bytes_per_token
    run._transfer = run.site.transfers.start(
        main_rid,
        hashes,
        cached // run.router.config.cache_block_tokens,
        nbytes,
        warming=warming,
        learn=learn,
        prompt_tokens=len(ids),
        token_bytes=run.router.kv_bytes_per_token,
    )
    return run._transfer
