"""``router/tool_calls.py``: a chat's tools become SGLang's template tools, grammar and parsed
``tool_calls``; anything malformed is a 400, never a crash. No servers (SGLang's own request
model and parsers, imported in this process)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_pdd.router.upstream import UpstreamError
from tests.conftest import sglang_installed

pytestmark = pytest.mark.skipif(not sglang_installed(), reason="needs SGLang's parsers")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
        "strict": True,
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def _plan(body, parser="qwen25", tokenizer=None):
    from sglang_pdd.router.tool_calls import plan_tools

    return plan_tools({"messages": [{"role": "user", "content": "hi"}], **body}, parser, tokenizer)


def test_no_tools_or_choice_none_changes_nothing(tokenizer):
    assert _plan({}, tokenizer=tokenizer) is None
    assert _plan({"tools": [WEATHER], "tool_choice": "none"}, tokenizer=tokenizer) is None


def test_required_with_a_parser_is_a_structural_tag_over_every_tool(tokenizer):
    plan = _plan({"tools": [WEATHER, TIME], "tool_choice": "required"}, tokenizer=tokenizer)
    kind, value = plan.constraint
    tag = json.loads(value)
    assert kind == "structural_tag" and tag["at_least_one"] is True
    assert [s["begin"].split('"name":"')[1][:-15] for s in tag["structures"]] == [
        "get_weather",
        "get_time",
    ]
    # strict: the parameters' schema; not strict: any JSON (SGLang's rule)
    assert tag["structures"][0]["schema"] == WEATHER["function"]["parameters"]
    assert tag["structures"][1]["schema"] == {}
    assert [t["function"]["name"] for t in plan.template_tools] == ["get_weather", "get_time"]


def test_a_named_tool_goes_alone_into_the_template(tokenizer):
    choice = {"type": "function", "function": {"name": "get_time"}}
    plan = _plan({"tools": [WEATHER, TIME], "tool_choice": choice}, tokenizer=tokenizer)
    assert [t["function"]["name"] for t in plan.template_tools] == ["get_time"]
    assert plan.required


def test_without_a_parser_required_is_sglangs_json_array_schema(tokenizer):
    plan = _plan({"tools": [WEATHER], "tool_choice": "required"}, parser=None, tokenizer=tokenizer)
    kind, value = plan.constraint
    schema = json.loads(value)
    assert kind == "json_schema" and schema["type"] == "array" and schema["minItems"] == 1
    assert _plan({"tools": [WEATHER]}, parser=None, tokenizer=tokenizer).constraint is None


def test_auto_without_strict_tools_is_unconstrained(tokenizer):
    assert _plan({"tools": [TIME]}, tokenizer=tokenizer).constraint is None


def test_tools_turn_special_tokens_on_and_refuse_a_second_grammar(tokenizer):
    from sglang_pdd.router.tool_calls import apply_constraint

    plan = _plan({"tools": [WEATHER], "tool_choice": "required"}, tokenizer=tokenizer)
    sampling = {}
    apply_constraint(plan, sampling)
    assert sampling["skip_special_tokens"] is False and "structural_tag" in sampling
    with pytest.raises(UpstreamError, match="cannot be combined with response_format"):
        apply_constraint(plan, {"json_schema": "{}"})
    auto = _plan({"tools": [WEATHER]}, tokenizer=tokenizer)
    kept = {"json_schema": "{}"}
    apply_constraint(auto, kept)  # auto keeps the other grammar, as SGLang does
    assert kept == {"json_schema": "{}", "skip_special_tokens": False}


@pytest.mark.parametrize(
    "body, message",
    [
        ({"tool_choice": "required", "tools": []}, "Tools cannot be empty"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "Tool 'x' not found in tools list.",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]},
            "Tool 0 function has invalid 'parameters' schema",
        ),
        ({"tools": [{"type": "function"}]}, "tools.0.function"),
        (
            {"messages": [{"role": "system", "content": "", "tools": [TIME]}]},
            "messages[0].tools",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ],
)
def test_malformed_tools_are_400s_that_name_the_problem(tokenizer, body, message):
    with pytest.raises(UpstreamError) as caught:
        _plan(body, tokenizer=tokenizer)
    assert caught.value.status == 400 and message in caught.value.body["message"]


def test_a_qwen25_call_is_parsed_and_the_stop_becomes_tool_calls(tokenizer):
    from sglang_pdd.router.tool_calls import parse_answer

    plan = _plan({"tools": [WEATHER, TIME]}, tokenizer=tokenizer)
    text = (
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    )
    content, calls, reason = parse_answer(plan, text, {"type": "stop", "matched": 2}, tokenizer)
    assert content == "Sure."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Rome"})
    ]
    assert calls[0]["id"].startswith("call_") and len(calls[0]["id"]) == 29
    assert reason == {"type": "tool_calls", "matched": None}
    # no call in the text: the text as it is, the reason as it was
    assert parse_answer(plan, "no call", {"type": "length"}, tokenizer) == (
        "no call",
        None,
        {"type": "length"},
    )


def test_the_json_array_answer_of_a_parserless_required_choice(tokenizer):
    from sglang_pdd.router.tool_calls import parse_answer

    plan = _plan({"tools": [WEATHER], "tool_choice": "required"}, parser=None, tokenizer=tokenizer)
    text = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    content, calls, reason = parse_answer(plan, text, {"type": "stop", "matched": 2}, tokenizer)
    assert content == "" and calls[0]["function"]["arguments"] == '{"city": "Paris"}'
    assert reason["type"] == "tool_calls"
    content, calls, reason = parse_answer(plan, "[1", {"type": "stop", "matched": 2}, tokenizer)
    assert (content, calls, reason) == ("[1", None, {"type": "stop", "matched": None})


def test_history_tool_call_arguments_reach_the_template_as_objects():
    from sglang_pdd.router.tool_calls import template_messages

    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    history = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    assert template_messages(history)[0]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    for bad, why in (("{", "valid JSON"), ("[1]", "a JSON object")):
        broken = {**call, "function": {"name": "f", "arguments": bad}}
        with pytest.raises(UpstreamError, match=why):
            template_messages([{"role": "assistant", "tool_calls": [broken]}])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=10,
)
tools = st.lists(
    st.fixed_dictionaries(
        {"type": st.just("function")},
        optional={
            "function": st.fixed_dictionaries(
                {"name": st.text(min_size=1, max_size=6)},
                optional={"parameters": json_values, "strict": st.booleans()},
            )
        },
    )
    | json_values,
    max_size=3,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tools=tools | json_values,
    choice=st.sampled_from(["auto", "required", "none"]) | json_values,
    parallel=json_values,
)
def test_any_tools_body_is_planned_or_refused_with_a_400(tokenizer, tools, choice, parallel):
    try:
        plan = _plan(
            {"tools": tools, "tool_choice": choice, "parallel_tool_calls": parallel},
            tokenizer=tokenizer,
        )
    except UpstreamError as exc:
        assert exc.status == 400 and isinstance(exc.body["message"], str)
        return
    if plan is not None:
        from sglang_pdd.router.tool_calls import parse_answer

        parse_answer(plan, '<tool_call>\n{"name": 1}\n</tool_call>', {"type": "stop"}, tokenizer)


def test_a_streamed_call_arrives_as_a_named_delta_then_argument_pieces(tokenizer):
    """The text in small pieces: a first delta with the call's id and name, then pieces of
    its arguments that add up to the call's JSON; a stop after it is ``tool_calls``."""
    from sglang_pdd.router.tool_calls import ToolCallStream

    stream = ToolCallStream(_plan({"tools": [WEATHER, TIME]}, tokenizer=tokenizer), tokenizer)
    text = 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    content, deltas = "", []
    for i in range(0, len(text), 3):
        piece, calls = stream.feed(text[i : i + 3], final=False)
        content, deltas = content + piece, deltas + calls
    piece, calls = stream.feed("", final=True)
    content, deltas = content + piece, deltas + calls
    if (rest := stream.unstreamed()) is not None:
        deltas.append(rest)
    # SGLang's qwen25 stream parser may drop text it held while a call marker could begin.
    assert "Sure.".startswith(content.strip()) and "<tool_call>" not in content
    assert deltas[0]["function"]["name"] == "get_weather" and deltas[0]["id"].startswith("call_")
    assert all(d["id"] is None and d["index"] == 0 for d in deltas[1:])
    arguments = "".join(d["function"]["arguments"] for d in deltas)
    assert json.loads(arguments) == {"city": "Rome"}
    assert stream.finish_reason({"type": "stop", "matched": 7}) == {
        "type": "tool_calls",
        "matched": 7,
    }


