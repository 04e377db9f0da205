"""Tell SGLang that a Main-Decode scheduler with parked requests is not idle."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler.is_fully_idle",
    hook_type="around",
    why=(
        "Parked requests hold KV outside SGLang's queues; an 'idle' scheduler runs its KV leak "
        "check and would report their KV as leaked (and sleep up to 1 s on idle)."
    ),
    how="Return False while any request is parked; otherwise defer to SGLang.",
    remove_when="SGLang's decode scheduler supports held requests natively.",
)


def applies() -> bool:
    return True


def hook(original, self, *args, **kwargs):
    """Parked work counts as work."""
    state = self._pdd.main
    if state is not None and state.requests.parked:
        return False
    return original(self, *args, **kwargs)
