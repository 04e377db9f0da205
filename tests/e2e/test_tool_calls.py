"""OpenAI tool calling through PDD, streamed or not, equals SGLang's own OpenAI server (the
co-located reference, ``--tool-call-parser qwen25`` on both): the tools in the prompt, SGLang's
grammar for the tool choice carried across the handoff (every request of the session cluster is
P-RLD-MD), the answer parsed into the same ``tool_calls``."""

from __future__ import annotations

import json

import pytest
import requests

from sglang_pdd.testbed.client import iter_sse

CITY = {
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
        "strict": True,
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
        "strict": True,
    },
}


def _chat(url: str, body: dict) -> requests.Response:
    return requests.post(url + "/v1/chat/completions", json=body, timeout=300)


def _streamed(url: str, body: dict):
    """The streamed answer put together: (content, [(name, arguments as an object)],
    finish_reason); each call's first delta carries its id and name, later ones pieces of its
    arguments (SGLang's shape; how the pieces are cut depends on chunk boundaries)."""
    content, calls, reason = "", {}, None
    with requests.post(
        url + "/v1/chat/completions", json={**body, "stream": True}, stream=True, timeout=300
    ) as resp:
        assert resp.status_code == 200, resp.text
        for chunk in iter_sse(resp):
            if not chunk.get("choices"):
                continue  # a usage chunk
            choice = chunk["choices"][0]
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(call["index"], {"name": None, "arguments": ""})
                if call["function"].get("name"):
                    assert call["id"].startswith("call_") and entry["name"] is None
                    entry["name"] = call["function"]["name"]
                entry["arguments"] += call["function"].get("arguments") or ""
            reason = choice.get("finish_reason") or reason
    named = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
    return content, named, reason


def _answer(resp: requests.Response):
    """(content, [(name, arguments as an object)], finish_reason): call ids are random."""
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
    named = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
    return choice["message"]["content"], named, choice["finish_reason"]


@pytest.mark.parametrize(
    "tool_choice",
    ["required", {"type": "function", "function": {"name": "get_time"}}, "auto"],
    ids=["required", "named", "auto"],
)
def test_tool_calls_match_colocated(pdd_cluster, colocated, tool_choice):
    """Two prompts, each asked of PDD and of the co-located server, streamed and not, one
    request at a time: sent together, either server's answer sometimes ends its whitespace
    padding at another id (the same alternative answer seen from PDD in one run and from the
    co-located server in another: which requests share a batch decides it, not the handoff)."""
    bodies = [
        {
            "messages": [{"role": "user", "content": prompt}],
            "tools": [CITY, CLOCK],
            "tool_choice": tool_choice,
            # The random model pads its JSON with whitespace: a call takes ~300 ids.
            "max_tokens": 400,
            "temperature": 0,
        }
        # Prompts whose call ends within max_tokens (most pad it with whitespace past 400 ids).
        for prompt in ("weather please", "clock")
    ]
    answers = [
        (
            _chat(pdd_cluster.router_url, body),
            _chat(colocated.url, body),
            _streamed(pdd_cluster.router_url, body),
            _streamed(colocated.url, body),
        )
        for body in bodies
    ]
    forced, handed_off = 0, 0
    for got, plain, streamed, plain_streamed in answers:
        assert _answer(got) == _answer(plain)
        assert streamed == plain_streamed
        forced += bool(plain_streamed[1])
        record = got.json()["pdd"]
        handed_off += record["relay_tokens"] > 0 and record["finished_on"] == "main"
    assert handed_off >= 1  # the grammar crossed a handoff
    if tool_choice != "auto":  # the grammar is in force in the reference: a call every time
        assert forced == 2


def test_tools_are_refused_where_they_are_not_served(pdd_cluster):
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [CITY], "max_tokens": 4}
    completion = requests.post(
        pdd_cluster.router_url + "/v1/completions",
        json={"prompt": "hi", "tools": [CITY], "max_tokens": 4},
        timeout=60,
    )
    assert completion.status_code == 400 and "tools" in completion.json()["message"]
    missing = _chat(
        pdd_cluster.router_url,
        {**body, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
    )
    assert missing.status_code == 400 and "Tool 'nope' not found" in missing.json()["message"]
