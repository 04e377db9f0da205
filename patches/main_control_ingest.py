"""Main-Decode's control messages enter the scheduler as requests do, on every TP rank."""

from __future__ import annotations

import logging

from sglang_pdd.patches import PatchRecord

logger = logging.getLogger("sglang_pdd")

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler._poll_timeout_aborts",
    hook_type="around",
    why=(
        "Handoffs and releases change which requests run, so every TP rank of Main-Decode must "
        "apply them in the same iteration; only the rank that receives requests binds the "
        "control socket."
    ),
    how=(
        "SGLang calls _poll_timeout_aborts on the receiving rank each iteration and broadcasts "
        "what it returns with the requests it pulled (ingest_requests: 'local_reqs ride the "
        "same broadcast'). On a Main-Decode that rank appends one ControlMessages (what it read "
        "from the control socket); every rank's scheduler dispatches it to "
        "MainDecodeState.apply_control, registered on its _request_dispatcher at start "
        "(scheduler_init)."
    ),
    remove_when="SGLang offers a plugin input source on its request broadcast.",
)


def applies() -> bool:
    return True


def hook(original, self, *args, **kwargs):
    """SGLang's timeout aborts, plus this iteration's control messages (rank 0 of MD)."""
    local_reqs = original(self, *args, **kwargs)
    state = self._pdd.main
    if state is None:
        return local_reqs
    try:
        batch = state.read_control()
    except Exception:  # SGLang's scheduler exits on an exception: the control plane must not
        logger.exception("sglang-pdd: reading Main-Decode's control socket failed")
        return local_reqs
    return local_reqs if batch is None else [*local_reqs, batch]
