"""Agent conversations through PDD equal SGLang's own OpenAI server's (the co-located
reference, ``--tool-call-parser qwen25`` on both): tool-result turns (an assistant turn of calls
with ``content: null``, the ``tool`` messages, the tools again), multi-part contents, long
tool-using histories; through every pipeline (P-RLD-MD One-Shot and Catch-Up, P-MD), streamed or
not; then a generated corpus of conversations. Greedy, one request at a time (two requests in
one batch may end a random model's whitespace padding at another id on either server)."""

from __future__ import annotations

import json

import pytest
import requests
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.e2e.chat_parity import both, dumps

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Rome", "Lima"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 9},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, CLOCK]


def _call(i: int, name: str, arguments: dict) -> dict:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _tool_round(i: int, question: str, content=None, calls=None) -> list[dict]:
    """A user question, the assistant's calls (``content`` beside them), the tools' results."""
    calls = calls or [_call(i, "get_weather", {"city": "Paris", "days": 2})]
    results = [
        {"role": "tool", "tool_call_id": c["id"], "content": f"result {i}.{j}: sunny"}
        for j, c in enumerate(calls)
    ]
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": content, "tool_calls": calls},
        *results,
    ]


CASES = {
    # The assistant's calls with content null, then the tool's result, tools given again.
    "tool-result": {"messages": _tool_round(0, "Weather in Paris?"), "tools": TOOLS},
    "parallel-results": {
        "messages": _tool_round(
            1,
            "Paris and the time?",
            content="",
            calls=[
                _call(1, "get_weather", {"city": "Paris", "days": 1}),
                _call(2, "get_time", {"zone": "CET"}),
            ],
        ),
        "tools": TOOLS,
        "tool_choice": "auto",
    },
    "multi-part": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "there"}],
            },
        ]
    },
    "long-history": {
        "messages": [
            {"role": "system", "content": "You call tools."},
            *[m for i in range(6) for m in _tool_round(i, f"question {i}")],
            {"role": "assistant", "content": "All sunny."},
            {"role": "user", "content": "And tomorrow?"},
        ],
        "tools": TOOLS,
    },
    "named-after-results": {
        "messages": _tool_round(3, "Weather?"),
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_time"}},
    },
}


@pytest.fixture(scope="module")
def catchup_chat_router(server_group, pdd_cluster):
    """A Catch-Up router on the session cluster (every request P-RLD-MD)."""
    from sglang_pdd.testbed.cluster import start_router

    yield start_router(
        server_group,
        pdd_cluster,
        name="router-chat-catchup",
        handoff_mode="catch-up",
        catchup_threshold=4,
        catchup_chunk=16,
    )
    server_group.stop_named("router-chat-catchup")


@pytest.fixture(scope="module")
def routers(pdd_cluster, main_only_router, catchup_chat_router):
    return {
        "one-shot": pdd_cluster.router_url,
        "catch-up": catchup_chat_router.url,
        "p-md": main_only_router.url,
    }


def _assert_same(got: dict, want: dict, body: dict) -> None:
    assert got == want, f"request {dumps(body)}\nrouter {dumps(got)}\nreference {dumps(want)}"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("pipeline", ["one-shot", "catch-up", "p-md"])
def test_agent_turns_match_colocated(routers, colocated, pipeline, stream):
    """Each case, through one pipeline, equals the reference: every field of the answer but its
    ids and time (whole), or the content, calls, finish and usage put together (streamed)."""
    for name, case in CASES.items():
        body = {**case, "max_tokens": 48, "temperature": 0}
        if stream:
            body["stream_options"] = {"include_usage": True}
        got, want = both(routers[pipeline], colocated.url, body, stream)
        assert got["status"] == 200, (name, got)
        _assert_same(got, want, body)
        if stream:
            assert got["usages"] and got["usages"][-1]["completion_tokens"] > 0


def test_the_handoff_happens_on_an_agent_turn(pdd_cluster, colocated):
    """The cases above cross a handoff on P-RLD-MD (else they would test one instance)."""
    handed = 0
    for case in CASES.values():
        # long enough that MD is ready (its KV across the 8 Mbit/s link) well before RLD
        # could finish the answer alone, on a loaded host too
        body = {**case, "max_tokens": 240, "temperature": 0}
        resp = requests.post(
            pdd_cluster.router_url + "/v1/chat/completions", json=body, timeout=300
        )
        record = resp.json()["pdd"]
        handed += record["relay_tokens"] > 0 and record["finished_on"] == "main"
    assert handed >= 1


def test_continuous_usage_matches_colocated(pdd_cluster, colocated):
    """``stream_options.continuous_usage_stats``: usage on the deltas too, and the same final
    usage chunk."""
    body = {
        **CASES["tool-result"],
        "max_tokens": 16,
        "temperature": 0,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    got, want = both(pdd_cluster.router_url, colocated.url, body, stream=True)
    _assert_same(got, want, body)
    assert got["usage_on_deltas"] and got["usages"]


def test_refusals_match_colocated(pdd_cluster, colocated):
    """What SGLang refuses, the router refuses with SGLang's message."""
    bad_args = CASES["tool-result"]["messages"][:1] + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "x", "arguments": "[1]"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "r"},
    ]
    for body in (
        {"messages": bad_args, "tools": TOOLS, "max_tokens": 4},
        {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": TOOLS,
            "tool_choice": "none",
            "max_tokens": 4,
            "response_format": {"type": "json_schema"},
        },
        {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": TOOLS,
            "tool_choice": "required",
            "response_format": {"type": "json_object"},
            "max_tokens": 4,
        },
    ):
        got, want = both(pdd_cluster.router_url, colocated.url, body, stream=False)
        assert got["status"] == want["status"] == 400, (got, want)
        assert got["message"] == want["message"]


