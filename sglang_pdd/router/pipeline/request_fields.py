"""Which request fields the router serves, so that none is silently dropped.

The router rebuilds each request for three servers and merges their outputs; a field it does
not carry through that merge (logprobs, several choices, multimodal data, ...) would be
ignored without a word. Such fields are refused with a 400 naming them, unless the client sent
the value that means "off" (``false``, ``null``, ``n: 1``, an empty list).
"""

from __future__ import annotations

from sglang_pdd.router.pipeline.request_structs import (
    GenerateRequest,
    OpenAIRequest,
    SamplingParams,
    field_meta,
)

# SGLang's own default for sampling_params.max_new_tokens (SamplingParams; checked by
# tests/router/pipeline/test_request_fields.py against the installed SGLang).
DEFAULT_MAX_NEW_TOKENS = 128


def max_new_tokens(sampling: dict) -> int:
    """The request's output budget, as SGLang reads ``sampling_params``."""
    return int(sampling.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS) or DEFAULT_MAX_NEW_TOKENS)


# The sets below derive from the request structs (router.pipeline.request_structs), where each
# field is declared once, with its part in the merge as field metadata.
_GENERATE = field_meta(GenerateRequest)
_OPENAI = field_meta(OpenAIRequest)

# /generate: fields the router serves.
GENERATE_FIELDS = frozenset(_GENERATE)

# /generate fields sent on to every instance (``EVERY_INSTANCE``): each token's logprobs come
# from the instance that produced it (only output logprobs: logprob_start_len other than -1 is
# refused).
LOGPROB_FIELDS = tuple(k for k, meta in _GENERATE.items() if meta.get("every_instance"))

# OpenAI completions / chat: fields the router serves (sampling ones map onto SGLang's).
OPENAI_FIELDS = frozenset(_OPENAI)

# Fields of a chat request that are about tools (``TOOLS``; refused on /v1/completions).
TOOL_FIELDS = tuple(k for k, meta in _OPENAI.items() if meta.get("tools"))

# OpenAI fields SGLang reads as sampling parameters (``to_sampling``), by SGLang's name.
OPENAI_TO_SAMPLING = {k: meta["sampling"] or k for k, meta in _OPENAI.items() if "sampling" in meta}

# /v1/chat/completions: the OpenAI fields, and SGLang's chat extensions its own serving-chat
# code (router/api/openai_chat.py) builds the prompt and the answer with (``regex`` and ``ebnf``
# become the grammar in the sampling parameters, which every instance applies).
CHAT_FIELDS = OPENAI_FIELDS | frozenset(
    {
        "regex",
        "ebnf",
        "separate_reasoning",
        "stream_reasoning",
        "chat_template_kwargs",
        "reasoning_effort",
        "continue_final_message",
    }
)

# /generate's sampling_params the router carries across the handoff: SamplingParams' fields
# but those ``NOT_CARRIED`` (why each is carried: SamplingParams).
SAMPLING_FIELDS = frozenset(
    k for k, meta in field_meta(SamplingParams).items() if meta.get("carried", True)
)

# Values that mean the feature is off, per field (besides None / False / empty).
_OFF_VALUES = {
    "n": (1,),
    "best_of": (1,),
    "top_logprobs_num": (0,),
    "logprobs": (0,),
    # SGLang's default, which python -m sglang.bench_serving sends with every request
    "logprob_start_len": (-1,),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_new_tokens": (0,),
    "min_tokens": (0,),
}


def _is_off(name: str, value) -> bool:
    if value is None or value is False or value in ({}, [], ""):
        return True
    return value in _OFF_VALUES.get(name, ())


def unsupported_fields(body: dict, served: frozenset[str]) -> list[str]:
    """Names of fields in ``body`` the router would have to drop, sorted."""
    return sorted(k for k, v in body.items() if k not in served and not _is_off(k, v))


def unsupported_message(fields: list[str]) -> str:
    return f"not supported by the sglang-pdd router: {', '.join(fields)}"


def unsupported_sampling(
    sampling: dict, prefix: str = "sampling_params.", seeded: bool = False
) -> list[str]:
    """Names of sampling parameters the router would carry wrongly across the handoff."""
    bad = [
        prefix + k for k, v in sampling.items() if k not in SAMPLING_FIELDS and not _is_off(k, v)
    ]
    if sampling.get("spaces_between_special_tokens") is False:
        # The router detokenizes the merged output itself, with SGLang's default spacing.
        bad.append(prefix + "spaces_between_special_tokens")
    # A seed makes sampling reproducible only where SGLang's seeded sampler runs; unless every
    # instance runs it (``seeded``: --pdd-seeded-sampling), RLD and MD would each draw from their
    # own state, so a seeded request with temperature > 0 is refused (greedy ignores the seed).
    temperature = sampling.get("temperature", 1.0)
    if not seeded and sampling.get("sampling_seed") is not None and temperature not in (0, 0.0):
        bad.append(prefix + "sampling_seed")
    return sorted(bad)


# SGLang's sampler treats a temperature below this as greedy (sampling_params._SAMPLING_EPS).
_GREEDY_TEMPERATURE = 1e-6


def deterministic(sampling: dict, seeded: bool) -> bool:
    """Every instance draws the same ids for ``sampling``: greedy (temperature ~0 or top_k 1),
    or seeded where every instance runs SGLang's seeded sampler (``seeded``)."""
    temperature = sampling.get("temperature", 1.0)
    if temperature is not None and temperature < _GREEDY_TEMPERATURE:
        return True
    if sampling.get("top_k") == 1:
        return True
    return seeded and sampling.get("sampling_seed") is not None
