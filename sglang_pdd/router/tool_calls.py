"""OpenAI tool calling (``tools``, ``tool_choice``, ``parallel_tool_calls``) through the router,
as SGLang's OpenAI server does it (``serving_chat.py``: ``_process_messages``,
``_process_tool_calls``; ``protocol.py``: ``to_sampling_params``), with SGLang's own request
model, function-call parser and grammar builders.

What the router does for a chat with tools: the tools go into the chat template; the sampling
parameters get SGLang's constraint for the ``tool_choice`` (a structural tag for ``required`` or a
named tool with a parser, a JSON-array schema without one) and ``skip_special_tokens`` false; the
answer's text is parsed into ``tool_calls``. The constraint is an ordinary xgrammar grammar, which
Main-Decode advances over the handed-off ids like any other (``main_decode/extend.py``).

Served: streamed and non-streamed answers, with the parsers ``router/config.py`` lists
(``TOOL_CALL_PARSERS``, tested against a co-located SGLang server) or none.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import orjson

from sglang_pdd.router.upstream import UpstreamError

# Fields of a chat request that are about tools.
TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")


def _bad(message: str) -> UpstreamError:
    body = {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
    return UpstreamError(400, body)


@dataclass
class ToolPlan:
    """What a chat request's tools change: ``template_tools`` for the chat template,
    ``constraint`` (SGLang sampling parameter name, value) and how the answer is parsed."""

    tools: list  # SGLang ``Tool`` objects (the parser takes them)
    tool_choice: object  # "auto" | "required" | SGLang ``ToolChoice``
    template_tools: list[dict] | None
    constraint: tuple[str, str] | None
    parser: str | None

    @property
    def required(self) -> bool:
        return self.tool_choice == "required" or not isinstance(self.tool_choice, str)


def plan_tools(body: dict, parser: str | None, tokenizer) -> ToolPlan | None:
    """The tools of a chat ``body`` (None when the request has none in force: no tools, or
    ``tool_choice`` "none"); a 400 for what SGLang refuses, naming the field."""
    for i, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict) and message.get("tools") is not None:
            # SGLang adds a system message's tools to the request's; not built here.
            raise _bad(f"messages[{i}].tools: tools inside messages are not served by the router")
    if not any(body.get(k) is not None for k in TOOL_FIELDS):
        return None
    # SGLang's request model: the same defaults (tool_choice "auto" once tools are given) and
    # the same 400s for malformed tools. Imported here: it takes seconds, and only tools need it.
    import pydantic
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, ToolChoice

    fields = {k: body[k] for k in TOOL_FIELDS if body.get(k) is not None}
    try:
        request = ChatCompletionRequest(
            model="m", messages=[{"role": "user", "content": ""}], **fields
        )
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise _bad(f"{where}: {first['msg']}") from exc
    choice = request.tool_choice
    _check(request, choice, ToolChoice)
    if not request.tools or choice == "none":
        return None
    if isinstance(choice, ToolChoice):
        template_tools = [
            t.model_dump() for t in request.tools if t.function.name == choice.function.name
        ] or None
    else:
        template_tools = [t.model_dump() for t in request.tools]
    constraint = _constraint(request, parser, tokenizer)
    return ToolPlan(request.tools, choice, template_tools, constraint, parser)


def _check(request, choice, tool_choice_type) -> None:
    """SGLang's ``_validate_request`` checks of the tools (``serving_chat.py``)."""
    from jsonschema import Draft202012Validator, SchemaError
    from sglang.srt.function_call.utils import normalize_json_schema_types

    if choice == "required" and not request.tools:
        raise _bad("Tools cannot be empty if tool choice is set to required.")
    if isinstance(choice, tool_choice_type):
        if not request.tools:
            raise _bad("Tools cannot be empty if tool choice is set to a specific tool.")
        names = [t.function.name for t in request.tools]
        if choice.function.name not in names:
            raise _bad(f"Tool '{choice.function.name}' not found in tools list.")
    for i, tool in enumerate(request.tools or []):
        if tool.function.parameters is None:
            continue
        try:
            # SGLang normalizes type aliases in place; the prompt and grammar use the result.
            normalize_json_schema_types(tool.function.parameters)
            Draft202012Validator.check_schema(tool.function.parameters)
        except SchemaError as exc:
            raise _bad(f"Tool {i} function has invalid 'parameters' schema: {exc}") from exc
        except RecursionError as exc:  # a hand-made cycle or a very deep schema
            raise _bad(
                f"Tool {i} function 'parameters' schema is too deeply nested or contains a cycle."
            ) from exc


