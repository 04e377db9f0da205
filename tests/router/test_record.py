"""``token_logprobs``: the entries of the newest tokens, from an instance's cumulative lists."""

from __future__ import annotations

from sglang_pdd.router.record import token_logprobs


def test_the_tail_belongs_to_the_newest_tokens():
    # Main-Decode after a handoff of 3 ids: P's first entry, padding, then its own tokens.
    meta = {"output_token_logprobs": [[-1.0, 5, None], [None, 6, None], [None, 7, None],
                                      [-0.5, 8, None], [-0.25, 9, None]],
            "output_top_logprobs": [[], [], [], [[-0.5, 8, None]], [[-0.25, 9, None]]]}  # fmt: skip
    tokens, tops = token_logprobs(meta, 2)
    assert tokens == [[-0.5, 8, None], [-0.25, 9, None]]
    assert tops == [[[-0.5, 8, None]], [[-0.25, 9, None]]]


def test_missing_entries_are_padded_not_shifted():
    tokens, tops = token_logprobs({"output_token_logprobs": [[-1.0, 5, None]]}, 2)
    assert tokens == [None, [-1.0, 5, None]] and tops == [None, None]
    assert token_logprobs({}, 0) == ([], [])
