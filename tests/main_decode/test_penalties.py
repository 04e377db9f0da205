"""Bulk-counted handed-off ids leave SGLang's penalizers as its own per-step path would."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sglang_pdd.main_decode.penalties import UnknownPenalizerError, count_handed_off_ids

VOCAB = 50


class _Batch:
    """What ``BatchedPenalizerOrchestrator`` reads from a ScheduleBatch (and can weak-ref)."""

    def __init__(self, reqs):
        self.reqs, self.device = reqs, "cpu"


def _req(**params):
    sampling = {
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "repetition_penalty": 1.0,
        "min_new_tokens": 0,
        "stop_token_ids": {7},
        **params,
    }
    tokenizer = SimpleNamespace(additional_stop_token_ids=None, eos_token_id=3)
    return SimpleNamespace(
        sampling_params=SimpleNamespace(**sampling), eos_token_ids={3}, tokenizer=tokenizer
    )


def _orchestrator(reqs):
    from sglang.srt.sampling import penaltylib

    penalizers = {
        penaltylib.BatchedFrequencyPenalizer,
        penaltylib.BatchedMinNewTokensPenalizer,
        penaltylib.BatchedPresencePenalizer,
        penaltylib.BatchedRepetitionPenalizer,
    }
    return penaltylib.BatchedPenalizerOrchestrator(
        vocab_size=VOCAB, batch=_Batch(reqs), penalizers=penalizers
    )


def _penalized(orchestrator, logits):
    out = logits.clone()
    orchestrator.apply(out)
    return out


ROWS = [
    (_req(frequency_penalty=0.5, presence_penalty=0.25), [5, 9, 5, 5, 11]),
    (_req(repetition_penalty=1.3), [2, 2, 40]),
    (_req(min_new_tokens=6), [1, 4, 8]),
    (_req(), []),
    (_req(frequency_penalty=-0.2, min_new_tokens=2, repetition_penalty=0.9), [6, 6, 7, 30]),
]


def test_bulk_count_equals_sglang_one_token_at_a_time():
    reqs = [req for req, _ in ROWS]
    bulk = _orchestrator(reqs)
    assert bulk.is_required
    count_handed_off_ids(bulk, [ids for _, ids in ROWS])
    logits = torch.randn(len(ROWS), VOCAB, generator=torch.Generator().manual_seed(0))
    got = _penalized(bulk, logits)
    for row, (req, ids) in enumerate(ROWS):
        # SGLang's own path: one row, each id fed the way prepare_for_decode feeds it.
        stepwise = _orchestrator([req])
        for token in ids:
            stepwise.cumulate_output_tokens(torch.tensor([token]))
        expected = _penalized(stepwise, logits[row : row + 1])[0]
        assert torch.equal(got[row], expected), row
    # The checks bite: the stop id 7 is masked only while fewer than min_new_tokens were counted.
    assert got[2, 3] == float("-inf") and got[4, 7] != float("-inf")


def test_an_unknown_active_penalizer_refuses_before_changing_anything():
    orchestrator = _orchestrator([ROWS[0][0]])
    known = orchestrator.penalizers
    novelty = type("BatchedNoveltyPenalizer", (), {"_is_prepared": True})
    orchestrator.penalizers = {**known, novelty: novelty()}
    with pytest.raises(UnknownPenalizerError, match="BatchedNoveltyPenalizer"):
        count_handed_off_ids(orchestrator, [[5]])
    orchestrator.penalizers = known
    logits = torch.zeros(1, VOCAB)
    assert torch.equal(_penalized(orchestrator, logits), logits)  # nothing was counted


def test_penalizers_apply_in_one_order_in_every_process():
    from sglang_pdd.patches import penalizer_order

    orchestrator = _orchestrator([ROWS[0][0]])
    orchestrator.penalizers = dict(reversed(list(orchestrator.penalizers.items())))
    penalizer_order.hook(None, orchestrator)
    names = [cls.__name__ for cls in orchestrator.penalizers]
    assert names == sorted(names) and names[-1] == "BatchedRepetitionPenalizer"
