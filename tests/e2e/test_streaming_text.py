"""Streamed text through the router equals its non-streamed text and the co-located server's,
on both OpenAI endpoints, with the generated model's byte-level BPE tokenizer: the answers are
long enough to hold multi-byte characters split across tokens and bytes no character completes.
The /generate stream is checked in test_concurrency.py."""

from __future__ import annotations

import pytest
import requests

from sglang_pdd.testbed.client import iter_sse
from tests.e2e.prompts import varied_prompts

pytestmark = pytest.mark.servers


def _text(choice: dict, kind: str, streamed: bool) -> str:
    if kind == "completion":
        return choice.get("text") or ""
    part = choice["delta"] if streamed else choice["message"]
    return part.get("content") or ""


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_streamed_openai_text_equals_the_whole_answer(pdd_cluster, colocated, kind):
    prompt = varied_prompts(1, seed=81)[0]
    if kind == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    else:
        path, body = "/v1/completions", {"prompt": prompt}
    body.update(max_tokens=400, temperature=0)
    want = requests.post(colocated.url + path, json=body, timeout=300).json()
    got = requests.post(pdd_cluster.router_url + path, json=body, timeout=300).json()
    whole = _text(got["choices"][0], kind, streamed=False)
    assert whole == _text(want["choices"][0], kind, streamed=False)
    assert any(ord(c) > 127 for c in whole), "no multi-byte text: the test would prove nothing"
    with requests.post(
        pdd_cluster.router_url + path, json={**body, "stream": True}, timeout=300, stream=True
    ) as resp:
        assert resp.status_code == 200, resp.text
        pieces = [
            _text(c, kind, streamed=True)
            for chunk in iter_sse(resp)
            for c in chunk.get("choices", [])
        ]
    assert "".join(pieces) == whole
    assert len([p for p in pieces if p]) > 10  # really streamed in pieces
