"""The served-field sets in ``request_fields`` are what the request structs declare, each field
once (with its part in the merge as field metadata), and match the sets the router served before
they were derived."""

from __future__ import annotations

from sglang_pdd.router.pipeline.request_fields import (
    GENERATE_FIELDS,
    LOGPROB_FIELDS,
    OPENAI_FIELDS,
    OPENAI_TO_SAMPLING,
    SAMPLING_FIELDS,
    TOOL_FIELDS,
)
from sglang_pdd.router.pipeline.request_structs import (
    GenerateRequest,
    OpenAIRequest,
    SamplingParams,
    field_meta,
)


def test_each_set_is_what_its_struct_declares():
    assert GENERATE_FIELDS == frozenset(GenerateRequest.__struct_fields__)
    assert OPENAI_FIELDS == frozenset(OpenAIRequest.__struct_fields__)
    assert SAMPLING_FIELDS == frozenset(SamplingParams.__struct_fields__) - {"n"}
    assert LOGPROB_FIELDS == ("return_logprob", "top_logprobs_num", "return_text_in_logprobs")
    assert TOOL_FIELDS == ("tools", "tool_choice", "parallel_tool_calls")
    assert set(OPENAI_TO_SAMPLING) <= OPENAI_FIELDS
    # every OpenAI sampling field lands on a sampling parameter the router checks and carries
    assert set(OPENAI_TO_SAMPLING.values()) <= SAMPLING_FIELDS


def test_the_derived_sets_are_the_ones_the_router_served():
    assert GENERATE_FIELDS == {
        "text", "input_ids", "sampling_params", "stream", "rid",
        "return_logprob", "top_logprobs_num", "return_text_in_logprobs",
    }  # fmt: skip
    assert OPENAI_FIELDS == {
        "model", "prompt", "messages", "stream", "stream_options", "user", "max_tokens",
        "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "stop",
        "stop_token_ids", "seed", "ignore_eos", "skip_special_tokens", "no_stop_trim",
        "frequency_penalty", "presence_penalty", "repetition_penalty", "min_tokens",
        "logit_bias", "logprobs", "top_logprobs", "n", "response_format",
        "tools", "tool_choice", "parallel_tool_calls",
    }  # fmt: skip
    assert SAMPLING_FIELDS == {
        "max_new_tokens", "stop", "stop_token_ids", "temperature", "top_p", "top_k", "min_p",
        "ignore_eos", "skip_special_tokens", "no_stop_trim", "stream_interval",
        "sampling_seed", "spaces_between_special_tokens", "frequency_penalty",
        "presence_penalty", "repetition_penalty", "min_new_tokens", "logit_bias",
        "json_schema", "regex", "ebnf", "structural_tag",
    }  # fmt: skip
    renamed = {
        "seed": "sampling_seed", "max_tokens": "max_new_tokens",
        "max_completion_tokens": "max_new_tokens", "min_tokens": "min_new_tokens",
    }  # fmt: skip
    same = {
        "temperature", "top_p", "stop", "frequency_penalty", "presence_penalty", "top_k",
        "min_p", "repetition_penalty", "ignore_eos", "stop_token_ids", "skip_special_tokens",
        "no_stop_trim", "logit_bias",
    }  # fmt: skip
    assert OPENAI_TO_SAMPLING == {**renamed, **{k: k for k in same}}


def test_field_meta_reads_the_extras_on_each_field_in_order():
    meta = field_meta(OpenAIRequest)
    assert list(meta) == list(OpenAIRequest.__struct_fields__)
    assert meta["max_tokens"] == {"sampling": "max_new_tokens"}
    assert meta["temperature"] == {"sampling": None}
    assert meta["model"] == {}
    assert field_meta(SamplingParams)["n"] == {"carried": False}