def _constraint(request, parser: str | None, tokenizer) -> tuple[str, str] | None:
    """The sampling parameter SGLang adds for the tool choice (``serving_chat.py``,
    ``protocol.py`` ``to_sampling_params``): its name and JSON text."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.function_call.utils import get_json_schema_constraint
    from sglang.utils import convert_json_schema_to_str

    constraint, natively = None, False
    if parser:
        fcp = FunctionCallParser(request.tools, parser, tokenizer=tokenizer)
        constraint = fcp.get_structure_constraint(
            request.tool_choice,
            parallel_tool_calls=request.parallel_tool_calls,
            thinking_mode=False,
        )
        natively = fcp.detector.parses_required_natively()
    required = request.tool_choice == "required" or not isinstance(request.tool_choice, str)
    if constraint is None and not natively and required:
        schema = get_json_schema_constraint(
            request.tools, request.tool_choice, parallel_tool_calls=request.parallel_tool_calls
        )
        constraint = ("json_schema", schema)
    if constraint is None:
        return None
    kind, value = constraint
    if kind == "structural_tag":
        return kind, convert_json_schema_to_str(value.model_dump(by_alias=True))
    if kind == "json_schema":
        return kind, convert_json_schema_to_str(value)
    raise _bad(f"tool_choice: SGLang's {kind!r} constraint is not served by the sglang-pdd router")


def apply_constraint(plan: ToolPlan, sampling: dict) -> None:
    """Add the plan's constraint to ``sampling`` as SGLang does: with ``response_format`` (or
    another grammar) already there, a required or named tool is a 400, ``auto`` keeps the
    other grammar. Tools also turn ``skip_special_tokens`` off (SGLang does)."""
    sampling["skip_special_tokens"] = False
    if plan.constraint is None:
        return
    if any(sampling.get(k) for k in ("regex", "ebnf", "structural_tag", "json_schema")):
        if plan.required:
            raise _bad(
                "tool_choice 'required' or a named tool cannot be combined with "
                "response_format, regex, or ebnf: the tool-call constraint and the "
                "output constraint cannot both be honored."
            )
        return
    kind, value = plan.constraint
    sampling[kind] = value


def parse_answer(plan: ToolPlan, text: str, reason: dict | None, tokenizer):
    """(content, tool_calls or None, finish reason) of a finished answer, as SGLang's
    ``_process_tool_calls``: a stop becomes ``tool_calls`` when calls were found."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    reason = dict(reason or {})
    if plan.parser:
        fcp = FunctionCallParser(
            plan.tools,
            plan.parser,
            tokenizer=tokenizer,
            tool_choice=plan.tool_choice,
            prefix="",
            constrained=False,
        )
        owns = fcp.owns_tool_format()
        if (not plan.required or owns) and fcp.has_tool_call(text):
            try:
                text, found = fcp.parse_non_stream(text)
            except Exception:  # noqa: BLE001 - SGLang answers with the text, no calls
                return text, None, reason
            if not found:
                return text, None, reason
            calls = [_call(i, c.name, c.parameters) for i, c in enumerate(found)]
            return text, calls, _stopped_for_tools(reason)
        if plan.required and owns:
            return text, None, reason
    if not plan.required:
        return text, None, reason
    try:  # a JSON array of calls (the json_schema constraint)
        data = orjson.loads(text)
        data = [data] if isinstance(data, dict) else data
        if not isinstance(data, list) or not all(isinstance(d, dict) and "name" in d for d in data):
            raise ValueError("not a list of calls")
    except ValueError:
        # SGLang restores the type but has cleared the matched stop by then.
        return text, None, {**reason, "matched": None} if reason.get("type") == "stop" else reason
    calls = [
        _call(i, d["name"], json.dumps(d.get("parameters", {}), ensure_ascii=False))
        for i, d in enumerate(data)
    ]
    return "", calls, _stopped_for_tools(reason)


def _stopped_for_tools(reason: dict) -> dict:
    if reason.get("type") == "stop":
        return {**reason, "type": "tool_calls", "matched": None}
    return reason


