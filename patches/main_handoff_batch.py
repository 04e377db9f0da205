"""Main-Decode's handoff runs as a batch SGLang's decode scheduler schedules."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler.get_next_disagg_decode_batch_to_run",
    hook_type="around",
    why=(
        "A decode server only ever runs decode batches (and 'prebuilt' ones for requests whose "
        "KV arrived); Main-Decode must run one extend over the handed-off token ids of parked "
        "requests, and that extend must go through the scheduler's own run and result path "
        "(sampling, penalizers, logprobs, streaming, the overlap scheduler's deferred results) "
        "and memory accounting, not a forward called from inside a queue hook."
    ),
    how=(
        "On a --pdd-role main scheduler: first merge last iteration's handoff batch into the "
        "running batch (what SGLang's prefill scheduler does with a finished extend in "
        "get_next_batch_to_run; Catch-Up chunks stay parked) and report each handoff on the "
        "control socket; then, if handoffs are waiting and the KV pool holds their ids, return "
        "an extend batch built by ScheduleBatch.prepare_for_extend as this iteration's batch "
        "(sglang_pdd.main_decode.extend), else defer to SGLang."
    ),
    remove_when="SGLang's decode scheduler supports held requests resumed by an extend.",
)


def applies() -> bool:
    return True


def hook(original, self, running_batch, *args, **kwargs):
    """Merge the previous handoff batch; run a new one when handoffs wait and memory allows."""
    state = self._pdd.main
    if state is None:
        return original(self, running_batch, *args, **kwargs)
    from sglang.srt.managers.schedule_batch import NextBatchPlan

    from sglang_pdd.main_decode.extend import merge_handoff_batch, next_handoff_batch

    running_batch = merge_handoff_batch(self, state, running_batch)
    batch = next_handoff_batch(self, state, running_batch)
    if batch is None:
        return original(self, running_batch, *args, **kwargs)
    return NextBatchPlan(batch_to_run=batch, running_batch=running_batch)
