"""Apply SGLang's penalizers in one fixed order in every process."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.sampling.penaltylib.orchestrator.BatchedPenalizerOrchestrator.__init__",
    hook_type="after",
    why=(
        "The orchestrator keeps its penalizers in a dict built from a set of classes, so the "
        "order it applies them in (subtracting frequency/presence penalties, scaling by the "
        "repetition penalty) follows the classes' hashes and differs from process to process. "
        "With more than one penalty a request's greedy output then depends on which server "
        "decodes it: SGLang's own PD decode diverged from a co-located server, and Main-Decode "
        "from Relay-Decode."
    ),
    how=(
        "After the orchestrator is built, reorder its penalizers by class name (frequency, "
        "min-new-tokens, presence, repetition: the additive ones before the scaling one, the "
        "order SGLang's speculative path uses)."
    ),
    remove_when="SGLang applies penalizers in a fixed order.",
)


def applies() -> bool:
    return True


def hook(result, self, *args, **kwargs):
    """Sort the penalizers by class name."""
    self.penalizers = dict(sorted(self.penalizers.items(), key=lambda kv: kv[0].__name__))
    return result
