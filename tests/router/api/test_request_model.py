"""Client input at the router's door: every bad field gets a 400 naming it (never a 500), and
no body, however generated (hypothesis), makes request handling raise anything else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.router.api.request_model import (
    InvalidRequest,
    RequestLimits,
    decode_body,
    validate_generate,
    validate_openai,
)
from sglang_pdd.router.pipeline.fanout import expand_generate
from sglang_pdd.router.pipeline.request_fields import (
    GENERATE_FIELDS,
    max_new_tokens,
    unsupported_fields,
    unsupported_sampling,
)
from sglang_pdd.router.upstream.calls import UpstreamError

LIMITS = RequestLimits(max_n=8, max_batch_size=32)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": "8"}}, "max_new_tokens"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": 1.5}}, "max_new_tokens"),
        ({"input_ids": 7}, "input_ids"),
        ({"input_ids": [[1, 2], 3]}, "input_ids[0]"),
        ({"input_ids": [1, -2]}, "input_ids[1]"),
        ({"input_ids": [1, True]}, "input_ids[1]"),
        ({"input_ids": [1], "rid": {"a": 1}}, "rid"),
        ({"text": 5}, "text"),
        ({"text": "x", "sampling_params": {"temperature": -0.5}}, "temperature"),
        ({"text": "x", "sampling_params": {"top_p": 0}}, "top_p"),
        ({"text": "x", "sampling_params": {"top_k": 0}}, "top_k"),
        ({"text": "x", "sampling_params": {"min_new_tokens": 9, "max_new_tokens": 4}}, "min_new"),
        ({"text": "x", "sampling_params": {"n": 9}}, "--max-n"),
        ({"text": ["x"] * 33}, "--max-batch-size"),
        ({"text": ["x"] * 5, "sampling_params": {"n": 7}}, "--max-batch-size"),
        ({"text": "x", "sampling_params": [{"stop": 3}]}, "sampling_params[0].stop"),
        ({"text": "x", "stream": "yes"}, "stream"),
    ],
)
def test_bad_generate_fields_are_refused_naming_the_field(body, named):
    with pytest.raises(InvalidRequest, match=named.replace("[", r"\[").replace("]", r"\]")):
        validate_generate(body, LIMITS)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"prompt": "x", "max_tokens": "9"}, "max_tokens"),
        ({"prompt": "x", "n": 100}, "--max-n"),
        ({"prompt": [1, "a"]}, "prompt"),
        ({"messages": "hi"}, "messages"),
        ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ],
)
def test_bad_openai_fields_are_refused_naming_the_field(body, named):
    with pytest.raises(InvalidRequest, match=named):
        validate_openai(body, LIMITS)


def test_good_bodies_pass_unchanged():
    body = {
        "input_ids": [[1, 2], [3]],
        "sampling_params": [{"max_new_tokens": 4, "temperature": 0}, {"n": 2, "top_k": -1}],
        "rid": ["a", "b"],
        "stream": True,
    }
    before = json.dumps(body)
    validate_generate(body, LIMITS)
    validate_openai({"prompt": [1, 2], "max_tokens": 3, "n": 2, "logprobs": 2}, LIMITS)
    assert json.dumps(body) == before


@pytest.mark.parametrize(
    "raw", [b"{oops", b"[1]", b'"x"', b"NaN", b"[" * 100_000 + b"]" * 100_000, b"\xff"]
)
def test_bodies_that_are_not_one_json_object_are_refused(raw):
    with pytest.raises(InvalidRequest):
        decode_body(raw)


class _Tokenizer:
    def encode(self, text: str) -> list[int]:
        return [ord(c) % 97 for c in text]


json_leaf = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6)
)
json_value = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=20,
)
sampling = st.fixed_dictionaries(
    {},
    optional={
        k: json_value | st.integers(-3, 40) | st.floats(-3, 3)
        for k in ("max_new_tokens", "min_new_tokens", "n", "temperature", "top_p", "top_k",
                  "stop", "stop_token_ids", "logit_bias", "frequency_penalty", "ignore_eos")
    },
)  # fmt: skip
bodies = st.fixed_dictionaries(
    {},
    optional={
        "text": json_value | st.text(max_size=8) | st.lists(st.text(max_size=4), max_size=4),
        "input_ids": json_value
        | st.lists(st.integers(-2, 300), max_size=6)
        | st.lists(st.lists(st.integers(0, 300), max_size=4), max_size=4),
        "sampling_params": json_value | sampling | st.lists(sampling, max_size=3),
        "rid": json_value | st.text(max_size=5) | st.lists(st.text(max_size=3), max_size=3),
        "stream": json_value,
        "return_logprob": json_value,
        "top_logprobs_num": json_value,
        "extra_field": json_value,
    },
)


@settings(max_examples=600, deadline=None)
@given(bodies)
def test_no_generate_body_makes_the_router_raise_anything_but_a_client_error(body):
    """What ``/generate`` does with a body before it reaches any instance: each step either
    accepts it or answers 400; no body raises anything else (which would be a 500)."""
    raw = json.dumps(body).encode()
    try:
        parsed = decode_body(raw)
        validate_generate(parsed, LIMITS)
    except InvalidRequest:
        return
    if parsed.get("text") is None and parsed.get("input_ids") is None:
        return  # answered 400 by the handler
    if unsupported_fields(parsed, GENERATE_FIELDS):
        return
    params = parsed.get("sampling_params") or {}
    for p in params if isinstance(params, list) else [params]:
        unsupported_sampling({k: v for k, v in p.items() if k != "n"})
    try:
        subs, _ = expand_generate(parsed, _Tokenizer(), {})
    except UpstreamError as exc:
        assert exc.status == 400
        return
    assert len(subs) <= LIMITS.max_batch_size
    for sub in subs:
        assert max_new_tokens(sub.sampling) >= 0
        assert all(isinstance(t, int) and t >= 0 for t in sub.input_ids)
