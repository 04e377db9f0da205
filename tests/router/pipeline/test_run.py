"""``out_of_vocab``: input ids a scheduler would die on are named before any instance sees them."""

from __future__ import annotations

from sglang_pdd.router.pipeline.run import out_of_vocab


def test_input_ids_outside_the_vocabulary_are_named():
    assert out_of_vocab([0, 5, 99], 100) is None
    assert out_of_vocab([1, 100], 100) == (
        "input_ids[1] = 100 is outside the model's vocabulary [0, 100)"
    )
    assert "input_ids[0] = -1" in out_of_vocab([-1], 100)
    assert "input_ids[2] = 'x'" in out_of_vocab([1, 2, "x"], 100)
    assert "True" in out_of_vocab([True], 100)
    assert out_of_vocab([10**9], 0) is None  # unknown vocabulary: nothing to check


def test_an_empty_prompt_is_refused_before_any_instance_sees_it():
    """A text that tokenizes to nothing: SGLang's own 400, not a stream that breaks on the
    instances (SGLang 0.5.23's abort task then fails on the unnormalized request)."""
    from types import SimpleNamespace

    import pytest

    from sglang_pdd.router.pipeline.run import ClientRun
    from sglang_pdd.router.upstream.calls import UpstreamError

    state = SimpleNamespace(live={}, vocab_size=100)
    with pytest.raises(UpstreamError) as refused:
        ClientRun(state, [], {"max_new_tokens": 4}, {})
    assert refused.value.status == 400
    assert "input_ids cannot be empty" in refused.value.body["error"]["message"]
    assert state.live == {}


def test_a_prompt_at_the_prefill_bound_is_refused_before_any_instance_sees_it():
    from types import SimpleNamespace

    import pytest

    from sglang_pdd.router.pipeline.run import ClientRun
    from sglang_pdd.router.upstream.calls import UpstreamError

    state = SimpleNamespace(live={}, vocab_size=100, max_prompt_tokens=8)
    with pytest.raises(UpstreamError) as refused:
        ClientRun(state, [1] * 8, {"max_new_tokens": 4}, {})
    message = refused.value.body["error"]["message"]
    assert refused.value.status == 400 and "(8 tokens)" in message and "fewer than 8" in message
    assert "--max-prompt-tokens" in message and state.live == {}
