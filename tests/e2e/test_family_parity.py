"""Agent conversations through PDD equal SGLang's own OpenAI server's for other model families'
chat templates and tool-call parsers (``llama3``, ``mistral``, ``deepseekv3``, ``qwen25``).

Each family is the session's tiny model copied with that family's template
(``sglang-pdd tiny-model --base --chat-template``: same weights and vocabulary, so the session
cluster's P, RLD and MD serve its ids). Its reference is a co-located server of that copy with
the family's ``--tool-call-parser``; its router runs on the session cluster with the same parser
and the copy as ``--tokenizer-path`` (the router renders the prompt with that tokenizer's
template). One family's reference at a time: each stops when its tests end. The cases are
test_chat_parity's (tool results with content null, parallel calls, multi-part contents, a long
history, a named choice after results) and a first turn under each tool choice and under a
response format. With ``tool_choice`` required or named SGLang constrains the answer to the
parser's format; whether a random model's constrained answer completes a call within the budget
(JSON lets it pad with whitespace) is recorded, not asserted: ``-s`` prints the cases whose
answers held calls.

Two families also run a reasoning parser on both sides, one whose thinking is off unless a
request asks (so the cases above are unchanged): ``deepseekv3`` ``--reasoning-parser
deepseek-v3`` (qwen3's tags, on with ``chat_template_kwargs`` thinking) and ``mistral``
``--reasoning-parser mistral`` (``[THINK]`` tags, on with ``reasoning_effort``). Their cases add
thinking on (the reasoning separated, kept in the content, beside tools) and a regex-written
thought split at its tags with thinking off.

Then test_chat_parity's generated corpus (``conversations()``) per family: 25 conversations each
(derandomized, the same for every family), streamed or not, a reasoning family's under a drawn
thinking switch; 100 in all."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sglang_pdd.testbed.chat_templates import FAMILIES
from sglang_pdd.testbed.launcher import ServerSpec
from tests.e2e.chat_parity import both, dumps
from tests.e2e.conftest import DTYPE
from tests.e2e.test_chat_parity import CASES as AGENT_CASES
from tests.e2e.test_chat_parity import TOOLS, conversations

FAMILY_NAMES = ("llama3", "mistral", "deepseekv3", "qwen25")
QUESTION = [{"role": "user", "content": "Weather in Rome?"}]
CASES = {
    **AGENT_CASES,
    "required": {"messages": QUESTION, "tools": TOOLS, "tool_choice": "required"},
    "named": {
        "messages": QUESTION,
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    },
    "auto": {"messages": QUESTION, "tools": TOOLS, "tool_choice": "auto"},
    "single-call": {
        "messages": QUESTION,
        "tools": TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,
    },
    "response-format": {
        "messages": QUESTION,
        "response_format": {
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
    },
}


@dataclass(frozen=True)
class Reasoning:
    """A family's reasoning parser: its name, the request fields that turn thinking on and off
    (off is also its default) and its tags."""

    parser: str
    on: dict
    off: dict
    tags: tuple[str, str]

    def thought(self) -> str:
        """A regex of a thought in the tags, then an answer."""
        start, end = (re.escape(t) for t in self.tags)
        return f"{start}[a-z]{{3,8}}( [a-z]{{3,8}}){{6,14}}{end}[a-z]{{3,8}}( [a-z]{{3,8}}){{4,12}}"

    def cases(self) -> dict[str, dict]:
        """Thinking on, the whole answer is reasoning (the tiny model never writes the closing
        tag): separated, kept in the content, beside tools. Thinking off, a regex writes both
        tags (no grammar while thinking: the router refuses it, see test_reasoning_parity) and
        the parser splits there, or keeps it whole."""
        ask = {"messages": QUESTION}
        return {
            "thinking": {**ask, **self.on},
            "thinking-kept": {**ask, **self.on, "separate_reasoning": False},
            "thinking-tools": {**ask, **self.on, "tools": TOOLS, "tool_choice": "auto"},
            "thought-split": {**ask, **self.off, "regex": self.thought()},
            "thought-kept": {**ask, "regex": self.thought(), "separate_reasoning": False},
        }


# family -> its --reasoning-parser, for those served with one: parsers whose thinking is off
# unless a request asks, so the cases above run as without them. deepseek-v3 (DeepSeek-V3.1's):
# qwen3's tags, on with chat_template_kwargs thinking; mistral (Magistral's): [THINK] tags, on
# with a reasoning_effort other than none.
REASONING = {
    "deepseekv3": Reasoning(
        "deepseek-v3",
        on={"chat_template_kwargs": {"thinking": True}},
        off={"chat_template_kwargs": {"thinking": False}},
        tags=("<think>", "</think>"),
    ),
    "mistral": Reasoning(
        "mistral",
        on={"reasoning_effort": "high"},
        off={"reasoning_effort": "none"},
        tags=("[THINK]", "[/THINK]"),
    ),
}
# Generated conversations per family (test_chat_parity's corpus, derandomized: each family gets
# the same ones).
GENERATED_PER_FAMILY = 25
# family -> stream -> names of the cases whose answers held tool calls (the module's record).
CALLS_SEEN: dict[str, dict[bool, list[str]]] = {}


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def family(request, server_group, pdd_cluster, tiny_model, tmp_path_factory):
    """(name, router URL, reference URL) of one family: its reference server and its router
    (with the family's reasoning parser, if any), stopped when the family's tests end (one
    family's servers at a time)."""
    from sglang_pdd.testbed.cluster import start_router
    from sglang_pdd.testbed.tiny_model import write_chat_variant

    name = request.param
    parser = FAMILIES[name][1]
    model = write_chat_variant(tiny_model, tmp_path_factory.mktemp("family") / name, name)
    reasoning = REASONING[name].parser if name in REASONING else None
    reference, router = f"colocated-{name}", f"router-{name}"
    extra = ("--pdd-seeded-sampling", "--tool-call-parser", parser)
    if reasoning:
        extra += ("--reasoning-parser", reasoning)
    spec = ServerSpec(
        reference, model_path=str(model), dtype=DTYPE, chunked_prefill_size=512, extra_args=extra
    )
    served = server_group.start(spec)[0]
    routed = start_router(
        server_group,
        pdd_cluster,
        name=router,
        tool_call_parser=parser,
        reasoning_parser=reasoning,
        tokenizer_path=model,
    )
    yield name, routed.url, served.url
    server_group.stop_named(router, reference)


def _calls(answer: dict, stream: bool) -> int:
    if stream:
        return sum(len(c["calls"]) for c in answer["choices"].values())
    return sum(len(c["message"].get("tool_calls") or []) for c in answer["answer"]["choices"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_family_agent_turns_match_colocated(family, stream):
    """Each case through the family's router (P-RLD-MD) equals its reference: every field
    but ids and time (whole), or content, calls, finish and usage (streamed)."""
    name, router, reference = family
    seen = CALLS_SEEN.setdefault(name, {}).setdefault(stream, [])
    thinking = REASONING[name].cases() if name in REASONING else {}
    split, counted = [], []  # thinking cases whose reasoning the parser split off, or counted
    for case_name, case in {**CASES, **thinking}.items():
        # a thought's budget: long enough for the regex to close it
        body = {**case, "max_tokens": 96 if case_name in thinking else 48, "temperature": 0}
        if stream:
            body["stream_options"] = {"include_usage": True}
        got, want = both(router, reference, body, stream)
        assert want["status"] == 200, (name, case_name, want)
        assert got == want, (
            f"{name} {case_name}: request {dumps(body)}\nrouter {dumps(got)}\n"
            f"reference {dumps(want)}"
        )
        if _calls(want, stream):
            seen.append(case_name)
        if case_name in thinking:
            if _reasoning(got, stream):
                split.append(case_name)
            usage = got["usages"][-1] if stream else got["answer"]["usage"]
            if usage["reasoning_tokens"]:
                counted.append(case_name)
    print(f"{name} ({'stream' if stream else 'whole'}): tool calls in {seen}")
    if thinking:  # the reasoning cases compare split reasoning, not plain text only
        assert split and counted, (name, split, counted)


def _reasoning(answer: dict, stream: bool) -> bool:
    if stream:
        return any(c["reasoning"] for c in answer["choices"].values())
    return any(c["message"].get("reasoning_content") for c in answer["answer"]["choices"])


# The thinking switches a reasoning family's generated conversations get: none, on, on with
# the reasoning kept in the content, off.
SWITCHES = ["none", "on", "on-kept", "off"]


def _may_hold_grammar(body: dict) -> bool:
    """Whether SGLang may constrain ``body``'s answer: a response format, or tools under a
    tool choice other than none (required, named, or auto held to the parser's tag)."""
    return bool(body.get("response_format")) or bool(
        body.get("tools") and body.get("tool_choice") != "none"
    )


@settings(
    max_examples=GENERATED_PER_FAMILY,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=conversations(), stream=st.booleans(), switch=st.sampled_from(SWITCHES))
def test_family_generated_conversations_match_colocated(family, body, stream, switch):
    """Each generated conversation (tools get_weather and get_time, tool choices, response
    formats; a reasoning family's also a thinking switch) gets the same answer, or the same
    refusal, from the family's router and from its reference. One exception, asserted: the
    router refuses a grammar while thinking (test_reasoning_parity), naming it."""
    name, router, reference = family
    if name in REASONING and switch != "none":
        reasoning = REASONING[name]
        body = {**body, **(reasoning.off if switch == "off" else reasoning.on)}
        if switch == "on-kept":
            body["separate_reasoning"] = False
    if stream:
        body = {**body, "stream_options": {"include_usage": True}}
    got, want = both(router, reference, body, stream)
    if got["status"] == 400 and "require_reasoning" in got["message"]:
        event(f"{name} refused: a grammar while thinking")
        assert switch.startswith("on") and _may_hold_grammar(body), (
            f"{name}: request {dumps(body)}\nrouter {dumps(got)}\nreference {dumps(want)}"
        )
        return
    event(f"{name} status {want['status']}")
    assert got == want, (
        f"{name}: request {dumps(body)}\nrouter {dumps(got)}\nreference {dumps(want)}"
    )
