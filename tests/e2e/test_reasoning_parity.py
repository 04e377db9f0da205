"""Reasoning through PDD equals SGLang's own OpenAI server's: a router and a co-located
reference both started with ``--reasoning-parser qwen3`` (and ``--tool-call-parser qwen25``)
give the same ``reasoning_content`` and ``content``, streamed or not, handed off or not, with
``separate_reasoning`` on and off and the template's thinking switch either way.

The tiny model never writes ``</think>`` by chance, so the split cases constrain the answer
with a ``regex`` to "<think>...</think>..." (SGLang's grammar, greedy) with thinking off: the
parser then splits at the tags, on a handoff's both sides. With thinking on, SGLang's reasoner
grammar lets the reasoning run free before a grammar applies, a switch the router does not
carry to the instances: such a request is refused with a 400 naming it."""

from __future__ import annotations

import pytest

from sglang_pdd.testbed.launcher import ServerSpec
from tests.e2e.chat_parity import both, dumps
from tests.e2e.conftest import DTYPE

PARSERS = ("--tool-call-parser", "qwen25", "--reasoning-parser", "qwen3")
THOUGHT = "<think>[a-z]{3,8}( [a-z]{3,8}){6,14}</think>[a-z]{3,8}( [a-z]{3,8}){4,12}"
USER = [{"role": "user", "content": "Think, then answer: what is the weather?"}]

THINKING_OFF = {"enable_thinking": False}
CASES = {
    "thought-then-answer": {
        "messages": USER,
        "regex": THOUGHT,
        "chat_template_kwargs": THINKING_OFF,
    },
    "kept-in-content": {
        "messages": USER,
        "regex": THOUGHT,
        "chat_template_kwargs": THINKING_OFF,
        "separate_reasoning": False,
    },
    # No closing tag: the parser decides alone what is reasoning (all of it with thinking on,
    # none with it off).
    "free-text": {"messages": USER},
    "free-text-thinking-off": {"messages": USER, "chat_template_kwargs": THINKING_OFF},
}


@pytest.fixture(scope="module")
def reasoning_colocated(server_group, tiny_model):
    """A co-located server that separates reasoning (the reference of this module)."""
    spec = ServerSpec(
        "colocated-reasoning",
        model_path=str(tiny_model),
        dtype=DTYPE,
        chunked_prefill_size=512,
        extra_args=("--pdd-seeded-sampling", *PARSERS),
    )
    yield server_group.start(spec)[0]
    server_group.stop_named("colocated-reasoning")


@pytest.fixture(scope="module")
def reasoning_routers(server_group, pdd_cluster):
    """Two routers on the session cluster with the reference's parsers: every request
    P-RLD-MD (the cluster's objective), and every request P-MD."""
    from sglang_pdd.testbed.cluster import start_router

    relayed = start_router(
        server_group, pdd_cluster, name="router-reasoning", reasoning_parser="qwen3"
    )
    main_only = start_router(
        server_group,
        pdd_cluster,
        name="router-reasoning-p-md",
        reasoning_parser="qwen3",
        ttft_slo_s=1e9,
    )
    yield {"p-rld-md": relayed.url, "p-md": main_only.url}
    server_group.stop_named("router-reasoning", "router-reasoning-p-md")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("pipeline", ["p-rld-md", "p-md"])
def test_reasoning_matches_colocated(reasoning_routers, reasoning_colocated, pipeline, stream):
    seen_reasoning, counted = 0, 0
    for name, case in CASES.items():
        body = {**case, "max_tokens": 96, "temperature": 0}
        if stream:
            body["stream_options"] = {"include_usage": True}
        got, want = both(reasoning_routers[pipeline], reasoning_colocated.url, body, stream)
        assert got["status"] == 200, (name, got)
        assert got == want, f"{name}\nrouter {dumps(got)}\nreference {dumps(want)}"
        if stream:
            seen_reasoning += any(c["reasoning"] for c in got["choices"].values())
        else:
            message = got["answer"]["choices"][0]["message"]
            seen_reasoning += bool(message.get("reasoning_content"))
        usage = got["usages"][-1] if stream else got["answer"]["usage"]
        counted += bool(usage["reasoning_tokens"])
    # The parser split something off (else this module compares plain text only).
    assert seen_reasoning >= 1
    # ... and usage counted reasoning tokens (a thought forced open by the template)
    assert counted >= 1


def test_a_relayed_reasoning_answer_crosses_the_handoff(reasoning_routers, reasoning_colocated):
    """A long constrained answer is handed from RLD to MD mid-thought, and still equals the
    reference's split."""
    import requests

    long_thought = "<think>[a-z]{3,8}( [a-z]{3,8}){60,80}</think>[a-z]{3,8}( [a-z]{3,8}){20,30}"
    body = {
        "messages": USER,
        "regex": long_thought,
        "chat_template_kwargs": THINKING_OFF,
        "max_tokens": 400,
        "temperature": 0,
    }
    got, want = both(reasoning_routers["p-rld-md"], reasoning_colocated.url, body, stream=True)
    assert got == want, f"router {dumps(got)}\nreference {dumps(want)}"
    resp = requests.post(
        reasoning_routers["p-rld-md"] + "/v1/chat/completions", json=body, timeout=300
    )
    record = resp.json()["pdd"]
    assert record["relay_tokens"] > 0 and record["finished_on"] == "main", record


def test_a_grammar_while_thinking_is_refused_naming_it(reasoning_routers, reasoning_colocated):
    """SGLang serves a grammar while thinking (its reasoner grammar backend waits for the
    reasoning's end); the router cannot carry that switch, so it answers 400 naming it."""
    body = {"messages": USER, "regex": THOUGHT, "max_tokens": 32, "temperature": 0}
    for pipeline in ("p-rld-md", "p-md"):
        got, want = both(reasoning_routers[pipeline], reasoning_colocated.url, body, stream=False)
        assert want["status"] == 200, want
        assert got["status"] == 400 and "require_reasoning" in got["message"], got
