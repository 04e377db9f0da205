"""Let SGLang's abort reach requests Main-Decode has parked."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler.abort_request",
    hook_type="before",
    why=(
        "Parked requests sit outside SGLang's queues, so /abort_request (used when Relay-Decode "
        "finished first, or the client disconnected) would not find them and their KV would "
        "leak."
    ),
    how=(
        "Before SGLang's abort runs, move parked requests whose rid matches back to the waiting "
        "queue; SGLang's own decode-mode abort then releases them (inserting their prompt KV "
        "into the radix cache) and ends their HTTP request."
    ),
    remove_when="SGLang's decode scheduler supports held requests natively.",
)


def applies() -> bool:
    return True


def hook(self, recv_req, *args, **kwargs):
    """Unpark what the abort names."""
    state = self._pdd.main
    if state is not None:
        state.unpark_for_abort(self, recv_req.rid or "", bool(recv_req.abort_all))
    return None
