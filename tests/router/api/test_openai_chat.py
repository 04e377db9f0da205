"""``openai_chat.ChatServing``: SGLang's own serving-chat code on the router's stand-in.

The answers here come from fake runs (ids fed as a PDD run would feed them); the servers'
parity is tests/e2e/test_chat_parity.py's."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.router.config import REASONING_PARSERS, TOOL_CALL_PARSERS
from sglang_pdd.router.pipeline.record import TokenDelta
from sglang_pdd.router.pipeline.text import StreamingText
from sglang_pdd.router.upstream.calls import UpstreamError

TOOL = {
    "type": "function",
    "function": {
        "name": "f",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}
TOOL_TURN = [
    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "you"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from sglang_pdd.router.model_files import load_tokenizer

    return load_tokenizer(str(tiny_model))


@pytest.fixture(scope="module")
def serving(tiny_model, tokenizer):
    from sglang_pdd.router.api.openai_chat import ChatServing

    return ChatServing(tokenizer, str(tiny_model), "qwen25", None, {})


@pytest.fixture(scope="module")
def thinking(tiny_model, tokenizer):
    from sglang_pdd.router.api.openai_chat import ChatServing

    return ChatServing(tokenizer, str(tiny_model), "qwen25", "qwen3", {})


def test_the_parser_choices_are_every_parser_sglang_ships():
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    assert TOOL_CALL_PARSERS == tuple(sorted(FunctionCallParser.ToolCallParserEnum))
    assert REASONING_PARSERS == tuple(sorted(ReasoningParser.DetectorMap))


def test_a_tool_result_turn_is_rendered_as_sglang_renders_it(serving, tokenizer):
    """The calls' turn has content null: the template gets '' (not 'None'); the user's text
    parts are joined for a template that reads a string."""
    prepared = serving.prepare({"messages": TOOL_TURN, "tools": [TOOL], "max_tokens": 3})
    prompt = tokenizer.decode(prepared.input_ids)
    assert prompt == (
        "<|user|>\nhi you<|end|>\n<|assistant|>\n<|end|>\n<|tool|>\n42<|end|>\n<|assistant|>\n"
    )
    # Tools turn the special tokens' text on, as in SGLang; the budget is the client's.
    assert prepared.sampling["skip_special_tokens"] is False
    assert prepared.sampling["max_new_tokens"] == 3
    assert "n" not in prepared.sampling


def test_sglangs_refusals_are_400s_with_its_message(serving):
    bad = [*TOOL_TURN[:1], {**TOOL_TURN[1], "tool_calls": [{**TOOL_TURN[1]["tool_calls"][0]}]}]
    bad[1]["tool_calls"][0] = {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": "[1]"},
    }
    with pytest.raises(UpstreamError) as exc:
        serving.prepare({"messages": bad, "tools": [TOOL]})
    assert exc.value.status == 400
    assert "must be a JSON object" in exc.value.body["message"]
    with pytest.raises(UpstreamError) as exc:
        serving.prepare({"messages": [], "tools": [TOOL]})
    assert exc.value.body["message"] == "Messages cannot be empty."


def test_what_the_router_does_not_carry_is_refused_by_name(serving):
    for field, value in (("return_hidden_states", True), ("lora_path", "adapter")):
        with pytest.raises(UpstreamError) as exc:
            serving.prepare({"messages": TOOL_TURN[:1], field: value})
        assert exc.value.status == 400 and field in exc.value.body["message"]


def test_reasoning_with_a_grammar_is_refused_by_name(thinking):
    body = {"messages": TOOL_TURN[:1], "response_format": {"type": "json_object"}}
    with pytest.raises(UpstreamError) as exc:
        thinking.prepare(body)
    assert "require_reasoning" in exc.value.body["message"]
    # Without thinking, the grammar runs from the first token: served.
    off = {**body, "chat_template_kwargs": {"enable_thinking": False}}
    assert thinking.prepare(off).sampling["json_schema"] == '{"type": "object"}'


def _run(tokenizer, prompt_ids, reason):
    return SimpleNamespace(
        text=StreamingText(tokenizer, skip_special_tokens=False),
        body={"input_ids": prompt_ids},
        logprobs=False,
        token_logprobs=[],
        cached_tokens=0,
        top_logprobs=[],
        finished=SimpleNamespace(finish_reason=reason, record=None),
    )


def _whole(serving, prepared, tokenizer, ids, reason):
    run = _run(tokenizer, prepared.input_ids, reason)
    run.text.add(ids)
    run.text.finish(reason)
    return serving.response(prepared, "chatcmpl-t", [run])


def _streamed(serving, prepared, tokenizer, ids, reason, pieces):
    """The stream of ``ids`` arriving in ``pieces`` (sizes), as SSE lines."""
    run = _run(tokenizer, prepared.input_ids, reason)

    async def events():
        at = 0
        for size in pieces:
            if at >= len(ids):
                break
            yield 0, TokenDelta(ids[at : at + size], "main")
            at += size
        if at < len(ids):
            yield 0, TokenDelta(ids[at:], "main")
        run.text.finish(reason)
        yield 0, run.finished

    async def collect():
        return [line async for line in serving.stream(prepared, "chatcmpl-t", [run], events())]

    return asyncio.run(collect())


def _put_together(lines):
    content, reasoning, calls, finish, usage = "", "", {}, None, None
    for line in lines:
        data = line.removeprefix("data: ").strip()
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        if not chunk["choices"]:
            usage = chunk["usage"]
            continue
        choice = chunk["choices"][0]
        delta = choice["delta"]
        content += delta.get("content") or ""
        reasoning += delta.get("reasoning_content") or ""
        for call in delta.get("tool_calls") or []:
            entry = calls.setdefault(call["index"], {"name": None, "arguments": ""})
            entry["name"] = entry["name"] or call["function"]["name"]
            entry["arguments"] += call["function"]["arguments"] or ""
        finish = choice["finish_reason"] or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish, usage


_CALL = st.builds(
    lambda a: '<tool_call>\n{"name": "f", "arguments": {"a": ' + str(a) + "}}\n</tool_call>",
    st.integers(0, 99),
)
_TEXT = st.sampled_from(["Sure", " ", "ok.", "\n", "the answer", "</think>", "<think>"])


@settings(max_examples=30, deadline=None)
@given(
    parts=st.lists(st.one_of(_TEXT, _CALL), min_size=1, max_size=5),
    pieces=st.lists(st.integers(1, 7), max_size=40),
    reasoning=st.booleans(),
    stopped=st.booleans(),
)
def test_a_stream_does_not_depend_on_how_the_ids_arrive(
    serving, thinking, tokenizer, parts, pieces, reasoning, stopped
):
    """However the ids arrive (several in one chunk after a handoff, merged reads), SGLang's
    parsers see them one by one, as a co-located server's stream gives them: the content,
    reasoning, calls and finish equal those of ids arriving one at a time; the usage equals
    the whole answer's."""
    chat = thinking if reasoning else serving
    body = {"messages": TOOL_TURN, "tools": [TOOL], "max_tokens": 200, "stream": True}
    body["stream_options"] = {"include_usage": True}
    ids = tokenizer.encode("".join(parts), add_special_tokens=False)
    reason = {"type": "stop", "matched": None} if stopped else {"type": "length", "length": 200}
    grouped = _streamed(chat, chat.prepare(body), tokenizer, ids, reason, pieces)
    one_by_one = _streamed(chat, chat.prepare(body), tokenizer, ids, reason, [1] * len(ids))
    assert _put_together(grouped) == _put_together(one_by_one)
    whole = _whole(chat, chat.prepare({**body, "stream": False}), tokenizer, ids, reason)
    assert _put_together(grouped)[-1] == whole["usage"]


