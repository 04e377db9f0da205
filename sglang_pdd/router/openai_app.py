"""OpenAI's ``/v1/completions`` and ``/v1/chat/completions`` served through PDD.

``n`` choices are ``n`` independent PDD requests of the same prompt (router/fanout.py), merged
into one answer: choice ``j`` is request ``j``'s output; streamed chunks carry their choice's
index, and the usage (prompt once, all choices' completions) rides the last chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from sglang_pdd.router import openai_chat, openai_logprobs, tool_calls
from sglang_pdd.router import openai_format as oai
from sglang_pdd.router.fanout import SubRequest, merged_events, sample_count
from sglang_pdd.router.record import TokenDelta
from sglang_pdd.router.request_fields import (
    CHAT_FIELDS,
    OPENAI_FIELDS,
    unsupported_fields,
    unsupported_message,
    unsupported_sampling,
)
from sglang_pdd.router.request_model import validate_openai
from sglang_pdd.router.state import RouterState
from sglang_pdd.router.streaming import (
    DISCONNECTED,
    abandon,
    chain,
    json_body,
    send_stream,
    sse,
    start_runs,
)


async def serve_openai(request: web.Request, state: RouterState, kind: str):
    """Answer one OpenAI request of ``kind`` (``completion`` or ``chat``)."""
    body = await json_body(request)
    validate_openai(body, state.limits, chat=kind == "chat")
    if kind == "chat":
        return await _serve_chat(request, state, body)
    if unsupported := unsupported_fields(body, OPENAI_FIELDS):
        raise oai.bad_request(unsupported_message(unsupported))
    ids, sampling, plan = _prompt_and_sampling(body, state, kind)
    _check_sampling(sampling, state)
    n = sample_count(body, "n")
    extra = openai_logprobs.generate_fields(kind, body)
    runs = start_runs(state, [SubRequest(ids, dict(sampling), dict(extra))] * n)
    answer = _Answer(
        kind=kind,
        oid=("chatcmpl-" if kind == "chat" else "cmpl-") + runs[0].rid,
        model=body.get("model") or state.model_info.get("model_path", "default"),
        prompt_tokens=len(ids),
        runs=runs,
        plan=plan,
        tokenizer=state.tokenizer,
    )
    merged = merged_events(runs)
    if not body.get("stream"):
        return await _whole(answer, state, merged)
    first = await anext(merged)  # errors before the first token still get an HTTP status
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    openai_stream = _OpenAIStream(answer, resp)
    return await send_stream(
        state, resp, merged, lambda events: openai_stream.run(chain(first, events))
    )


async def _serve_chat(request: web.Request, state: RouterState, body: dict):
    """A chat, prompt to answer with SGLang's own serving-chat code (router/openai_chat.py)."""
    if unsupported := unsupported_fields(body, CHAT_FIELDS):
        raise oai.bad_request(unsupported_message(unsupported))
    serving = await openai_chat.serving_for(state)
    prepared = serving.prepare(body)
    _check_sampling(prepared.sampling, state)
    n = sample_count(body, "n")
    extra = openai_logprobs.generate_fields("chat", body)
    subs = [SubRequest(prepared.input_ids, dict(prepared.sampling), dict(extra))] * n
    runs = start_runs(state, subs)
    oid = "chatcmpl-" + runs[0].rid
    merged = merged_events(runs)
    if not prepared.stream:
        try:
            async for index, event in merged:
                if isinstance(event, TokenDelta):
                    runs[index].text.add(event.token_ids)
        except DISCONNECTED:
            await abandon(state, merged)
            raise
        answer = serving.response(prepared, oid, runs)
        records = [run.finished.record.as_dict() for run in runs]
        answer["pdd"] = records[0] if len(runs) == 1 else records
        return web.json_response(answer)
    first = await anext(merged)  # errors before the first token still get an HTTP status
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)

    async def send(events) -> None:
        async for line in serving.stream(prepared, oid, runs, chain(first, events)):
            await resp.write(line.encode())

    return await send_stream(state, resp, merged, send)


def _check_sampling(sampling: dict, state: RouterState) -> None:
    if unsupported := unsupported_sampling(
        sampling, prefix="", seeded=state.config.seeded_sampling
    ):
        names = {"sampling_seed": "seed"}  # back to the OpenAI names the client sent
        raise oai.bad_request(unsupported_message([names.get(n, n) for n in unsupported]))


def _prompt_and_sampling(body: dict, state: RouterState, kind: str):
    """The prompt's ids, SGLang sampling params and the tool-call plan (chat only) of ``body``;
    400 for what PDD cannot carry."""
    plan = None
    if kind == "chat":
        plan = tool_calls.plan_tools(body, state.config.tool_call_parser, state.tokenizer)
        ids = oai.chat_prompt(body, state.tokenizer, plan.template_tools if plan else None)
        sampling = oai.sampling_params(body, default_max_tokens=None)
        if plan is not None:
            tool_calls.apply_constraint(plan, sampling)
    elif present := [k for k in tool_calls.TOOL_FIELDS if k in body]:
        raise oai.bad_request(f"{', '.join(present)}: only /v1/chat/completions takes tools")
    else:
        ids = oai.completion_prompt(body, state.tokenizer)
        sampling = oai.sampling_params(body, default_max_tokens=16)
    return ids, sampling, plan


