"""Batched /generate and n > 1 through PDD: several independent PDD requests merged back in
SGLang's order and shape, equal to the co-located server."""

from __future__ import annotations

import pytest
import requests

from sglang_pdd.testbed.client import iter_sse
from tests.e2e.prompts import varied_prompts

pytestmark = pytest.mark.servers
SAMPLING = {"temperature": 0.0, "max_new_tokens": 24, "ignore_eos": True}


def _post(url: str, path: str, body: dict, stream: bool = False):
    resp = requests.post(url + path, json={**body, "stream": stream}, timeout=300, stream=stream)
    assert resp.status_code == 200, resp.text
    return list(iter_sse(resp)) if stream else resp.json()


def _streamed_outputs(chunks: list) -> dict[int, list[int]]:
    """The final cumulative output_ids of each index of a streamed batch."""
    last: dict[int, list[int]] = {}
    for chunk in chunks:
        last[chunk["index"]] = chunk["output_ids"]
    return last


def test_batched_generate_with_n_matches_colocated(pdd_cluster, colocated):
    prompts = varied_prompts(3, seed=67)
    body = {"text": prompts, "sampling_params": {**SAMPLING, "n": 2}}
    want = _post(colocated.url, "/generate", body)
    got = _post(pdd_cluster.router_url, "/generate", body)
    assert isinstance(got, list) and len(got) == len(want) == 6
    assert [g["output_ids"] for g in got] == [w["output_ids"] for w in want]
    assert [g["text"] for g in got] == [w["text"] for w in want]
    assert {g["meta_info"]["pdd"]["pipeline"] for g in got} <= {"P-RLD-MD", "P-MD", "P-RLD"}
    streamed = _streamed_outputs(_post(pdd_cluster.router_url, "/generate", body, stream=True))
    assert [streamed[i] for i in range(6)] == [w["output_ids"] for w in want]


def test_batch_of_input_ids_and_a_single_prompt_with_n(pdd_cluster, colocated):
    ids = [[5, 17, 33, 2], [9, 9, 41]]
    body = {"input_ids": ids, "sampling_params": SAMPLING}
    want = [w["output_ids"] for w in _post(colocated.url, "/generate", body)]
    assert [g["output_ids"] for g in _post(pdd_cluster.router_url, "/generate", body)] == want
    one = {"text": varied_prompts(1, seed=71)[0], "sampling_params": {**SAMPLING, "n": 3}}
    want = [w["output_ids"] for w in _post(colocated.url, "/generate", one)]
    got = _post(pdd_cluster.router_url, "/generate", one)
    assert len(got) == 3 and [g["output_ids"] for g in got] == want


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_openai_n_matches_colocated(pdd_cluster, colocated, kind):
    prompt = varied_prompts(1, seed=73)[0]
    if kind == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    else:
        path, body = "/v1/completions", {"prompt": prompt}
    body.update(max_tokens=20, temperature=0, n=2)

    def texts(answer):
        key = "message" if kind == "chat" else None
        return [c[key]["content"] if key else c["text"] for c in answer["choices"]]

    want = _post(colocated.url, path, body)
    got = _post(pdd_cluster.router_url, path, body)
    assert [c["index"] for c in got["choices"]] == [0, 1]
    assert texts(got) == texts(want)
    assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"]
    pieces: dict[int, str] = {0: "", 1: ""}
    for chunk in _post(pdd_cluster.router_url, path, body, stream=True):
        for choice in chunk.get("choices", []):
            part = choice["delta"].get("content") if kind == "chat" else choice["text"]
            pieces[choice["index"]] += part or ""
    assert [pieces[0], pieces[1]] == texts(want)