def test_reasoning_is_separated_as_sglang_separates_it(thinking, tokenizer):
    body = {"messages": TOOL_TURN[:1], "max_tokens": 50}
    ids = tokenizer.encode("plan it</think>done", add_special_tokens=False)
    stop = {"type": "stop", "matched": None}
    whole = _whole(thinking, thinking.prepare(body), tokenizer, ids, stop)
    message = whole["choices"][0]
    assert (message["message"]["reasoning_content"], message["message"]["content"]) == (
        "plan it",
        "done",
    )
    # usage counts the thought up to its end tag, as SGLang's scheduler does
    end = tokenizer.encode("</think>", add_special_tokens=False)
    counted = len(tokenizer.encode("plan it", add_special_tokens=False)) + len(end)
    assert whole["usage"]["reasoning_tokens"] == counted > 0
    assert whole["usage"]["completion_tokens_details"] == {"reasoning_tokens": counted}
    kept = thinking.prepare({**body, "separate_reasoning": False})
    message = _whole(thinking, kept, tokenizer, ids, stop)["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (None, "plan it</think>done")


def _tiny_tokenizer(tiny_model, bos_added: bool):
    """The test model's tokenizer; ``bos_added``: with a post-processor that puts its BOS in
    front of every encoding (as Llama 3's does), the case SGLang's chat encode guards against."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    if bos_added:
        bos = tokenizer.bos_token
        tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tokenizer.bos_token_id)]
        )
        assert tokenizer.encode("") == [tokenizer.bos_token_id]
    return tokenizer


@pytest.mark.parametrize("bos_added", [False, True], ids=["plain", "bos-adding"])
def test_the_prompt_is_the_rendered_template_encoded_once(tiny_model, bos_added):
    """The prompt is the template's text and nothing more: a tokenizer that adds a BOS of its
    own does not add a second one (SGLang encodes with ``add_special_tokens=False`` then); a
    trailing assistant message with text is sent as the user's, as SGLang does."""
    from sglang_pdd.router.api.openai_chat import ChatServing

    tokenizer = _tiny_tokenizer(tiny_model, bos_added)
    chat = ChatServing(tokenizer, str(tiny_model), None, None, {})
    messages = [{"role": "user", "content": "relay the cache"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = chat.prepare({"messages": messages}).input_ids
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    trailing = [*messages, {"role": "assistant", "content": "P"}]
    as_user = [*messages, {"role": "user", "content": "P"}]
    assert (
        chat.prepare({"messages": trailing}).input_ids
        == chat.prepare({"messages": as_user}).input_ids
    )


def _answered(chat, body: dict):
    """``chat.prepare(body)``, or None where it answers with an error as SGLang's server does:
    a 400 for what SGLang refuses, a 500 with its message for what fails inside SGLang (a
    renderer needing its model's special tokens, which the tiny tokenizer lacks)."""
    try:
        return chat.prepare(body)
    except UpstreamError as exc:
        assert exc.status in (400, 500) and exc.body["message"], exc.body
        if exc.status == 500:
            assert exc.body["message"].startswith("Internal server error: ")
        return None


@pytest.mark.parametrize("parser", TOOL_CALL_PARSERS)
def test_every_tool_call_parser_serves_a_tool_turn(tiny_model, tokenizer, parser):
    """Each parser SGLang ships runs in the router through SGLang's own classes: a tool turn
    is prepared (or answered with SGLang's error) and an answer parsed, whole and streamed."""
    from sglang_pdd.router.api.openai_chat import ChatServing

    try:
        chat = ChatServing(tokenizer, str(tiny_model), parser, None, {})
    except RuntimeError as exc:  # SGLang's DeepSeek V4 renderer needs that model's tokens
        assert parser in ("deepseekv4", "deepseekv41") and "special token" in str(exc)
        return
    ids = tokenizer.encode('{"name": "f", "arguments": {"a": 1}} done', add_special_tokens=False)
    stop = {"type": "stop", "matched": None}
    for choice in ("auto", "required", {"type": "function", "function": {"name": "f"}}):
        body = {"messages": TOOL_TURN, "tools": [TOOL], "tool_choice": choice, "max_tokens": 8}
        if (prepared := _answered(chat, body)) is None:
            continue
        whole = _whole(chat, prepared, tokenizer, ids, stop)
        assert whole["choices"][0]["finish_reason"] in ("stop", "tool_calls"), (parser, whole)
        lines = _streamed(
            chat, chat.prepare({**body, "stream": True}), tokenizer, ids, stop, [1] * 40
        )
        assert lines[-1].strip() == "data: [DONE]", (parser, lines[-3:])


@pytest.mark.parametrize("parser", REASONING_PARSERS)
def test_every_reasoning_parser_separates_an_answer(tiny_model, tokenizer, parser):
    """Each reasoning parser SGLang ships runs in the router: a chat is prepared (or answered
    with SGLang's error) and its answer split by SGLang's parser, whole and streamed, usage
    counting by the parser's think-end ids. A parser that needs what the model lacks (a
    response template) leaves every chat a 500 naming it and the flag."""
    from sglang_pdd.router.api.openai_chat import ChatServing

    try:
        chat = ChatServing(tokenizer, str(tiny_model), None, parser, {})
    except ValueError as exc:
        assert parser == "response_template" and "response_template" in str(exc)
        return
    body = {"messages": TOOL_TURN[:1], "max_tokens": 8}
    if (prepared := _answered(chat, body)) is None:
        return
    ids = tokenizer.encode("plan it</think>done", add_special_tokens=False)
    stop = {"type": "stop", "matched": None}
    whole = _whole(chat, prepared, tokenizer, ids, stop)
    assert 0 <= whole["usage"]["reasoning_tokens"] <= len(ids)
    lines = _streamed(chat, chat.prepare({**body, "stream": True}), tokenizer, ids, stop, [2] * 9)
    assert lines[-1].strip() == "data: [DONE]", (parser, lines[-3:])


def test_chats_a_parser_cannot_serve_are_500s_naming_the_flag(tiny_model, tokenizer):
    """A reasoning parser whose serving cannot start for this model (no response template)
    answers every chat with a 500 naming it and the flag, and tries again on the next."""
    from sglang_pdd.router.api.openai_chat import serving_for

    class State:  # what serving_for reads of the router's state
        config = SimpleNamespace(tool_call_parser=None, reasoning_parser="response_template")
        model_info = {"model_path": str(tiny_model)}
        server_info: dict = {}

    state = State()
    state.tokenizer = tokenizer
    for _ in range(2):
        with pytest.raises(UpstreamError) as exc:
            asyncio.run(serving_for(state))
        assert exc.value.status == 500
        assert "response_template" in exc.value.body["message"]
        assert "--reasoning-parser response_template" in exc.value.body["message"]
