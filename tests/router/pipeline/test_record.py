"""``PddRecord``: ``token_logprobs`` (the entries of the newest tokens, from an instance's
cumulative lists) and ``phases`` (a request's E2E split into phases that add up to it)."""

from __future__ import annotations

import pytest

from sglang_pdd.router.pipeline.record import PddRecord, token_logprobs
from sglang_pdd.router.upstream.chunks import ChunkMeta


def _meta(**entries) -> ChunkMeta:
    return ChunkMeta(id="r", finish_reason=None, **entries)


def test_the_tail_belongs_to_the_newest_tokens():
    # Main-Decode after a handoff of 3 ids: P's first entry, padding, then its own tokens.
    meta = _meta(
        output_token_logprobs=[
            [-1.0, 5, None],
            [None, 6, None],
            [None, 7, None],
            [-0.5, 8, None],
            [-0.25, 9, None],
        ],
        output_top_logprobs=[[], [], [], [[-0.5, 8, None]], [[-0.25, 9, None]]],
    )
    tokens, tops = token_logprobs(meta, 2)
    assert tokens == [[-0.5, 8, None], [-0.25, 9, None]]
    assert tops == [[[-0.5, 8, None]], [[-0.25, 9, None]]]


def test_missing_entries_are_padded_not_shifted():
    tokens, tops = token_logprobs(_meta(output_token_logprobs=[[-1.0, 5, None]]), 2)
    assert tokens == [None, [-1.0, 5, None]] and tops == [None, None]
    assert token_logprobs(_meta(), 0) == ([], [])


@pytest.mark.parametrize(
    ("fields", "phases"),
    [
        (  # handed off: first token, RLD, the gap, MD
            dict(first_token_s=0.3, relay_last_s=1.0, main_first_s=1.25, e2e_s=4.0),
            {"to_first_token": 0.3, "relay": 0.7, "handoff_gap": 0.25, "main": 2.75},
        ),
        (  # finished on RLD
            dict(first_token_s=0.3, relay_last_s=2.0, e2e_s=2.0),
            {"to_first_token": 0.3, "relay": 1.7},
        ),
        (  # P-MD
            dict(first_token_s=0.9, main_first_s=0.9, e2e_s=3.0),
            {"to_first_token": 0.9, "main": 2.1},
        ),
        (dict(first_token_s=0.9), {}),  # not finished: nothing to split
    ],
)
def test_phases_add_up_to_e2e(fields, phases):
    record = PddRecord(pipeline="P-RLD-MD", **fields)
    assert record.phases() == pytest.approx(phases)
    if phases:
        assert sum(record.phases().values()) == pytest.approx(record.e2e_s)
    assert record.as_dict()["phases"] == pytest.approx(phases, abs=1e-4)


def test_as_dict_is_the_deep_copy_rounded():
    """``as_dict`` runs for every streamed chunk and copies by hand: it must equal the plain
    ``dataclasses.asdict`` with floats rounded, key for key and in order, for a record of every
    field set (a field added with a nested value would need a deep copy again)."""
    from dataclasses import asdict, fields

    record = PddRecord("P-RLD-MD")
    for i, f in enumerate(fields(PddRecord)):
        current = getattr(record, f.name)
        if isinstance(current, list):
            setattr(record, f.name, [0.123456 * (i + 1), 2.5] if "gaps" in f.name else ["a"])
        elif isinstance(current, str):
            setattr(record, f.name, f"v{i}")
        elif isinstance(current, int):
            setattr(record, f.name, i)
        else:
            setattr(record, f.name, 0.1234567 * (i + 1))
    deep = asdict(record)
    expected = {
        k: [round(x, 4) for x in v]
        if k == "handoff_gaps_s"
        else round(v, 4)
        if isinstance(v, float)
        else v
        for k, v in deep.items()
    }
    got = record.as_dict()
    phases = got.pop("phases")
    assert list(got) == list(expected) and got == expected
    assert phases == {k: round(v, 4) for k, v in record.phases().items()}
    assert got["migrations"] is not record.migrations  # a copy: later changes do not leak
