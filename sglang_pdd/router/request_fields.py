"""Which request fields the router serves, so that none is silently dropped.

The router rebuilds each request for three servers and merges their outputs; a field it does
not carry through that merge (logprobs, several choices, multimodal data, ...) would be
ignored without a word. Such fields are refused with a 400 naming them, unless the client sent
the value that means "off" (``false``, ``null``, ``n: 1``, an empty list).
"""

from __future__ import annotations

# /generate: fields the router serves.
GENERATE_FIELDS = frozenset({"text", "input_ids", "sampling_params", "stream", "rid"})

# OpenAI completions / chat: fields the router serves (sampling ones map onto SGLang's).
OPENAI_FIELDS = frozenset({
    "model", "prompt", "messages", "stream", "stream_options", "user", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
    "seed", "frequency_penalty", "presence_penalty", "repetition_penalty", "ignore_eos",
    "min_tokens", "skip_special_tokens", "no_stop_trim",
})  # fmt: skip

# Values that mean the feature is off, per field (besides None / False / empty).
_OFF_VALUES = {"n": (1,), "best_of": (1,), "top_logprobs_num": (0,), "logprobs": (0,),
               # SGLang's default, which python -m sglang.bench_serving sends with every request
               "logprob_start_len": (-1,)}  # fmt: skip


def _is_off(name: str, value) -> bool:
    if value is None or value is False or value in ({}, [], ""):
        return True
    return value in _OFF_VALUES.get(name, ())


def unsupported_fields(body: dict, served: frozenset[str]) -> list[str]:
    """Names of fields in ``body`` the router would have to drop, sorted."""
    return sorted(k for k, v in body.items() if k not in served and not _is_off(k, v))


def unsupported_message(fields: list[str]) -> str:
    return f"not supported by the sglang-pdd router: {', '.join(fields)}"
