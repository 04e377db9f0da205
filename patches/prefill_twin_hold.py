"""Prefill: hold a room-2 request until its room-1 twin is prefilled (one prefill, two sends)."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill",
    hook_type="around",
    why=(
        "PDD posts a prompt to P twice at once (room 1 for Relay-Decode, room 2 for "
        "Main-Decode) so that MD's KV leaves the moment the prefill ends. Scheduled together, "
        "the two would both be prefilled in full; SGLang has no notion of twin requests."
    ),
    how=(
        "On a --pdd-role prefill scheduler, take room-2 requests (rid suffix .p2) whose .p1 "
        "twin is still in the bootstrap queue, the waiting queue, the chunked request or a batch "
        "not yet processed out of the waiting queue while SGLang picks the next prefill batch, "
        "then put them back at its head. Once the twin's KV is in the radix cache, room 2 is a "
        "prefix hit and only its last token is computed."
    ),
    remove_when="SGLang's prefill sender can serve several decode receivers from one prefill.",
)


def applies() -> bool:
    return True


def _pending_rids(scheduler) -> set[str]:
    """Rids on this prefill server whose prefill has not been processed yet."""
    rids = {req.rid for req in scheduler.waiting_queue}
    bootstrap = scheduler.disagg_prefill_bootstrap_queue  # None outside prefill mode
    if bootstrap is not None:
        rids.update(req.rid for req in bootstrap.queue)
    chunked = scheduler.chunked_req
    if chunked is not None:
        rids.add(chunked.rid)
    # Overlap scheduling: batches launched but not processed yet (their KV is not cached).
    for batch, *_ in scheduler.result_queue:
        rids.update(req.rid for req in batch.reqs)
    return rids


def hook(original, self, *args, **kwargs):
    """Schedule without held room-2 requests, then put them back first in line."""
    from sglang_pdd import config as pdd_config
    from sglang_pdd.prefill import split_held

    if pdd_config.current().role != "prefill" or not self.waiting_queue:
        return original(self, *args, **kwargs)
    ready, held = split_held(self.waiting_queue, _pending_rids(self))
    if not held:
        return original(self, *args, **kwargs)
    self.waiting_queue = ready
    try:
        return original(self, *args, **kwargs)
    finally:
        self.waiting_queue = held + self.waiting_queue
