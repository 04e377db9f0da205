"""Helpers of the chat parity tests: send one chat to a server, streamed or not, and put its
answer in a form two servers' answers compare in (what is random or the router's own left
out: ids, timestamps, call ids, the PDD record)."""

from __future__ import annotations

import json

import requests

from sglang_pdd.testbed.client import iter_sse

# Fields of an answer that differ between any two servers (or runs) by design.
_RANDOM = ("id", "created", "pdd", "metadata")


def whole(url: str, body: dict) -> dict:
    """A non-streamed chat: {"status", "answer"} (the answer without random fields, call ids
    checked and replaced by their index) or {"status", "message"} for an error."""
    resp = requests.post(url + "/v1/chat/completions", json={**body, "stream": False}, timeout=300)
    data = resp.json()
    if resp.status_code != 200:
        return {"status": resp.status_code, "message": _message(data)}
    for key in _RANDOM:
        data.pop(key, None)
    for choice in data["choices"]:
        for i, call in enumerate(choice["message"].get("tool_calls") or []):
            assert call.pop("id").startswith("call_"), call
            call["seen_at"] = i
    return {"status": 200, "answer": data}


def streamed(url: str, body: dict) -> dict:
    """A streamed chat put together per choice: content, reasoning, each call's name and
    arguments (its first delta has its id and name, later ones pieces of its arguments),
    finish reason and matched stop; the usage chunks; or an error's status and message."""
    with requests.post(
        url + "/v1/chat/completions", json={**body, "stream": True}, stream=True, timeout=300
    ) as resp:
        if resp.status_code != 200:
            return {"status": resp.status_code, "message": _message(resp.json())}
        choices: dict[int, dict] = {}
        usages, usage_on_deltas, errors = [], 0, []
        for chunk in iter_sse(resp):
            if "error" in chunk:
                errors.append(chunk["error"].get("message"))
                continue
            if not chunk["choices"]:
                usages.append(chunk.get("usage"))
                continue
            usage_on_deltas += chunk.get("usage") is not None
            for choice in chunk["choices"]:
                got = choices.setdefault(
                    choice["index"],
                    {"content": "", "reasoning": "", "calls": {}, "finish": None, "matched": None},
                )
                delta = choice.get("delta") or {}
                got["content"] += delta.get("content") or ""
                got["reasoning"] += delta.get("reasoning_content") or ""
                for call in delta.get("tool_calls") or []:
                    entry = got["calls"].setdefault(call["index"], {"name": None, "args": ""})
                    if call["function"].get("name"):
                        assert call["id"].startswith("call_") and entry["name"] is None
                        entry["name"] = call["function"]["name"]
                    entry["args"] += call["function"].get("arguments") or ""
                if choice.get("finish_reason"):
                    got["finish"] = choice["finish_reason"]
                    got["matched"] = choice.get("matched_stop")
    return {
        "status": 200,
        "choices": choices,
        "usages": usages,
        "usage_on_deltas": usage_on_deltas > 0,
        "errors": errors,
    }


def _message(data) -> str:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data["error"].get("message")
    return data.get("message") if isinstance(data, dict) else str(data)


def both(router: str, reference: str, body: dict, stream: bool):
    """The router's and the reference server's answers to ``body``."""
    ask = streamed if stream else whole
    return ask(router, body), ask(reference, body)


def dumps(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True)[:4000]
