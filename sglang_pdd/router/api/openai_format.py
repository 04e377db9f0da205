"""Translate OpenAI completion / chat requests to ``/generate`` and results back."""

from __future__ import annotations

import json
import time

from sglang_pdd.router.pipeline.request_fields import OPENAI_TO_SAMPLING
from sglang_pdd.router.upstream.calls import UpstreamError


def bad_request(message: str) -> UpstreamError:
    return UpstreamError(
        400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
    )


def sampling_params(body: dict, default_max_tokens: int | None) -> dict:
    params = {
        OPENAI_TO_SAMPLING[k]: v
        for k, v in body.items()
        if k in OPENAI_TO_SAMPLING and v is not None
    }
    if "max_new_tokens" not in params and default_max_tokens is not None:
        params["max_new_tokens"] = default_max_tokens
    if (schema := response_format_schema(body.get("response_format"))) is not None:
        params["json_schema"] = schema
    return params


def response_format_schema(response_format: dict | None) -> str | None:
    """The ``json_schema`` sampling parameter SGLang derives from an OpenAI ``response_format``
    (``ChatCompletionRequest.to_sampling_params``; checked against it by the unit tests), or
    None for none or ``text``. The body was validated (``request_structs.ResponseFormat``)."""
    if not response_format:
        return None
    kind = response_format["type"]
    if kind == "json_object":
        return '{"type": "object"}'
    if kind != "json_schema":
        return None
    inner = response_format.get("json_schema")
    if inner is not None:
        schema = inner["schema"]
    else:  # SGLang's (chat) extension: the schema given at response_format.schema
        schema = dict(response_format["schema"])
        properties = schema.get("properties")
        if isinstance(properties, dict) and "strict" in properties:
            # SGLang reads a "strict" property as the strict flag and drops it from the schema
            schema["properties"] = {k: v for k, v in properties.items() if k != "strict"}
    return json.dumps(schema)


def completion_prompt(body: dict, tokenizer) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    raise bad_request(
        "'prompt' must be a string or a list of token ids (batches are not "
        "supported by the sglang-pdd router)"
    )


def finish_reason(reason: dict | None) -> str | None:
    if not reason:
        return None
    if reason.get("type") == "tool_calls":
        return "tool_calls"
    return (
        "length"
        if reason.get("type") == "length"
        else ("abort" if reason.get("type") == "abort" else "stop")
    )


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict:
    """A whole answer's usage; ``cached_tokens``: reported (SGLang's ``--enable-cache-report``)
    unless None."""
    out = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return out


def choice(
    kind: str, index: int, text: str, reason, logprobs: dict | None = None, tool_calls=None
) -> dict:
    """One choice of a non-streaming answer (``tool_calls``: a chat's parsed calls)."""
    if kind == "chat":
        message = {"role": "assistant", "content": text}
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        return {
            "index": index,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish_reason(reason),
        }
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason(reason),
    }


def response(
    kind: str,
    rid: str,
    model: str,
    choices: list[dict],
    prompt_tokens: int,
    completion_tokens: int,
    pdd,
    cached_tokens: int | None = None,
) -> dict:
    """A non-streaming completion or chat.completion object."""
    obj = "chat.completion" if kind == "chat" else "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, completion_tokens, cached_tokens),
        "pdd": pdd,
    }


def chunk(
    kind: str,
    rid: str,
    model: str,
    text: str,
    reason=None,
    first: bool = False,
    usage_: dict | None = None,
    logprobs: dict | None = None,
    index: int = 0,
    calls: list[dict] | None = None,
) -> dict:
    """One streaming chunk (of choice ``index``); ``calls``: a chat's tool-call deltas (the
    chunk then carries them instead of text)."""
    if kind == "chat":
        delta = {"content": text} if calls is None else {"tool_calls": calls}
        if first:
            delta["role"] = "assistant"
        choice_ = {
            "index": index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish_reason(reason),
        }
        obj = "chat.completion.chunk"
    else:
        choice_ = {
            "index": index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish_reason(reason),
        }
        obj = "text_completion"
    out = {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice_],
    }
    if usage_ is not None:
        out["usage"] = usage_
    return out