@dataclass
class _Answer:
    """What every chunk or the whole answer of one OpenAI request needs."""

    kind: str
    oid: str
    model: str
    prompt_tokens: int
    runs: list
    plan: object  # tool_calls' plan, or None
    tokenizer: object

    def logprobs_since(self, run, start: int) -> dict | None:
        if not run.logprobs:
            return None
        build = (
            openai_logprobs.chat_logprobs
            if self.kind == "chat"
            else openai_logprobs.completion_logprobs
        )
        return build(run.token_logprobs[start:], run.top_logprobs[start:], self.tokenizer)

    def usage(self) -> dict:
        return oai.usage(self.prompt_tokens, sum(len(r.text.ids) for r in self.runs))


async def _whole(answer: _Answer, state: RouterState, merged) -> web.Response:
    """The non-streamed answer: every choice once all runs ended."""
    runs = answer.runs
    try:
        async for index, event in merged:
            if isinstance(event, TokenDelta):
                runs[index].text.add(event.token_ids)
    except DISCONNECTED:
        await abandon(state, merged)
        raise
    choices = []
    for j, run in enumerate(runs):
        text, reason, calls = run.text.full(), run.finished.finish_reason, None
        if answer.plan is not None:
            text, calls, reason = tool_calls.parse_answer(
                answer.plan, text, reason, answer.tokenizer
            )
        choices.append(
            oai.choice(answer.kind, j, text, reason, answer.logprobs_since(run, 0), calls)
        )
    records = [run.finished.record.as_dict() for run in runs]
    return web.json_response(
        oai.response(
            answer.kind,
            answer.oid,
            answer.model,
            choices,
            answer.prompt_tokens,
            sum(len(run.text.ids) for run in runs),
            records[0] if len(runs) == 1 else records,
        )
    )


class _OpenAIStream:
    """The streamed answer: one SSE chunk per delta of each choice, tool calls as the parser
    finds them, the finish reason (and, on the last choice to end, the usage), then [DONE]."""

    def __init__(self, answer: _Answer, resp: web.StreamResponse) -> None:
        n = len(answer.runs)
        self.answer, self.resp = answer, resp
        self.sent_any = [False] * n
        self.logprobs_sent = [0] * n  # logprobs ride the chunk that carries their text
        self.finished = 0
        # With a tool-call parser, each choice's text goes through it (router/tool_calls.py).
        self.parsed = [None] * n
        if answer.plan is not None and answer.plan.parser:
            self.parsed = [
                tool_calls.ToolCallStream(answer.plan, answer.tokenizer) for _ in range(n)
            ]

    async def run(self, events) -> None:
        async for index, event in events:
            if isinstance(event, TokenDelta):
                await self._delta(index, event)
            else:
                await self._finish(index, event)
        await sse(self.resp, "[DONE]")

    async def _send(self, index: int, text: str, **fields) -> None:
        a = self.answer
        first = not self.sent_any[index]
        await sse(
            self.resp, oai.chunk(a.kind, a.oid, a.model, text, first=first, index=index, **fields)
        )
        self.sent_any[index] = True

    async def _send_calls(self, index: int, calls: list[dict]) -> None:
        for call in calls:
            await self._send(index, "", calls=[call])

    async def _delta(self, index: int, event: TokenDelta) -> None:
        run, parser = self.answer.runs[index], self.parsed[index]
        if parser is None:
            steps = [(run.text.add(event.token_ids), [])]
        else:
            steps = parser.feed_ids(run.text, event.token_ids)
        for delta, calls in steps:
            if delta:
                logprobs = self.answer.logprobs_since(run, self.logprobs_sent[index])
                await self._send(index, delta, logprobs=logprobs)
                self.logprobs_sent[index] = len(run.token_logprobs)
            await self._send_calls(index, calls)

    async def _finish(self, index: int, event) -> None:
        run, parser = self.answer.runs[index], self.parsed[index]
        self.finished += 1
        reason, tail = event.finish_reason, run.tail
        if parser is not None:
            aborted = (reason or {}).get("type") == "abort"
            tail, calls = parser.feed(tail, final=not aborted)
            if tail:
                await self._send(index, tail)
            await self._send_calls(index, calls)
            if (rest := parser.unstreamed()) is not None:
                await self._send_calls(index, [rest])
            tail, reason = "", parser.finish_reason(reason)
        use = self.answer.usage() if self.finished == len(self.answer.runs) else None
        more = len(run.token_logprobs) > self.logprobs_sent[index]
        lp = self.answer.logprobs_since(run, self.logprobs_sent[index]) if more else None
        await self._send(index, tail, reason=reason, usage_=use, logprobs=lp)
