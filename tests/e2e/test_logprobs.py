"""Logprobs through PDD: each token's from the instance that produced it, equal to the
co-located server's within float32 rounding."""

from __future__ import annotations

import pytest
import requests

from sglang_pdd.testbed.client import generate, iter_sse
from sglang_pdd.testbed.held_links import generate_on_relay, generate_with_handoff_at
from tests.e2e.prompts import varied_prompts

pytestmark = pytest.mark.servers
TOLERANCE = 1e-4


def _body(prompt: str, budget: int) -> dict:
    return {
        "text": prompt,
        "return_logprob": True,
        "top_logprobs_num": 3,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": budget, "ignore_eos": True},
    }


def _assert_close(got: list, want: list) -> None:
    """Lists of SGLang ``(logprob, token_id, text)`` entries (or lists of them)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if w and isinstance(w[0], list):
            _assert_close(g, w)
            continue
        assert g[1] == w[1], (g, w)
        assert abs(g[0] - w[0]) <= TOLERANCE, (g, w)


def _assert_logprobs_match(got, expected) -> None:
    assert got.status == 200, got.body
    assert got.output_ids == expected.output_ids
    meta, want = got.body["meta_info"], expected.body["meta_info"]
    _assert_close(meta["output_token_logprobs"], want["output_token_logprobs"])
    _assert_close(meta["output_top_logprobs"], want["output_top_logprobs"])
    assert [entry[1] for entry in meta["output_token_logprobs"]] == got.output_ids


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_generate_logprobs_across_one_shot_handoffs(held_router, held_links, colocated, stream):
    for at, prompt in zip((1, 7, 20), varied_prompts(3, seed=47), strict=True):
        body = _body(prompt, 40)
        expected = generate(colocated.url, body)
        got = generate_with_handoff_at(
            held_router.url, held_links, body, stream=stream, relay_tokens=at
        )
        record = got.body["meta_info"]["pdd"]
        assert record["finished_on"] == "main" and record["handoff_tokens"] >= at, record
        _assert_logprobs_match(got, expected)


def test_generate_logprobs_across_catch_up(catchup_router, held_links, colocated):
    body = _body(varied_prompts(1, seed=53)[0], 300)
    expected = generate(colocated.url, body)
    got = generate_with_handoff_at(
        catchup_router.url, held_links, body, stream=True, relay_tokens=150, relay_more=100
    )
    assert got.body["meta_info"]["pdd"]["handoff_mode"] == "catch-up"
    _assert_logprobs_match(got, expected)


def test_generate_logprobs_on_one_instance(held_router, held_links, main_only_router, colocated):
    """P-RLD (RLD finishes) and P-MD (MD decodes everything)."""
    body = _body(varied_prompts(1, seed=59)[0], 24)
    expected = generate(colocated.url, body)
    on_relay = generate_on_relay(held_router.url, held_links, body, stream=False)
    assert on_relay.body["meta_info"]["pdd"]["finished_on"] == "relay"
    _assert_logprobs_match(on_relay, expected)
    on_main = generate(main_only_router.url, body)
    assert on_main.body["meta_info"]["pdd"]["pipeline"] == "P-MD"
    _assert_logprobs_match(on_main, expected)


def _openai(url: str, kind: str, body: dict, stream: bool) -> list:
    """The per-token logprob items of an OpenAI answer (completions: the flat lists zipped)."""
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    resp = requests.post(url + path, json={**body, "stream": stream}, timeout=300, stream=stream)
    assert resp.status_code == 200, resp.text
    choices = (
        [c["choices"][0] for c in iter_sse(resp) if c.get("choices")]
        if stream
        else [resp.json()["choices"][0]]
    )
    items = []
    for choice in choices:
        lp = choice.get("logprobs")
        if not lp:
            continue
        if kind == "chat":
            items += [
                (
                    i["token"],
                    i["bytes"],
                    i["logprob"],
                    [(t["token"], t["logprob"]) for t in i["top_logprobs"]],
                )
                for i in lp["content"]
            ]
        else:
            items += list(
                zip(
                    lp["tokens"],
                    lp["token_logprobs"],
                    [sorted(t.items()) for t in lp["top_logprobs"]],
                    strict=True,
                )
            )
    return items


def _close_items(got: list, want: list) -> None:
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            if isinstance(b, float):
                assert abs(a - b) <= TOLERANCE, (g, w)
            elif isinstance(b, list) and b and isinstance(b[0], tuple):
                assert [x[0] for x in a] == [x[0] for x in b], (g, w)
                assert all(abs(x[1] - y[1]) <= TOLERANCE for x, y in zip(a, b, strict=True))
            else:
                assert a == b, (g, w)


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_openai_logprobs_match_colocated(pdd_cluster, colocated, kind):
    prompt = varied_prompts(1, seed=61)[0]
    base = {"max_tokens": 30, "temperature": 0}
    if kind == "chat":
        body = {
            **base,
            "messages": [{"role": "user", "content": prompt}],
            "logprobs": True,
            "top_logprobs": 2,
        }
    else:
        body = {**base, "prompt": prompt, "logprobs": 2}
    want = _openai(colocated.url, kind, body, stream=False)
    for stream in (False, True):
        _close_items(_openai(pdd_cluster.router_url, kind, body, stream), want)


def test_openai_logprobs_are_validated(pdd_cluster):
    bad = {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}
    resp = requests.post(pdd_cluster.router_url + "/v1/chat/completions", json=bad, timeout=60)
    assert resp.status_code == 400 and "top_logprobs" in resp.text
    bad = {"prompt": "x", "logprobs": -1}
    resp = requests.post(pdd_cluster.router_url + "/v1/completions", json=bad, timeout=60)
    assert resp.status_code == 400 and "logprobs" in resp.text
