"""Sampling state carried across the handoff: penalties, min_new_tokens, logit_bias, stop
strings that start before it. Greedy output through PDD equals the co-located server's, with the
handoff placed at chosen points."""

from __future__ import annotations

import json

import pytest
import requests

from sglang_pdd.testbed.client import generate, generate_all, wait_router_settled
from sglang_pdd.testbed.held_links import generate_with_handoff_at
from tests.e2e.prompts import varied_prompts

pytestmark = pytest.mark.servers
BUDGET = 64
HANDOFF_POINTS = (1, 4, 6, 9, 13)  # ids RLD streams before MD takes over, cycled


def _greedy(prompt: str, **extra) -> dict:
    sampling = {"temperature": 0.0, "max_new_tokens": BUDGET, "ignore_eos": True, **extra}
    return {"text": prompt, "sampling_params": sampling}


def _case(name: str, prompt: str, plain: list[int], at: int, tokenizer) -> dict:
    """The request for ``name``, built from the prompt's plain greedy output so that the
    option changes tokens after the handoff at ``at``."""
    if name == "frequency":
        return _greedy(prompt, frequency_penalty=0.6)
    if name == "presence":
        return _greedy(prompt, presence_penalty=0.8)
    if name == "repetition":
        return _greedy(prompt, repetition_penalty=1.3)
    if name == "logit_bias":  # forbid a token the plain answer uses after the handoff
        return _greedy(prompt, logit_bias={str(plain[at + 2]): -100.0, str(plain[0]): 3.0})
    if name == "min_new_tokens":
        # Without the minimum the request would stop at plain[at + 2], past the handoff and
        # before the minimum: MD must count the handed-off ids to mask it for the right span.
        return _greedy(
            prompt, ignore_eos=False, stop_token_ids=[plain[at + 2]], min_new_tokens=at + 6
        )
    if name == "stop_straddle":  # a stop string made of the text on both sides of the handoff
        return _greedy(prompt, stop=[_straddling_stop(plain, at, tokenizer)])
    raise ValueError(name)


def _straddling_stop(plain: list[int], at: int, tokenizer) -> str:
    """Text from 2 characters before the handoff to at least 12 ids past it (so that RLD's
    chunk crossing the handoff point, which may carry several ids, seldom finishes the request
    already), occurring first there."""
    full = tokenizer.decode(plain)
    start = max(len(tokenizer.decode(plain[:at])) - 2, 0)
    for end in range(len(tokenizer.decode(plain[: at + 12])) + 1, len(full) + 1):
        if full.find(full[start:end]) == start:
            return full[start:end]
    raise AssertionError(f"no stop string straddles id {at} of {plain}")


CASES = ("frequency", "presence", "repetition", "logit_bias", "min_new_tokens", "stop_straddle")


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_sampling_state_carried_across_one_shot_handoffs(
    held_router, held_links, colocated, pdd_cluster, tokenizer
):
    """24 requests: each option on 4 prompts, handoffs after 1 to 16 ids, streamed or not."""
    bites = {name: 0 for name in CASES}
    prompts = varied_prompts(4, seed=29)
    plains = [r.output_ids for r in generate_all(colocated.url, [_greedy(p) for p in prompts])]
    cases = []  # (name, handoff point, streamed, body, the plain answer): references in one batch
    for i, (prompt, plain) in enumerate(zip(prompts, plains, strict=True)):
        for j, name in enumerate(CASES):
            at = HANDOFF_POINTS[(i + j) % len(HANDOFF_POINTS)]
            if name == "stop_straddle":  # past RLD's first chunks, which may merge many ids
                at = max(at, 16)
            body = _case(name, prompt, plain, at, tokenizer)
            cases.append((name, at, (i + j) % 2 == 1, body, plain))
    references = generate_all(colocated.url, [case[3] for case in cases])
    for (name, at, stream, body, plain), expected in zip(cases, references, strict=True):
        assert expected.status == 200, expected.body
        bites[name] += expected.output_ids != plain
        got = generate_with_handoff_at(
            held_router.url,
            held_links,
            body,
            stream=stream,
            relay_tokens=at,
            may_end_on_relay=name == "stop_straddle",
        )
        assert got.status == 200, got.body
        record = got.body["meta_info"]["pdd"]
        if record["finished_on"] == "main":
            assert record["handoff_tokens"] >= at, record
        else:
            # SGLang holds back streamed output while its tail matches the start of a stop
            # string, so the router never sees (nor hands off) ids inside a stop string: a
            # stop string that starts before the handoff point ends the request on RLD.
            assert name == "stop_straddle", record
        assert got.output_ids == expected.output_ids, (name, at, record)
        assert got.body["text"] == expected.body["text"], (name, at)
        reason = got.body["meta_info"]["finish_reason"]
        assert reason == expected.body["meta_info"]["finish_reason"], (name, reason)
    # Every option changed the answer somewhere: the parity above is not parity by default.
    assert all(bites.values()), bites
    wait_router_settled(held_router.url)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_penalties_carried_across_catch_up(catchup_router, held_links, colocated, stream):
    """150 ids behind, Catch-Up chunks while RLD streams on: penalties still count every id."""
    prompt = varied_prompts(1, seed=37)[0]
    plain_sampling = {"temperature": 0.0, "max_new_tokens": 300, "ignore_eos": True}
    sampling = {
        **plain_sampling,
        "frequency_penalty": 0.3,
        "presence_penalty": 0.2,
        "repetition_penalty": 1.1,
        "logit_bias": {"11": -2.0},
    }
    body = {"text": prompt, "sampling_params": sampling}
    expected = generate(colocated.url, body)
    plain = generate(colocated.url, {"text": prompt, "sampling_params": plain_sampling})
    assert expected.output_ids != plain.output_ids
    got = generate_with_handoff_at(
        catchup_router.url, held_links, body, stream=stream, relay_tokens=150, relay_more=100
    )
    assert got.status == 200, got.body
    record = got.body["meta_info"]["pdd"]
    assert (record["handoff_mode"], record["finished_on"]) == ("catch-up", "main"), record
    assert record["handoff_chunks"] >= 3, record
    assert got.output_ids == expected.output_ids


