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
"""

from __future__ import annotations

import pytest

from sglang_pdd.testbed.chat_templates import FAMILIES
from sglang_pdd.testbed.launcher import ServerSpec
from tests.e2e.chat_parity import both, dumps
from tests.e2e.conftest import DTYPE
from tests.e2e.test_chat_parity import CASES as AGENT_CASES
from tests.e2e.test_chat_parity import TOOLS

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
# family -> stream -> names of the cases whose answers held tool calls (the module's record).
CALLS_SEEN: dict[str, dict[bool, list[str]]] = {}


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def family(request, server_group, pdd_cluster, tiny_model, tmp_path_factory):
    """(name, router URL, reference URL) of one family: its reference server and its router,
    stopped when the family's tests end (one family's servers at a time)."""
    from sglang_pdd.testbed.cluster import start_router
    from sglang_pdd.testbed.tiny_model import write_chat_variant

    name = request.param
    parser = FAMILIES[name][1]
    model = write_chat_variant(tiny_model, tmp_path_factory.mktemp("family") / name, name)
    reference, router = f"colocated-{name}", f"router-{name}"
    spec = ServerSpec(
        reference,
        model_path=str(model),
        dtype=DTYPE,
        chunked_prefill_size=512,
        extra_args=("--pdd-seeded-sampling", "--tool-call-parser", parser),
    )
    served = server_group.start(spec)[0]
    routed = start_router(
        server_group, pdd_cluster, name=router, tool_call_parser=parser, tokenizer_path=model
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
    for case_name, case in CASES.items():
        body = {**case, "max_tokens": 48, "temperature": 0}
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
    print(f"{name} ({'stream' if stream else 'whole'}): tool calls in {seen}")
