"""Fields the router cannot carry are refused by name, unless they are switched off."""

from __future__ import annotations

import pytest

from sglang_pdd.router.pipeline.request_fields import (
    _GREEDY_TEMPERATURE,
    GENERATE_FIELDS,
    OPENAI_FIELDS,
    deterministic,
    unsupported_fields,
    unsupported_message,
    unsupported_sampling,
)


def test_generate_fields():
    body = {
        "text": "hi",
        "sampling_params": {},
        "stream": True,
        "rid": "r",
        "return_logprob": True,
        "image_data": "x.png",
        "lora_path": None,
        "top_logprobs_num": 2,
        "token_ids_logprob": [5],
    }
    assert unsupported_fields(body, GENERATE_FIELDS) == ["image_data", "token_ids_logprob"]
    assert unsupported_fields({"text": "hi", "return_logprob": False}, GENERATE_FIELDS) == []


def test_openai_fields():
    body = {
        "model": "m",
        "messages": [],
        "n": 2,
        "logprobs": True,
        "tools": [],
        "temperature": 0,
        "response_format": {"type": "json_object"},
        "suffix": "x",
    }
    assert unsupported_fields(body, OPENAI_FIELDS) == ["suffix"]  # tools: [] is off
    assert unsupported_fields({"prompt": "p", "n": 1, "echo": False}, OPENAI_FIELDS) == []


def test_message_names_the_fields():
    message = unsupported_message(["return_logprob", "n"])
    assert message == "not supported by the sglang-pdd router: return_logprob, n"


def test_bench_serving_default_body_is_accepted():
    body = {
        "text": "hi",
        "sampling_params": {"max_new_tokens": 4},
        "stream": True,
        "lora_path": None,
        "return_logprob": False,
        "return_routed_experts": False,
        "logprob_start_len": -1,
    }
    assert unsupported_fields(body, GENERATE_FIELDS) == []
    assert unsupported_fields({**body, "logprob_start_len": 3}, GENERATE_FIELDS) == [
        "logprob_start_len"
    ]


def test_sampling_params_that_the_handoff_would_break_are_refused():
    sampling = {
        "temperature": 0.0,
        "max_new_tokens": 8,
        "frequency_penalty": 0.5,
        "presence_penalty": 0.0,
        "repetition_penalty": 1.0,
        "min_new_tokens": 4,
        "json_schema": "{}",
        "regex": None,
        "logit_bias": {"5": 1.0},
        "stop_regex": "x",
        "custom_params": {},
    }
    assert unsupported_sampling(sampling) == ["sampling_params.stop_regex"]
    carried = {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.0,
        "stop": ["a"],
        "stop_token_ids": [2],
        "ignore_eos": True,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "n": 1,
        "stream_interval": 2,
        "frequency_penalty": 0.5,
        "presence_penalty": 0.3,
        "repetition_penalty": 1.2,
        "min_new_tokens": 4,
        "logit_bias": {"5": 1.0},
    }
    assert unsupported_sampling(carried) == []


def test_seeds_are_refused_where_they_would_be_broken():
    assert unsupported_sampling({"temperature": 0.0, "sampling_seed": 3}) == []
    # Every instance runs --pdd-seeded-sampling: the seed holds across them.
    assert unsupported_sampling({"temperature": 0.8, "sampling_seed": 3}, seeded=True) == []
    assert unsupported_sampling({"sampling_seed": 3}) == ["sampling_params.sampling_seed"]
    assert unsupported_sampling({"temperature": 0.8, "sampling_seed": 3}, prefix="") == [
        "sampling_seed"
    ]
    assert unsupported_sampling({"n": 2, "spaces_between_special_tokens": False}) == [
        "sampling_params.n",
        "sampling_params.spaces_between_special_tokens",
    ]


def test_openai_penalties_and_logit_bias_are_served():
    body = {
        "model": "m",
        "prompt": "p",
        "frequency_penalty": 0.3,
        "presence_penalty": 0.1,
        "repetition_penalty": 1.1,
        "min_tokens": 2,
        "logit_bias": {"7": -5},
    }
    assert unsupported_fields(body, OPENAI_FIELDS) == []
    assert unsupported_fields({**body, "logprobs": True, "n": 2, "echo": True}, OPENAI_FIELDS) == [
        "echo"
    ]


@pytest.mark.parametrize(
    ("sampling", "seeded", "expected"),
    [
        ({"temperature": 0}, False, True),
        ({"temperature": 0.0, "sampling_seed": 3}, False, True),
        ({"temperature": 1e-7}, False, True),  # below SGLang's epsilon: greedy
        ({}, False, False),  # SGLang's default temperature is 1.0
        ({"temperature": 0.7, "top_k": 1}, False, True),
        ({"temperature": 0.7, "sampling_seed": 3}, False, False),  # no seeded sampler
        ({"temperature": 0.7, "sampling_seed": 3}, True, True),
        ({"temperature": 0.7}, True, False),
    ],
)
def test_deterministic_requests_are_greedy_or_seeded(sampling, seeded, expected):
    assert deterministic(sampling, seeded) is expected


def test_greedy_means_what_sglangs_sampler_means():
    from sglang.srt.sampling import sampling_params

    assert _GREEDY_TEMPERATURE == sampling_params._SAMPLING_EPS