def test_openai_penalties_and_logit_bias_match_colocated(pdd_cluster, colocated):
    for prompt in varied_prompts(3, seed=41):
        body = {
            "prompt": prompt,
            "max_tokens": 60,
            "temperature": 0,
            "frequency_penalty": 0.5,
            "presence_penalty": 0.4,
            "min_tokens": 10,
            "logit_bias": {"9": -50},
        }
        ours = requests.post(pdd_cluster.router_url + "/v1/completions", json=body, timeout=300)
        theirs = requests.post(colocated.url + "/v1/completions", json=body, timeout=300)
        assert ours.status_code == 200, ours.text
        assert ours.json()["choices"][0]["text"] == theirs.json()["choices"][0]["text"]


PERSON_REGEX = r'\{"name": "[a-z]{2,12}", "age": [1-9][0-9]?\}'
PERSON_SCHEMA = json.dumps(
    {
        "type": "object",
        "required": ["name", "age"],
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    }
)


def _constrained_handoff(router, links, colocated, prompt, constraint, at, stream, budget):
    """(the co-located answer, PDD's with the handoff after ``at`` ids) to one greedy prompt
    under ``constraint``; PDD's must equal the co-located one, id for id and in text."""
    body = {
        "text": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": budget, **constraint},
    }
    expected = generate(colocated.url, body)
    got = generate_with_handoff_at(
        router.url, links, body, stream=stream, relay_tokens=at, may_end_on_relay=True
    )
    assert got.status == 200, got.body
    assert got.output_ids == expected.output_ids, (constraint, at)
    assert got.body["text"] == expected.body["text"]
    return expected, got


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_grammars_carried_across_one_shot_handoffs(held_router, held_links, colocated, stream):
    """The handoff lands inside regex- and JSON-schema-constrained output; MD's grammar has
    advanced over the handed-off ids, so the output equals the co-located server's."""
    on_main = 0
    for i, prompt in enumerate(varied_prompts(3, seed=83)):
        for constraint, at in (
            ({"regex": PERSON_REGEX}, (1, 3, 6)[i]),
            ({"json_schema": PERSON_SCHEMA}, (4, 12, 25)[i]),
        ):
            expected, got = _constrained_handoff(
                held_router, held_links, colocated, prompt, constraint, at, stream, budget=48
            )
            record = got.body["meta_info"]["pdd"]
            if record["finished_on"] == "main":
                on_main += 1
                assert record["handoff_tokens"] >= at
            if "regex" in constraint:  # a finite pattern: the answer completes and parses
                assert got.body["meta_info"]["finish_reason"]["type"] == "stop"
                assert json.loads(got.body["text"])["age"] >= 1
    assert on_main >= 3, on_main  # most handoffs landed inside the structured output