def _call(index: int, name: str, arguments: str) -> dict:
    # SGLang's ids for these parsers: "call_" and 24 random hex digits.
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "index": index,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def template_messages(messages: list) -> list:
    """The history as SGLang gives it to the template: an assistant's earlier tool calls carry
    their ``arguments`` as an object, not the JSON text the client sent (a 400 when that text
    is not a JSON object, with SGLang's message)."""
    out = []
    for message in messages:
        assistant = isinstance(message, dict) and message.get("role") == "assistant"
        calls = message.get("tool_calls") if assistant else None
        if not isinstance(calls, list):
            out.append(message)
            continue
        converted = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, str):
                try:
                    arguments = orjson.loads(arguments)
                except orjson.JSONDecodeError as exc:
                    raise _bad(
                        "Assistant tool call function.arguments must be valid JSON."
                    ) from exc
                if not isinstance(arguments, dict):
                    raise _bad("Assistant tool call function.arguments must be a JSON object.")
                call = {**call, "function": {**function, "arguments": arguments}}
            converted.append(call)
        out.append({**message, "tool_calls": converted})
    return out


class ToolCallStream:
    """One streamed choice's answer parsed as it arrives, as SGLang's streaming chat does
    (``_process_tool_call_stream``): ``feed`` each new piece of text, get the content to send
    and the ``tool_calls`` deltas (a call's first delta has its id and name, later ones pieces
    of its arguments); at the end, ``unstreamed`` sends what the parser holds of the last
    call's arguments. Only with a parser (without one the answer streams as text)."""

    def __init__(self, plan: ToolPlan, tokenizer) -> None:
        from sglang.srt.function_call.function_call_parser import FunctionCallParser
        from sglang.srt.function_call.json_array_parser import JsonArrayParser

        self.tools = plan.tools
        self.parser = FunctionCallParser(
            plan.tools,
            plan.parser,
            tokenizer=tokenizer,
            tool_choice=plan.tool_choice if plan.required else None,
            prefix="",
            constrained=False,
        )
        # A required or named call the parser cannot read in its own format is the JSON
        # array SGLang's schema asks for.
        self.array = None
        if plan.required and not self.parser.owns_tool_format():
            self.array = JsonArrayParser()
        self.called = False

    def feed(self, text: str, final: bool) -> tuple[str, list[dict]]:
        """(content, tool-call deltas) for ``text``; ``final``: the answer ended (not by an
        abort), so the parser gives up what it held waiting for more."""
        if self.array is not None:
            result = self.array.parse_streaming_increment(text, self.tools)
            content, items = result.normal_text or "", list(result.calls)
            if final:
                end = self.array.finish(self.tools)
                content, items = content + end.normal_text, items + end.calls
        else:
            content, items = self.parser.parse_stream_chunk(text)
            content, items = content or "", list(items)
            if final:
                end_text, end_items = self.parser.parse_stream_end()
                content, items = content + end_text, items + end_items
        deltas = []
        for item in items:
            self.called = True
            named = bool(item.name)
            call_id = f"call_{uuid.uuid4().hex[:24]}" if named else None
            function = {"name": item.name if named else None, "arguments": item.parameters}
            deltas.append(
                {"id": call_id, "index": item.tool_index, "type": "function", "function": function}
            )
        return content, deltas

    def feed_ids(self, text, token_ids: list[int]) -> list[tuple[str, list[dict]]]:
        """Append ``token_ids`` to ``text`` (the choice's ``StreamingText``) and feed the
        parser each id's own text, as SGLang's server does streaming one token per chunk:
        [(content, tool-call deltas)] per id, in order.

        Per id, not per upstream chunk: SGLang's stream parsers answer the same text cut
        differently (qwen25 drops text after a call when it comes id by id and keeps it as
        content when it comes with the call's end), and how the router's ids are grouped
        (several after a handoff, merged reads under load) is not how a co-located server's
        are."""
        return [self.feed(text.add([token]), final=False) for token in token_ids]

    def unstreamed(self) -> dict | None:
        """The rest of the last call's arguments the parser has not sent (a call whose JSON
        the answer's end cut short), as SGLang's ``_check_for_unstreamed_tool_args``."""
        detector = self.array if self.array is not None else self.parser.detector
        calls, sent = detector.prev_tool_call_arr, detector.streamed_args_for_tool
        if not calls or not sent or len(calls) > len(sent):
            return None
        last = len(calls) - 1
        expected = calls[last].get("arguments", {})
        if not isinstance(expected, str):
            expected = json.dumps(expected, ensure_ascii=False)
        if not expected.startswith(sent[last]) or expected == sent[last]:
            return None
        function = {"name": None, "arguments": expected[len(sent[last]) :]}
        return {"id": None, "index": last, "type": "function", "function": function}

    def finish_reason(self, reason: dict | None) -> dict | None:
        """A stop after calls is ``tool_calls`` (the matched stop kept, as SGLang's stream)."""
        if self.called and reason and reason.get("type") == "stop":
            return {**reason, "type": "tool_calls"}
        return reason
