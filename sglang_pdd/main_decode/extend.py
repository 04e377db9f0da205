"""The handoff: one extend forward over the handed-off token ids, through SGLang's extend path."""

from __future__ import annotations

import logging

from sglang_pdd.main_decode.state import set_handoff_tokens

logger = logging.getLogger("sglang_pdd")


def run_handoff_extend(scheduler, items) -> None:
    """Extend every ``(req, token_ids)`` on top of its received prompt KV, in one batch.

    The batch is built with SGLang's own ``ScheduleBatch.prepare_for_extend`` (the request keeps
    its row, so the prompt KV is the prefix and only the handed-off ids are computed), run with
    ``run_batch`` and finished with ``process_batch_result``, which samples and streams the next
    token from this same forward. The requests then join the running decode batch, exactly as a
    colocated server merges a finished prefill batch.
    """
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    to_extend = []
    for req, token_ids in items:
        if not token_ids:
            # Nothing was generated elsewhere: continue as plain PD from P's first token.
            scheduler.waiting_queue.insert(0, req)
            continue
        if req.output_ids and req.output_ids[0] != token_ids[0]:
            logger.warning(
                "sglang-pdd: %s: handed-off first token %d differs from prefill's %d; "
                "continuing from the handed-off tokens (what the client saw)",
                req.rid, token_ids[0], req.output_ids[0],
            )  # fmt: skip
        set_handoff_tokens(req, token_ids)
        to_extend.append(req)
    if not to_extend:
        return
    batch = ScheduleBatch.init_new(
        to_extend,
        scheduler.req_to_token_pool,
        scheduler.token_to_kv_pool_allocator,
        scheduler.tree_cache,
        scheduler.model_config,
        scheduler.enable_overlap,
        scheduler.spec_algorithm,
    )
    batch.prepare_for_extend()
    result = scheduler.run_batch(batch)
    scheduler.process_batch_result(batch, result)
    batch.filter_batch()
    if batch.is_empty():
        return
    if scheduler.running_batch.is_empty():
        scheduler.running_batch = batch
    else:
        scheduler.running_batch.merge_batch(batch)