def test_a_schema_nested_past_pythons_recursion_limit_is_a_400(tokenizer):
    deep: dict = {"type": "object"}
    for _ in range(5000):
        deep = {"type": "object", "properties": {"x": deep}}
    tool = {"type": "function", "function": {"name": "f", "parameters": deep}}
    with pytest.raises(UpstreamError) as caught:
        _plan({"tools": [tool]}, tokenizer=tokenizer)
    assert caught.value.status == 400


def _streamed_by_groups(plan, tokenizer, ids, sizes):
    """(content, {index: [name, arguments]}) of ``ids`` fed to a stream in groups of
    ``sizes`` (cycled), as the router's events would bring them."""
    from sglang_pdd.router.text import StreamingText
    from sglang_pdd.router.tool_calls import ToolCallStream

    stream = ToolCallStream(plan, tokenizer)
    text = StreamingText(tokenizer, skip_special_tokens=False)
    content, calls, i, k = "", {}, 0, 0
    while i < len(ids):
        size = sizes[k % len(sizes)]
        steps = stream.feed_ids(text, ids[i : i + size])
        i, k = i + size, k + 1
        steps.append(
            stream.feed(text.finish({"type": "stop"}), final=True) if i >= len(ids) else ("", [])
        )
        for piece, deltas in steps:
            content += piece
            for delta in deltas:
                entry = calls.setdefault(delta["index"], [None, ""])
                entry[0] = entry[0] or delta["function"]["name"]
                entry[1] += delta["function"]["arguments"] or ""
    if (rest := stream.unstreamed()) is not None:
        calls[rest["index"]][1] += rest["function"]["arguments"]
    return content, calls


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    before=st.sampled_from(["", "Sure. ", " the main server "]),
    after=st.sampled_from(["", " model cache token prefill decode", "\n\n relay"]),
)
def test_a_streamed_answer_parses_the_same_however_its_ids_are_grouped(
    tokenizer, sizes, before, after
):
    """SGLang's qwen25 stream parser gives other content for the same text cut otherwise (text
    after a call's end is dropped fed id by id, kept fed with the end): the router feeds it
    one id at a time whatever groups the ids arrive in (several after a handoff), so its answer
    is a one-token-per-chunk server's."""
    plan = _plan(
        {
            "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        },
        tokenizer=tokenizer,
    )
    answer = before + '<tool_call>\n{"name":"get_time", "arguments":{"zone":  "UTC"}}\n</tool_call>'
    ids = tokenizer.encode(answer + after, add_special_tokens=False)
    one_by_one = _streamed_by_groups(plan, tokenizer, ids, [1])
    assert _streamed_by_groups(plan, tokenizer, ids, sizes) == one_by_one
    assert one_by_one[1] == {0: ["get_time", '{"zone": "UTC"}']}
