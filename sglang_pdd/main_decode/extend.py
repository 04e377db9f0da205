"""The handoff: one extend forward over the handed-off token ids, through SGLang's extend path."""

from __future__ import annotations

import logging

from sglang_pdd.main_decode.state import set_handoff_tokens

logger = logging.getLogger("sglang_pdd")


def run_handoff_extend(scheduler, items) -> list[tuple[object, str]]:
    """Extend every ``(req, token_ids, final)`` on top of its KV, in one batch.

    The batch is built with SGLang's own ``ScheduleBatch.prepare_for_extend`` (each request keeps
    its row, so its received prompt KV is the prefix and only the handed-off ids are computed)
    and run with ``run_batch``. For final handoffs ``process_batch_result`` then samples and
    streams the next token from this same forward and the requests join the running decode
    batch, exactly as a colocated server merges a finished prefill batch. A Catch-Up chunk
    (not final) only builds KV: its sampled token is dropped (Relay-Decode already produced that
    position) and the request stays parked.

    Returns the requests refused (with the reason); they are left untouched for the caller.
    """
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    finals, chunks, refused = [], [], []
    for req, token_ids, final in items:
        if not token_ids:
            if final:  # nothing was generated elsewhere: continue as plain PD from P's token
                scheduler.waiting_queue.insert(0, req)
            continue
        if req.output_ids and req.output_ids[0] != token_ids[0]:
            logger.warning(
                "sglang-pdd: %s: handed-off first token %d differs from prefill's %d; "
                "continuing from the handed-off tokens (what the client saw)",
                req.rid, token_ids[0], req.output_ids[0],
            )  # fmt: skip
        # A handoff must bring at least one id without KV: the last handed-off token's KV is
        # what the extend computes before sampling the next token.
        already = getattr(req, "_pdd_extended", 0)
        if len(token_ids) <= already or list(req.output_ids[1:already]) != token_ids[1:already]:
            refused.append((req, f"handoff of {len(token_ids)} ids after {already} extended"))
            continue
        set_handoff_tokens(req, token_ids)
        (finals if final else chunks).append(req)
        req._pdd_extended = len(token_ids)
    for reqs, final in ((chunks, False), (finals, True)):
        if not reqs:
            continue
        batch = ScheduleBatch.init_new(
            reqs,
            scheduler.req_to_token_pool,
            scheduler.token_to_kv_pool_allocator,
            scheduler.tree_cache,
            scheduler.model_config,
            scheduler.enable_overlap,
            scheduler.spec_algorithm,
        )
        batch.prepare_for_extend()
        result = scheduler.run_batch(batch)
        if not final:
            continue
        scheduler.process_batch_result(batch, result)
        batch.filter_batch()
        if batch.is_empty():
            continue
        if scheduler.running_batch.is_empty():
            scheduler.running_batch = batch
        else:
            scheduler.running_batch.merge_batch(batch)
    return refused
