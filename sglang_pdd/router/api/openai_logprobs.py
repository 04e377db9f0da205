"""OpenAI ``logprobs`` for the router's completions and chat answers.

The router asks every instance for SGLang's raw ``(logprob, token_id, token_text)`` entries (the
same /generate fields SGLang's own OpenAI server sets) and merges them per token, each from the
instance that produced the token; the OpenAI shapes are built with SGLang's own helpers, so they
match a co-located server's (tests/e2e/test_logprobs.py compares them).
"""

from __future__ import annotations

from sglang_pdd.router.upstream.calls import UpstreamError


def generate_fields(kind: str, body: dict) -> dict:
    """The /generate fields for an OpenAI request's ``logprobs`` / ``top_logprobs``."""
    if kind == "chat":
        top = body.get("top_logprobs")
        if top is not None and not body.get("logprobs"):
            raise _bad("top_logprobs requires logprobs: true")
        if not body.get("logprobs"):
            return {}
        top = top or 0
    else:
        if body.get("logprobs") is None:
            return {}
        top = body["logprobs"]
    if not isinstance(top, int) or isinstance(top, bool) or top < 0:
        raise _bad("logprobs / top_logprobs must be a non-negative integer")
    return {"return_logprob": True, "top_logprobs_num": top, "return_text_in_logprobs": True}


def _bad(message: str) -> UpstreamError:
    return UpstreamError(
        400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
    )


def completion_logprobs(tokens: list, tops: list, tokenizer) -> dict:
    """A completion choice's ``logprobs`` object for these output entries."""
    from sglang.srt.entrypoints.openai.utils import to_openai_style_logprobs

    return to_openai_style_logprobs(
        output_token_logprobs=tokens, output_top_logprobs=tops, tokenizer=tokenizer
    ).model_dump()


def chat_logprobs(tokens: list, tops: list, tokenizer) -> dict:
    """A chat choice's ``logprobs`` object (``content``: one item per token)."""
    from sglang.srt.entrypoints.openai.utils import _is_byte_level_tokenizer, token_id_to_bytes

    byte_level = _is_byte_level_tokenizer(tokenizer)

    def item(logprob, token_id, text) -> dict:
        raw = token_id_to_bytes(tokenizer, token_id) if byte_level else None
        return {
            "token": text or "",
            "bytes": raw if raw is not None else list((text or "").encode("utf-8")),
            "logprob": logprob,
        }

    content = []
    for i, (logprob, token_id, text) in enumerate(tokens):
        row = tops[i] if i < len(tops) and tops[i] is not None else []
        content.append(
            {**item(logprob, token_id, text), "top_logprobs": [item(*entry) for entry in row]}
        )
    return {"content": content}