def test_grammar_carried_across_catch_up(catchup_router, held_links, colocated):
    body = {
        "text": varied_prompts(1, seed=89)[0],
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": 300,
            "regex": r"([a-z]+ ){200,400}[a-z]+\.",
        },
    }
    expected = generate(colocated.url, body)
    got = generate_with_handoff_at(
        catchup_router.url, held_links, body, stream=True, relay_tokens=150, relay_more=100
    )
    assert got.body["meta_info"]["pdd"]["handoff_mode"] == "catch-up"
    assert got.output_ids == expected.output_ids


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_seeded_sampling_across_handoffs(
    held_router, catchup_router, held_links, colocated, stream
):
    """temperature 0.8, top_p 0.9 and a sampling_seed: every instance runs SGLang's seeded
    sampler (--pdd-seeded-sampling), so PDD draws the co-located server's tokens, in One-Shot
    and Catch-Up; another seed draws other tokens."""
    prompts = varied_prompts(3, seed=97)
    for i, prompt in enumerate(prompts):
        sampling = {
            "temperature": 0.8,
            "top_p": 0.9,
            "sampling_seed": 1234 + i,
            "max_new_tokens": 200 if i < 2 else 300,
            "ignore_eos": True,
        }
        body = {"text": prompt, "sampling_params": sampling}
        expected = generate(colocated.url, body)
        assert expected.output_ids == generate(colocated.url, body).output_ids  # reproducible
        other = {**body, "sampling_params": {**sampling, "sampling_seed": 99 + i}}
        assert generate(colocated.url, other).output_ids != expected.output_ids
        if i < 2:
            got = generate_with_handoff_at(
                held_router.url, held_links, body, stream=stream, relay_tokens=(3, 40)[i]
            )
        else:
            got = generate_with_handoff_at(
                catchup_router.url,
                held_links,
                body,
                stream=stream,
                relay_tokens=150,
                relay_more=100,
            )
        assert got.body["meta_info"]["pdd"]["finished_on"] == "main", got.body["meta_info"]
        assert got.output_ids == expected.output_ids, i


PERSON_EBNF = r"""root ::= "(" word ("," " " word)* ")"
word ::= [a-z] [a-z]*"""
PERSON_TAG = json.dumps(
    {
        "type": "structural_tag",
        "format": {
            "type": "sequence",
            "elements": [
                {"type": "const_string", "value": "<person>"},
                {"type": "json_schema", "json_schema": json.loads(PERSON_SCHEMA)},
                {"type": "const_string", "value": "</person>"},
            ],
        },
    }
)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_ebnf_and_structural_tags_carried_across_one_shot_handoffs(
    held_router, held_links, colocated, stream
):
    """The handoff lands inside EBNF- and structural-tag-constrained output (the tag's format
    applies from the first id); MD's xgrammar matcher has advanced over the handed-off ids."""
    on_main = 0
    for i, prompt in enumerate(varied_prompts(2, seed=85)):
        for constraint, at in (
            ({"ebnf": PERSON_EBNF}, (2, 9)[i]),
            ({"structural_tag": PERSON_TAG}, (5, 14)[i]),
        ):
            expected, got = _constrained_handoff(
                held_router, held_links, colocated, prompt, constraint, at, stream, budget=40
            )
            assert expected.status == 200, expected.body
            # the grammar is in force in the reference
            opening = "<person>" if "structural_tag" in constraint else "("
            assert expected.body["text"].startswith(opening), expected.body["text"]
            if got.body["meta_info"]["pdd"]["finished_on"] == "main":
                on_main += 1
    assert on_main >= 2, on_main


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_openai_response_format_matches_colocated(pdd_cluster, colocated, kind):
    """OpenAI structured output (``response_format`` json_schema and json_object) through the
    router equals SGLang's own OpenAI server's answer, across P-RLD-MD."""
    formats = (
        {
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": json.loads(PERSON_SCHEMA)},
        },
        {"type": "json_object"},
    )
    for prompt, response_format in zip(varied_prompts(2, seed=87), formats, strict=True):
        body = {"max_tokens": 40, "temperature": 0, "response_format": response_format}
        if kind == "chat":
            path, body = (
                "/v1/chat/completions",
                {**body, "messages": [{"role": "user", "content": prompt}]},
            )
        else:
            path, body = "/v1/completions", {**body, "prompt": prompt}
        ours = requests.post(pdd_cluster.router_url + path, json=body, timeout=300)
        theirs = requests.post(colocated.url + path, json=body, timeout=300)
        assert ours.status_code == 200, ours.text
        assert theirs.status_code == 200, theirs.text
        text = lambda r: r.json()["choices"][0]["message" if kind == "chat" else "text"]  # noqa: E731
        ours_text, theirs_text = text(ours), text(theirs)
        if kind == "chat":
            ours_text, theirs_text = ours_text["content"], theirs_text["content"]
        assert ours_text == theirs_text
        assert theirs_text.lstrip().startswith("{"), theirs_text  # the constraint is in force
