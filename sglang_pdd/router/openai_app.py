"""OpenAI's ``/v1/completions`` and ``/v1/chat/completions`` served through PDD.

``n`` choices are ``n`` independent PDD requests of the same prompt (router/fanout.py), merged
into one answer: choice ``j`` is request ``j``'s output; streamed chunks carry their choice's
index, and the usage (prompt once, all choices' completions) rides the last chunk.
"""

from __future__ import annotations

from aiohttp import web

from sglang_pdd.router import openai_format as oai
from sglang_pdd.router import openai_logprobs, tool_calls
from sglang_pdd.router.fanout import SubRequest, merged_events, sample_count
from sglang_pdd.router.record import TokenDelta
from sglang_pdd.router.request_fields import (
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
    end_with_error,
    json_body,
    sse,
    start_runs,
)
from sglang_pdd.router.upstream import UpstreamError


async def serve_openai(request: web.Request, state: RouterState, kind: str):
    """Answer one OpenAI request of ``kind`` (``completion`` or ``chat``)."""
    body = await json_body(request)
    validate_openai(body, state.limits)
    if unsupported := unsupported_fields(body, OPENAI_FIELDS):
        raise oai.bad_request(unsupported_message(unsupported))
    model = body.get("model") or state.model_info.get("model_path", "default")
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
    if unsupported := unsupported_sampling(
        sampling, prefix="", seeded=state.config.seeded_sampling
    ):
        names = {"sampling_seed": "seed"}  # back to the OpenAI names the client sent
        raise oai.bad_request(unsupported_message([names.get(n, n) for n in unsupported]))
    n = sample_count(body, "n")
    extra = openai_logprobs.generate_fields(kind, body)
    runs = start_runs(state, [SubRequest(ids, dict(sampling), dict(extra))] * n)
    oid = ("chatcmpl-" if kind == "chat" else "cmpl-") + runs[0].rid
    build = openai_logprobs.chat_logprobs if kind == "chat" else openai_logprobs.completion_logprobs

    def logprobs_since(run, start: int) -> dict | None:
        if not run.logprobs:
            return None
        return build(run.token_logprobs[start:], run.top_logprobs[start:], state.tokenizer)

    merged = merged_events(runs)
    if not body.get("stream"):
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
            if plan is not None:
                text, calls, reason = tool_calls.parse_answer(plan, text, reason, state.tokenizer)
            choices.append(oai.choice(kind, j, text, reason, logprobs_since(run, 0), calls))
        records = [run.finished.record.as_dict() for run in runs]
        return web.json_response(
            oai.response(
                kind,
                oid,
                model,
                choices,
                len(ids),
                sum(len(run.text.ids) for run in runs),
                records[0] if n == 1 else records,
            )
        )
    first = await anext(merged)  # errors before the first token still get an HTTP status
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    sent_any = [False] * n
    logprobs_sent = [0] * n  # logprobs ride the chunk that carries their text
    finished = 0
    # With a tool-call parser, each choice's text goes through it (router/tool_calls.py).
    parsed = [None] * n
    if plan is not None and plan.parser:
        parsed = [tool_calls.ToolCallStream(plan, state.tokenizer) for _ in runs]

    async def send_calls(index: int, calls: list[dict]) -> None:
        for call in calls:
            first_chunk = not sent_any[index]
            await sse(
                resp, oai.chunk(kind, oid, model, "", first=first_chunk, index=index, calls=[call])
            )
            sent_any[index] = True

    try:
        async for index, event in chain(first, merged):
            run = runs[index]
            if isinstance(event, TokenDelta):
                delta = run.text.add(event.token_ids)
                calls = []
                if parsed[index] is not None and delta:
                    delta, calls = parsed[index].feed(delta, final=False)
                if delta:
                    await sse(
                        resp,
                        oai.chunk(
                            kind,
                            oid,
                            model,
                            delta,
                            first=not sent_any[index],
                            logprobs=logprobs_since(run, logprobs_sent[index]),
                            index=index,
                        ),
                    )
                    sent_any[index], logprobs_sent[index] = True, len(run.token_logprobs)
                await send_calls(index, calls)
                continue
            finished += 1
            reason, tail = event.finish_reason, run.tail
            if parsed[index] is not None:
                aborted = (reason or {}).get("type") == "abort"
                tail, calls = parsed[index].feed(tail, final=not aborted)
                if tail:
                    await sse(
                        resp,
                        oai.chunk(kind, oid, model, tail, first=not sent_any[index], index=index),
                    )
                    sent_any[index] = True
                await send_calls(index, calls)
                if (rest := parsed[index].unstreamed()) is not None:
                    await send_calls(index, [rest])
                tail, reason = "", parsed[index].finish_reason(reason)
            use = None
            if finished == n:
                use = oai.usage(len(ids), sum(len(r.text.ids) for r in runs))
            more = len(run.token_logprobs) > logprobs_sent[index]
            lp = logprobs_since(run, logprobs_sent[index]) if more else None
            await sse(
                resp,
                oai.chunk(
                    kind,
                    oid,
                    model,
                    tail,
                    reason,
                    first=not sent_any[index],
                    usage_=use,
                    logprobs=lp,
                    index=index,
                ),
            )
        await sse(resp, "[DONE]")
    except DISCONNECTED:
        await abandon(state, merged)
        raise
    except UpstreamError as exc:
        await end_with_error(resp, exc)
    return resp
