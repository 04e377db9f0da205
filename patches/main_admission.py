"""Count parked requests in Main-Decode's admission of new transfers."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.disaggregation.decode.DecodePreallocQueue._active_req_count",
    hook_type="around",
    why=(
        "A decode server admits a new KV transfer only if the pool keeps "
        "num_reserved_decode_tokens free for every active request (running, transferring, "
        "waiting). Parked requests are in none of those queues, so without this hook MD would "
        "admit transfers into the room their handoff and decoding need."
    ),
    how=(
        "On a --pdd-role main scheduler, add the number of parked requests to SGLang's count "
        "of active requests."
    ),
    remove_when="SGLang's decode scheduler supports held requests natively.",
)


def applies() -> bool:
    return True


def hook(original, self, *args, **kwargs):
    """SGLang's count plus Main-Decode's parked requests."""
    count = original(self, *args, **kwargs)
    state = self.scheduler._pdd.main
    return count if state is None else count + len(state.requests.parked)
