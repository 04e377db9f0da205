"""Fields the router cannot carry are refused by name, unless they are switched off."""

from __future__ import annotations

from sglang_pdd.router.request_fields import (
    GENERATE_FIELDS,
    OPENAI_FIELDS,
    unsupported_fields,
    unsupported_message,
)


def test_generate_fields():
    body = {"text": "hi", "sampling_params": {}, "stream": True, "rid": "r",
            "return_logprob": True, "image_data": "x.png", "lora_path": None,
            "top_logprobs_num": 0}  # fmt: skip
    assert unsupported_fields(body, GENERATE_FIELDS) == ["image_data", "return_logprob"]
    assert unsupported_fields({"text": "hi", "return_logprob": False}, GENERATE_FIELDS) == []


def test_openai_fields():
    body = {"model": "m", "messages": [], "n": 2, "logprobs": True, "tools": [],
            "temperature": 0, "response_format": {"type": "json_object"}}  # fmt: skip
    assert unsupported_fields(body, OPENAI_FIELDS) == ["logprobs", "n", "response_format"]
    assert unsupported_fields({"prompt": "p", "n": 1, "echo": False}, OPENAI_FIELDS) == []


def test_message_names_the_fields():
    message = unsupported_message(["return_logprob", "n"])
    assert message == "not supported by the sglang-pdd router: return_logprob, n"


def test_bench_serving_default_body_is_accepted():
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 4}, "stream": True,
            "lora_path": None, "return_logprob": False, "return_routed_experts": False,
            "logprob_start_len": -1}  # fmt: skip
    assert unsupported_fields(body, GENERATE_FIELDS) == []
    assert unsupported_fields({**body, "logprob_start_len": 3}, GENERATE_FIELDS) == [
        "logprob_start_len"
    ]
