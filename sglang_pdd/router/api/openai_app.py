"""OpenAI's ``/v1/completions`` served through PDD (``/v1/chat/completions`` is
router/api/openai_chat.py's, with SGLang's own serving-chat code).

``n`` choices are ``n`` independent PDD requests of the same prompt
(router/pipeline/fanout.py), merged into one answer: choice ``j`` is request ``j``'s output;
streamed chunks carry their choice's index. A stream's usage (prompt once, all choices'
completions) comes as SGLang's server sends it: with ``stream_options.include_usage`` in a
chunk of its own at the end, with ``continuous_usage_stats`` on every chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from sglang_pdd.router.api import openai_format as oai
from sglang_pdd.router.api import openai_logprobs
from sglang_pdd.router.api.openai_chat import check_sampling
from sglang_pdd.router.api.request_model import json_body, validate_openai
from sglang_pdd.router.api.streaming import client_stream, send_stream, sse
from sglang_pdd.router.pipeline.fanout import (
    SubRequest,
    chain,
    merged_events,
    read_all,
    sample_count,
    start_runs,
)
from sglang_pdd.router.pipeline.record import TokenDelta
from sglang_pdd.router.pipeline.request_fields import (
    OPENAI_FIELDS,
    TOOL_FIELDS,
    unsupported_fields,
    unsupported_message,
)
from sglang_pdd.router.state import RouterState


async def serve_completion(request: web.Request, state: RouterState):
    """Answer one ``/v1/completions`` request."""
    body = await json_body(request)
    validate_openai(body, state.limits, chat=False)
    if unsupported := unsupported_fields(body, OPENAI_FIELDS):
        raise oai.bad_request(unsupported_message(unsupported))
    if present := [k for k in TOOL_FIELDS if k in body]:
        raise oai.bad_request(f"{', '.join(present)}: only /v1/chat/completions takes tools")
    ids = oai.completion_prompt(body, state.tokenizer)
    sampling = oai.sampling_params(body, default_max_tokens=16)
    check_sampling(sampling, state)
    usage_in_stream = _stream_usage(body, state)
    n = sample_count(body, "n")
    extra = openai_logprobs.generate_fields("completion", body)
    runs = start_runs(state, [SubRequest(ids, dict(sampling), dict(extra))] * n)
    answer = _Answer(
        oid="cmpl-" + runs[0].rid,
        model=body.get("model") or state.model_info.get("model_path", "default"),
        prompt_tokens=len(ids),
        runs=runs,
        tokenizer=state.tokenizer,
        cache_report=bool(state.server_info.get("enable_cache_report")),
    )
    merged = merged_events(runs)
    if not body.get("stream"):
        return await _whole(answer, state, merged)
    first = await anext(merged)  # errors before the first token still get an HTTP status
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    openai_stream = _OpenAIStream(answer, resp, *usage_in_stream)
    return await send_stream(
        state, resp, merged, lambda events: openai_stream.run(chain(first, events))
    )


def _stream_usage(body: dict, state: RouterState) -> tuple[bool, bool]:
    """(a usage chunk at the end, usage on every chunk) of a stream, as SGLang decides them
    (``stream_options``, the server's --stream-response-default-include-usage)."""
    default = bool(state.server_info.get("stream_response_default_include_usage"))
    options = body.get("stream_options")
    if not body.get("stream") or (not options and not default):
        return False, False
    from sglang.srt.entrypoints.openai.protocol import StreamOptions
    from sglang.srt.entrypoints.openai.utils import should_include_usage

    if options is not None and not isinstance(options, dict):
        raise oai.bad_request("stream_options: must be an object")
    parsed = StreamOptions(**options) if options else None
    return should_include_usage(parsed, default)


@dataclass
class _Answer:
    """What every chunk or the whole answer of one completion request needs."""

    oid: str
    model: str
    prompt_tokens: int
    runs: list
    tokenizer: object
    cache_report: bool  # the Main-Decode server's --enable-cache-report: usage says what P had

    def cached_tokens(self) -> int | None:
        """SGLang's reported cached tokens: the prompt's (once for all choices), or None."""
        return self.runs[0].cached_tokens if self.cache_report else None

    def logprobs_since(self, run, start: int) -> dict | None:
        if not run.logprobs:
            return None
        return openai_logprobs.completion_logprobs(
            run.token_logprobs[start:], run.top_logprobs[start:], self.tokenizer
        )

    def completion_tokens(self) -> int:
        return sum(len(r.text.ids) for r in self.runs)


async def _whole(answer: _Answer, state: RouterState, merged) -> web.Response:
    """The non-streamed answer: every choice once all runs ended."""
    runs = answer.runs
    async with client_stream(state, merged):
        await read_all(runs, merged)
    choices = [
        oai.choice(
            "completion",
            j,
            run.text.full(),
            run.finished.finish_reason,
            answer.logprobs_since(run, 0),
        )
        for j, run in enumerate(runs)
    ]
    records = [run.finished.record.as_dict() for run in runs]
    return web.json_response(
        oai.response(
            "completion",
            answer.oid,
            answer.model,
            choices,
            answer.prompt_tokens,
            answer.completion_tokens(),
            records[0] if len(runs) == 1 else records,
            answer.cached_tokens(),
        )
    )


class _OpenAIStream:
    """The streamed completion: one SSE chunk per delta of each choice, the finish reason, then
    (as SGLang's server, with ``stream_options``) the usage on every chunk and/or in a chunk of
    its own, then [DONE]."""

    def __init__(
        self, answer: _Answer, resp: web.StreamResponse, include_usage: bool, continuous: bool
    ) -> None:
        n = len(answer.runs)
        self.answer, self.resp = answer, resp
        self.include_usage, self.continuous = include_usage, continuous
        self.logprobs_sent = [0] * n  # logprobs ride the chunk that carries their text

    async def run(self, events) -> None:
        async for index, event in events:
            run = self.answer.runs[index]
            if isinstance(event, TokenDelta):
                text = run.text.add(event.token_ids)
                if text:
                    await self._send(index, run, text)
            else:
                await self._send(index, run, run.tail, reason=event.finish_reason)
        if self.include_usage:
            a = self.answer
            usage = _usage(a.prompt_tokens, a.completion_tokens(), a.cached_tokens())
            # SGLang sends this chunk without its null fields, and without a choice.
            usage = {k: v for k, v in usage.items() if v is not None}
            last = oai.chunk("completion", a.oid, a.model, "", usage_=usage)
            last["choices"] = []
            await sse(self.resp, last)
        await sse(self.resp, "[DONE]")

    async def _send(self, index: int, run, text: str, reason=None) -> None:
        a = self.answer
        more = len(run.token_logprobs) > self.logprobs_sent[index]
        logprobs = a.logprobs_since(run, self.logprobs_sent[index]) if more else None
        self.logprobs_sent[index] = len(run.token_logprobs)
        # SGLang's continuous usage: this choice's prompt and output so far.
        usage = (
            _usage(a.prompt_tokens, len(run.text.ids), a.cached_tokens())
            if self.continuous
            else None
        )
        chunk = oai.chunk(
            "completion", a.oid, a.model, text, reason, usage_=usage, logprobs=logprobs, index=index
        )
        await sse(self.resp, chunk)


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None) -> dict:
    """A stream's usage object, SGLang's (``UsageProcessor``)."""
    from sglang.srt.entrypoints.openai.protocol import PromptTokensDetails
    from sglang.srt.entrypoints.openai.usage_processor import UsageProcessor

    cached = None if cached_tokens is None else PromptTokensDetails(cached_tokens=cached_tokens)
    usage = UsageProcessor.calculate_token_usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cached_tokens=cached
    )
    return usage.model_dump()