# --- a generated corpus -----------------------------------------------------------------

_words = st.sampled_from(["hi", "weather", "Paris", "time", "please", "the", "tool", "now"])
_text = st.lists(_words, min_size=1, max_size=6).map(" ".join)
_parts = st.lists(_text.map(lambda t: {"type": "text", "text": t}), min_size=1, max_size=3)
_content = st.one_of(_text, _parts)
_arguments = st.one_of(
    st.builds(
        lambda c, d: ("get_weather", {"city": c, "days": d}),
        st.sampled_from(["Paris", "Rome", "Lima"]),
        st.integers(1, 9),
    ),
    st.builds(lambda z: ("get_time", {"zone": z}), st.sampled_from(["UTC", "CET"])),
)


@st.composite
def _tool_turn(draw, turn: int) -> list[dict]:
    """An assistant turn of one or several calls (content null, empty or text) and results."""
    picked = draw(st.lists(_arguments, min_size=1, max_size=3))
    calls = [_call(turn * 10 + j, name, args) for j, (name, args) in enumerate(picked)]
    content = draw(st.sampled_from([None, "", "Let me check."]))
    results = [{"role": "tool", "tool_call_id": c["id"], "content": draw(_content)} for c in calls]
    return [{"role": "assistant", "content": content, "tool_calls": calls}, *results]


@st.composite
def conversations(draw) -> dict:
    """A chat request: an optional system prompt, 1 to 5 rounds (a user message, then tool
    turns or a text answer), ending on a user or tool message; tools and a tool choice, a
    response format, a budget."""
    messages = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(_content)})
    rounds = draw(st.integers(1, 5))
    for turn in range(rounds):
        messages.append({"role": "user", "content": draw(_content)})
        last = turn == rounds - 1
        kind = draw(st.sampled_from(["tools", "text", "none"] if not last else ["tools", "none"]))
        if kind == "tools":
            for k in range(draw(st.integers(1, 2))):
                messages.extend(draw(_tool_turn(turn * 3 + k)))
        elif kind == "text":
            messages.append({"role": "assistant", "content": draw(_text)})
    body = {"messages": messages, "temperature": 0, "max_tokens": draw(st.integers(4, 40))}
    if draw(st.booleans()):
        body["tools"] = draw(st.sampled_from([TOOLS, [WEATHER], [CLOCK, WEATHER]]))
        body["tool_choice"] = draw(
            st.sampled_from(
                ["auto", "none", "required", {"type": "function", "function": {"name": "get_time"}}]
                if any(t["function"]["name"] == "get_time" for t in body["tools"])
                else ["auto", "none", "required"]
            )
        )
        if draw(st.booleans()):
            body["parallel_tool_calls"] = draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:
        body["response_format"] = draw(
            st.sampled_from(
                [
                    {"type": "json_object"},
                    {
                        "type": "json_schema",
                        "json_schema": {
                            "name": "w",
                            "schema": {
                                "type": "object",
                                "properties": {"ok": {"type": "boolean"}},
                                "required": ["ok"],
                            },
                        },
                    },
                ]
            )
        )
    return body


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=conversations(), stream=st.booleans())
def test_generated_conversations_match_colocated(pdd_cluster, colocated, body, stream):
    """Each generated conversation gets the same answer (or the same refusal) from the router
    and from the reference."""
    if stream:
        body = {**body, "stream_options": {"include_usage": True}}
    got, want = both(pdd_cluster.router_url, colocated.url, body, stream)
    event(f"status {want['status']}")  # hypothesis --hypothesis-show-statistics: how many ran
    _assert_same(got, want, body)


@pytest.mark.parametrize(
    "options",
    [{"include_usage": True}, {"include_usage": True, "continuous_usage_stats": True}, None],
    ids=["usage", "continuous", "none"],
)
def test_completion_stream_usage_matches_colocated(pdd_cluster, colocated, options):
    """``/v1/completions``' usage as SGLang streams it: a usage chunk at the end (no choice),
    usage on every chunk with continuous_usage_stats, none without stream_options."""
    from sglang_pdd.testbed.client import iter_sse

    body = {"prompt": "the weather in Paris", "max_tokens": 12, "temperature": 0, "n": 2}
    body["stream"] = True
    if options is not None:
        body["stream_options"] = options

    def usage_of(url):
        with requests.post(url + "/v1/completions", json=body, stream=True, timeout=300) as r:
            assert r.status_code == 200, r.text
            chunks = list(iter_sse(r))
        text = {}
        for c in chunks:
            for choice in c["choices"]:
                text[choice["index"]] = text.get(choice["index"], "") + choice["text"]
        every = all(c.get("usage") for c in chunks if c["choices"])
        ends = [c for c in chunks if not c["choices"]]
        return text, every, [{k: c[k] for k in ("object", "usage")} for c in ends]

    got, want = usage_of(pdd_cluster.router_url), usage_of(colocated.url)
    assert got == want
    assert got[1] == bool(options and options.get("continuous_usage_stats"))
    assert len(got[2]) == (1 if options else 0)
