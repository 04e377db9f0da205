"""Typed checks of client requests at the router's door: a 400 naming the field, never a 500.

``/generate`` and the OpenAI endpoints are decoded with msgspec (as SGLang's own ``io_struct``)
into the structs of ``router.pipeline.request_structs``, which state each field's type and
range as SGLang's ``SamplingParams.verify`` accepts them. The structs only check: the body goes
on as the client sent it (fields the router does not serve are refused by ``request_fields``).
The caps bound the work one request can ask for (``RequestLimits``, from the router's flags).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgspec

from sglang_pdd.router.pipeline.request_structs import (
    GenerateRequest,
    OpenAIRequest,
    SamplingParams,
)


@dataclass(frozen=True)
class RequestLimits:
    """What one client request may ask for (router flags ``--max-n``, ``--max-batch-size``)."""

    max_n: int = 64
    max_batch_size: int = 256


class InvalidRequest(ValueError):
    """A client request the router refuses with a 400; the message names the field."""


def bad_request(message: str) -> InvalidRequest:
    return InvalidRequest(message)


# Bodies larger than this are decoded off the event loop, so that other streams keep flowing.
_DECODE_INLINE_BYTES = 1 << 20


async def json_body(request) -> dict:
    """The request's (an aiohttp ``web.Request``) JSON object; ``InvalidRequest`` (a 400) for
    anything else."""
    raw = await request.read()
    if len(raw) > _DECODE_INLINE_BYTES:
        return await asyncio.to_thread(decode_body, raw)
    return decode_body(raw)


def decode_body(raw: bytes) -> dict:
    """A JSON object from a request body; 400 for anything else (invalid JSON, another type,
    nesting too deep for any real request)."""
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise bad_request(f"Invalid JSON body: {exc}") from exc
    except RecursionError as exc:
        raise bad_request("Invalid JSON body: nested too deeply") from exc
    if not isinstance(body, dict):
        raise bad_request("JSON body must be an object")
    return body


def _explain(exc: msgspec.ValidationError) -> str:
    """msgspec's 'Expected `int` >= 0, got `str` - at `$.sampling_params.max_new_tokens`' as
    'sampling_params.max_new_tokens: expected `int` >= 0, got `str`'."""
    text = str(exc)
    what, _, where = text.rpartition(" - at `")
    if not what:
        return text
    field = where.rstrip("`").removeprefix("$").lstrip(".") or "body"
    return f"{field}: {what[0].lower()}{what[1:]}"


def _check_sampling(params: SamplingParams, where: str, limits: RequestLimits) -> None:
    if params.top_k == 0:
        raise bad_request(f"{where}top_k: must be -1 (no limit) or >= 1, got 0")
    if (
        params.min_new_tokens is not None
        and params.max_new_tokens is not None
        and params.min_new_tokens > params.max_new_tokens
    ):
        raise bad_request(
            f"{where}min_new_tokens: must be <= max_new_tokens ({params.max_new_tokens}), "
            f"got {params.min_new_tokens}"
        )
    if params.n is not None and params.n > limits.max_n:
        raise bad_request(f"{where}n: at most {limits.max_n} (--max-n), got {params.n}")


def validate_generate(body: dict, limits: RequestLimits) -> None:
    """Check a ``/generate`` body's fields; raise a 400 naming the first bad one."""
    try:
        req = msgspec.convert(body, GenerateRequest)
    except msgspec.ValidationError as exc:
        raise bad_request(_explain(exc)) from exc
    prompts = 1
    if isinstance(req.text, list):
        prompts = len(req.text)
    if req.input_ids is not None:
        ids = req.input_ids
        if all(isinstance(t, list) for t in ids) and ids:
            for b, row in enumerate(ids):
                _check_ids(row, f"input_ids[{b}]")
            prompts = len(ids)
        else:
            _check_ids(ids, "input_ids")
    if prompts > limits.max_batch_size:
        raise bad_request(
            f"a batch of {prompts} prompts: at most {limits.max_batch_size} (--max-batch-size)"
        )
    sampling = req.sampling_params
    if isinstance(sampling, list):
        for b, params in enumerate(sampling):
            _check_sampling(params, f"sampling_params[{b}].", limits)
        samples = sum(params.n or 1 for params in sampling)
    else:
        if sampling is not None:
            _check_sampling(sampling, "sampling_params.", limits)
        samples = prompts * ((sampling.n if sampling is not None else None) or 1)
    if samples > limits.max_batch_size:
        raise bad_request(
            f"{samples} outputs (prompts x n): at most {limits.max_batch_size} (--max-batch-size)"
        )


def _check_ids(ids: list, where: str) -> None:
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise bad_request(f"{where}[{i}]: expected a token id (an int >= 0), got {t!r}")


def validate_openai(body: dict, limits: RequestLimits, chat: bool = False) -> None:
    """Check an OpenAI completions or chat body's fields; a 400 naming the first bad one.
    ``chat``: SGLang's own serving-chat code checks the response format (its messages)."""
    try:
        req = msgspec.convert(body, OpenAIRequest)
    except msgspec.ValidationError as exc:
        raise bad_request(_explain(exc)) from exc
    if req.top_k == 0:
        raise bad_request("top_k: must be -1 (no limit) or >= 1, got 0")
    if req.n is not None and req.n > limits.max_n:
        raise bad_request(f"n: at most {limits.max_n} (--max-n), got {req.n}")
    fmt = req.response_format
    if fmt is not None and fmt.type == "json_schema" and not chat:
        # SGLang reads response_format.schema only when json_schema is absent
        given = fmt.schema if fmt.json_schema is None else fmt.json_schema.schema
        if given is None:
            raise bad_request(
                "response_format.json_schema.schema: required when response_format.type is "
                "'json_schema'"
            )
