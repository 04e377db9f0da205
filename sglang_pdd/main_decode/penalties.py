"""Penalizer state after a handoff: what it would be had MD generated the handed-off ids itself.

SGLang counts a request's output into its penalizers one token per decode step
(``ScheduleBatch.prepare_for_decode`` feeds each row's newest token). A handed-off request reaches
MD with many output ids at once and its extend batch starts from fresh penalizer state, so
frequency, presence and repetition penalties and ``min_new_tokens`` would forget every id
Relay-Decode produced. ``count_handed_off_ids`` adds them in bulk, row by row.

SGLang's penalizer API takes exactly one token per row, so the bulk update writes each known
penalizer's state tensors directly. ``tests/main_decode/test_penalties.py`` checks the result
against SGLang's own one-token-at-a-time path on the installed version, and fails when those
internals change.
"""

from __future__ import annotations


class UnknownPenalizerError(RuntimeError):
    """A penalizer this module cannot bring up to date is active: the handoff must be refused."""


def count_handed_off_ids(orchestrator, ids_per_row: list[list[int]]) -> None:
    """Feed row ``r`` of ``orchestrator`` the ids ``ids_per_row[r]``, as if decoded one by one.

    Raises ``UnknownPenalizerError`` (before changing anything) when an active penalizer is not
    one of SGLang's four, whose state this function knows how to update.
    """
    import torch

    active = [p for p in orchestrator.penalizers.values() if p._is_prepared]
    unknown = [type(p).__name__ for p in active if type(p).__name__ not in _UPDATERS]
    if unknown:
        raise UnknownPenalizerError(f"penalizers {unknown} cannot count handed-off ids")
    for row, ids in enumerate(ids_per_row):
        if not ids:
            continue
        index = torch.tensor(ids, dtype=torch.int64, device=orchestrator.device)
        for penalizer in active:
            _UPDATERS[type(penalizer).__name__](penalizer, row, index)


def _frequency(p, row: int, index) -> None:
    # Each occurrence adds the request's frequency penalty once (scatter_add_ per step).
    p.cumulated_frequency_penalties[row].index_add_(
        0, index, p.frequency_penalties[row].expand(index.numel())
    )


def _presence(p, row: int, index) -> None:
    p.cumulated_presence_penalties[row, index] = p.presence_penalties[row]


def _repetition(p, row: int, index) -> None:
    p.cumulated_repetition_penalties[row, index] = p.repetition_penalties[row]


def _min_new_tokens(p, row: int, index) -> None:
    p.len_output_tokens[row] += index.numel()


_UPDATERS = {
    "BatchedFrequencyPenalizer": _frequency,
    "BatchedPresencePenalizer": _presence,
    "BatchedRepetitionPenalizer": _repetition,
    "BatchedMinNewTokensPenalizer": _min_new_tokens,
}
