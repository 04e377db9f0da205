"""``/v1/chat/completions`` answered with SGLang's own serving-chat code.

``serve_chat`` is the endpoint: the body checked, the prompt prepared (``ChatServing.prepare``),
``n`` PDD runs started and merged (router/pipeline/fanout.py: choice ``j`` is run ``j``), and
the answer built from their events, whole (``ChatServing.response``) or streamed
(``ChatServing.stream``, its SSE lines written here).

The router must answer a chat exactly as SGLang's OpenAI server would; any piece of
``serving_chat.py`` re-implemented here would drift from it (a tool turn's ``content: null``,
a list of text parts, a reasoning parser, ...). So the router builds a real
``OpenAIServingChat`` on a stand-in for the ``TokenizerManager`` it reads (``_Manager``: the
tokenizer, SGLang's ``ModelConfig``, the server args, ``config_value``) and a real
``TemplateManager``, and calls its own methods:

* the prompt ids, the constraint of ``tools`` / ``tool_choice`` / ``response_format`` and the
  sampling parameters: ``_validate_request`` and ``_convert_to_internal_request``;
* a whole answer: ``_build_chat_response`` over the PDD runs' outputs, put in the shape the
  tokenizer manager gives it (``_ret_item``);
* a streamed answer: ``_generate_chat_stream``, whose ``tokenizer_manager.generate_request``
  is the stand-in's: it yields each output token of the PDD runs as SGLang's tokenizer manager
  yields it (one item per token, cumulative text, the finish reason on the last token).

Tool-call and reasoning parsers, ``separate_reasoning``, the template's thinking switches,
``stream_options`` (usage, continuous usage) are thus SGLang's. ``tests/test_sglang_surface.py``
pins what the stand-in supplies and the methods called. SGLang's serving code imports torch
(about 15 s): the router builds it once, on its first chat (``serving_for``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from dataclasses import dataclass

from aiohttp import web

from sglang_pdd.router.api import openai_logprobs
from sglang_pdd.router.api.reasoning_count import ReasoningCount, think_ids
from sglang_pdd.router.api.request_model import json_body, validate_openai
from sglang_pdd.router.api.streaming import client_stream
from sglang_pdd.router.pipeline.fanout import (
    SubRequest,
    chain,
    merged_events,
    read_all,
    sample_count,
    start_runs,
)
from sglang_pdd.router.pipeline.record import TokenDelta
from sglang_pdd.router.pipeline.request_fields import (
    CHAT_FIELDS,
    unsupported_fields,
    unsupported_message,
    unsupported_sampling,
)
from sglang_pdd.router.upstream.calls import UpstreamError

logger = logging.getLogger("sglang_pdd.router")

# Server args of the Main-Decode server (its /get_server_info) that shape a chat's prompt,
# constraint or answer: the router builds SGLang's serving code with the same values.
CHAT_SERVER_ARGS = (
    "chat_template",
    "context_length",
    "default_chat_template_kwargs",
    "trust_request_chat_template",
    "allow_auto_truncate",
    "stream_response_default_include_usage",
    "enable_cache_report",
    "served_model_name",
    "tokenizer_mode",
    "trust_remote_code",
    "revision",
    "preferred_sampling_params",
    "sampling_defaults",
    "weight_version",
)

# GenerateReqInput fields of a chat the router carries to the PDD instances (the logprob
# options through router/api/openai_logprobs.py, ``n`` as that many runs). Any other field SGLang
# sets to something else than its default is refused with a 400 naming it.
_CARRIED_REQUEST_FIELDS = frozenset(
    {
        "input_ids",
        "text",
        "sampling_params",
        "stream",
        "return_logprob",
        "logprob_start_len",
        "top_logprobs_num",
        "return_text_in_logprobs",
        "log_metrics",
        "modalities",
        "require_reasoning",  # checked on its own (see prepare)
        "return_prompt_token_ids",  # the router's answers never carry prompt ids
    }
)

# Sampling parameters SGLang's request fills with its defaults; the router sends only those
# that say something (the PDD instances apply the same defaults).
_DROPPED_SAMPLING = ("n",)


def _bad(message: str, status: int = 400) -> UpstreamError:
    return _error(status, message, "BadRequestError")


def _error(status: int, message: str, kind: str) -> UpstreamError:
    body = {"object": "error", "message": message, "type": kind, "code": status}
    return UpstreamError(status, body)


class _Manager:
    """What ``OpenAIServingChat`` reads of SGLang's ``TokenizerManager`` (pinned by the
    surface test), and ``generate_request`` fed by the router's PDD runs."""

    def __init__(self, tokenizer, model_config, server_args, runtime) -> None:
        self.tokenizer = tokenizer
        self.model_config = model_config
        self.server_args = server_args
        self.served_model_name = server_args.served_model_name or server_args.model_path
        self.model_path = server_args.model_path
        self.processor = None  # text models only: media content is refused
        self._runtime = runtime

    def config_value(self, name: str):
        return self._runtime.get_context().config_leaf(name)

    def generate_request(self, adapted_request, raw_request=None):
        # ChatServing.stream passes the PDD runs' items (``_items``) as the request itself.
        return adapted_request


@dataclass
class PreparedChat:
    """A chat request as SGLang's server would run it."""

    request: object  # SGLang's ChatCompletionRequest, as its serving code left it
    input_ids: list[int]
    sampling: dict
    stream: bool
    require_reasoning: bool  # SGLang counts reasoning tokens by the template's thinking switch


class ChatServing:
    """SGLang's ``OpenAIServingChat`` for one router (see the module's docstring)."""

    def __init__(
        self,
        tokenizer,
        model_path: str,
        tool_call_parser: str | None,
        reasoning_parser: str | None,
        server_info: dict | None = None,
    ) -> None:
        from sglang.srt import runtime_context
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
        from sglang.srt.parser.template_manager import TemplateManager
        from sglang.srt.server_args import ServerArgs

        info = server_info or {}
        fields = {k: info[k] for k in CHAT_SERVER_ARGS if info.get(k) is not None}
        if isinstance(fields.get("default_chat_template_kwargs"), str):
            fields["default_chat_template_kwargs"] = json.loads(
                fields["default_chat_template_kwargs"]
            )
        self.server_args = ServerArgs(
            model_path=model_path,
            device="cpu",
            tool_call_parser=tool_call_parser,
            reasoning_parser=reasoning_parser,
            # The stand-in gives SGLang's stream cumulative text, as SGLang's default.
            incremental_streaming_output=False,
            **fields,
        )
        self._runtime = runtime_context
        self._activate()
        model_config = ModelConfig.from_server_args(self.server_args)
        think_ids(model_config, reasoning_parser, tokenizer)
        self.manager = _Manager(tokenizer, model_config, self.server_args, runtime_context)
        templates = TemplateManager()
        templates.initialize_templates(
            tokenizer_manager=self.manager,
            model_path=model_path,
            chat_template=self.server_args.chat_template,
        )
        self.chat = OpenAIServingChat(self.manager, templates)
        self.tokenizer = tokenizer

    def _activate(self) -> None:
        """Make these server args the process's SGLang config (``publish``), which SGLang's
        serving code reads at every step. The router runs no SGLang engine: its process
        config is free for this. A process with several ``ChatServing`` (tests) re-publishes
        when another one was used last."""
        try:
            current = self._runtime.get_server_args()
        except ValueError:  # nothing published yet
            current = None
        if current is not self.server_args:
            self._runtime.publish(self.server_args, role="tokenizer")

    def prepare(self, body: dict) -> PreparedChat:
        """The prompt ids and sampling parameters SGLang's server builds for ``body``; a 400
        with SGLang's message for what it refuses, or naming what the router cannot carry."""
        import pydantic
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

        try:
            request = ChatCompletionRequest(**body)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise _bad(f"{where}: {first['msg']}") from exc
        self._activate()
        if error := self.chat._validate_request(request):
            raise _bad(error)
        from sglang.srt.entrypoints.openai.encoding_dsv32 import DS32EncodingError

        try:
            adapted, request = self.chat._convert_to_internal_request(request, None)
        except (ValueError, DS32EncodingError) as exc:  # SGLang's handle_request: a 400
            raise _bad(str(exc)) from exc
        except Exception as exc:  # and for anything else a 500 with its message (logged)
            logger.exception("sglang-pdd router: chat prompt: %s", exc)
            raise _error(500, f"Internal server error: {exc}", "InternalServerError") from exc
        ids = adapted.input_ids
        if ids is None:
            raise _bad("this model's chat prompt is not token ids: not served by the router")
        refused = _uncarried(adapted)
        if adapted.require_reasoning and _has_grammar(adapted.sampling_params):
            # SGLang's reasoner grammar backend lets the reasoning run free before the
            # grammar applies; the router does not carry that switch to the instances.
            refused.append(
                "reasoning with a grammar (tools, response_format, regex or ebnf; "
                "require_reasoning)"
            )
        if refused:
            raise _bad(f"not supported by the sglang-pdd router: {', '.join(refused)}")
        sampling = {
            k: v
            for k, v in adapted.sampling_params.items()
            if v is not None and k not in _DROPPED_SAMPLING
        }
        return PreparedChat(
            request, list(ids), sampling, bool(request.stream), bool(adapted.require_reasoning)
        )

    def response(self, prepared: PreparedChat, oid: str, runs: list) -> dict:
        """The whole answer of finished ``runs`` (one per choice), as SGLang's server."""
        ret = [
            self._ret_item(oid, run, len(run.text.ids), True, self._reasoning(prepared))
            for run in runs
        ]
        self._activate()
        built = self.chat._build_chat_response(prepared.request, ret, int(time.time()))
        if not hasattr(built, "model_dump_json"):  # SGLang's error response
            raise UpstreamError(built.status_code, json.loads(built.body))
        return json.loads(built.model_dump_json(by_alias=True))

    async def stream(self, prepared: PreparedChat, oid: str, runs: list, events):
        """SGLang's SSE lines for the answer whose PDD ``events`` (index, event) arrive."""
        holds = self._holds_last_token(prepared.request)
        counts = [self._reasoning(prepared) for _ in runs]

        def ret_item(index: int, count: int, final: bool) -> dict:
            return self._ret_item(oid, runs[index], count, final, counts[index])

        items = _items(ret_item, runs, events, holds)
        self._activate()
        async for line in self.chat._generate_chat_stream(items, prepared.request, None):
            yield line

    def _reasoning(self, prepared: PreparedChat) -> ReasoningCount:
        custom = prepared.sampling.get("custom_params")
        return ReasoningCount(self.manager.model_config, prepared.require_reasoning, custom)

    def _ret_item(self, oid: str, run, count: int, final: bool, reasoning: ReasoningCount) -> dict:
        """One output of ``run`` (its first ``count`` ids; ``final``: with its finish) in the
        shape SGLang's tokenizer manager gives its OpenAI layer; ``reasoning`` counts the
        run's reasoning tokens."""
        ids = run.text.ids[:count]
        meta = {
            "id": oid,
            "finish_reason": _finish_reason(run.finished.finish_reason) if final else None,
            "prompt_tokens": len(run.body["input_ids"]),
            "completion_tokens": count,
            "cached_tokens": run.cached_tokens,
            "reasoning_tokens": reasoning.advance(ids),
            # The Main-Decode server's (its --weight-version): the router's instances serve
            # one model version.
            "weight_version": self.server_args.weight_version,
        }
        if run.logprobs:
            meta["output_token_logprobs"] = run.token_logprobs[:count]
            meta["output_top_logprobs"] = run.top_logprobs[:count]
            meta["output_token_logprobs_length"] = min(count, len(run.token_logprobs))
        text = run.text.full() if final else run.text.sent
        return {"text": text, "output_ids": ids, "meta_info": meta}

    def _holds_last_token(self, request) -> bool:
        """Whether the stream's parsers must see the last token together with the finish
        reason (as SGLang's tokenizer manager gives them): with a tool-call parser active or
        reasoning separated, the text they get in one piece or two can differ."""
        chat = self.chat
        tools = chat._tool_call_parsing_active(request)
        return tools or bool(chat.reasoning_parser and request.separate_reasoning)


def _uncarried(adapted) -> list[str]:
    """The fields of SGLang's ``GenerateReqInput`` for a chat that ask for something the
    router does not carry (set, and not to their default)."""
    import dataclasses

    out = []
    for f in dataclasses.fields(adapted):
        if f.name in _CARRIED_REQUEST_FIELDS:
            continue
        value = getattr(adapted, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        if value != default and value not in (None, False, [], {}):
            out.append(f.name)
    return out


def _has_grammar(sampling: dict) -> bool:
    return any(sampling.get(k) for k in ("json_schema", "regex", "ebnf", "structural_tag"))


def _finish_reason(reason: dict | None) -> dict | None:
    """SGLang's finish reason as its tokenizer manager hands it to the OpenAI layer."""
    return dict(reason) if reason else None


async def _items(ret_item, runs: list, events, holds: bool):
    """The runs' output as SGLang's tokenizer manager streams it: one item per output token
    (cumulative text, as SGLang's detokenizer releases it), tagged with its choice's index;
    the finish reason on the last token's item (``holds``: each token's item waits for the
    run's next event) or on an item of its own."""
    held: dict[int, dict] = {}
    async for index, event in events:
        run = runs[index]
        if isinstance(event, TokenDelta):
            for token in event.token_ids:
                if index in held:
                    yield held.pop(index)
                run.text.add([token])
                item = ret_item(index, len(run.text.ids), False)
                item["index"] = index
                if holds:
                    held[index] = item
                else:
                    yield item
            continue
        # The run ended: its text is final (a matched stop trimmed, as SGLang's detokenizer).
        item = held.pop(index, None) or ret_item(index, len(run.text.ids), False)
        item["text"] = run.text.full()
        item["meta_info"]["finish_reason"] = _finish_reason(event.finish_reason)
        item["index"] = index
        yield item


_SERVINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_BUILDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def serving_for(state) -> ChatServing:
    """The router's ``ChatServing``, built on its first chat (off the event loop)."""
    if (serving := _SERVINGS.get(state)) is not None:
        return serving
    task = _BUILDING.get(state)
    if task is None:
        config = state.config

        def build() -> ChatServing:
            return ChatServing(
                state.tokenizer,
                state.model_info["model_path"],
                config.tool_call_parser,
                config.reasoning_parser,
                state.server_info,
            )

        task = asyncio.ensure_future(asyncio.to_thread(build))
        _BUILDING[state] = task
    try:
        serving = await asyncio.shield(task)
    except Exception as exc:
        _BUILDING.pop(state, None)
        # SGLang's server would not start with these flags and this model; the router answers
        # each chat with why (and tries again on the next).
        logger.exception("sglang-pdd router: chat serving: %s", exc)
        config = state.config
        why = (
            f"chats cannot be served: {exc} (--tool-call-parser {config.tool_call_parser}, "
            f"--reasoning-parser {config.reasoning_parser})"
        )
        raise _error(500, why, "InternalServerError") from exc
    _SERVINGS[state] = serving
    return serving


async def serve_chat(request: web.Request, state) -> web.StreamResponse:
    """``POST /v1/chat/completions``: the answer SGLang's server would give, from ``n`` PDD runs
    (see the module's docstring)."""
    body = await json_body(request)
    validate_openai(body, state.limits, chat=True)
    if unsupported := unsupported_fields(body, CHAT_FIELDS):
        raise _bad(unsupported_message(unsupported))
    serving = await serving_for(state)
    prepared = serving.prepare(body)
    check_sampling(prepared.sampling, state)
    n = sample_count(body, "n")
    extra = openai_logprobs.generate_fields("chat", body)
    runs = start_runs(
        state, [SubRequest(prepared.input_ids, dict(prepared.sampling), dict(extra))] * n
    )
    oid = "chatcmpl-" + runs[0].rid
    merged = merged_events(runs)
    if not prepared.stream:
        async with client_stream(state, merged):
            await read_all(runs, merged)
        answer = serving.response(prepared, oid, runs)
        records = [run.finished.record.as_dict() for run in runs]
        answer["pdd"] = records[0] if len(runs) == 1 else records
        return web.json_response(answer)
    first = await anext(merged)  # errors before the first token still get an HTTP status
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    async with client_stream(state, merged, resp):
        async for line in serving.stream(prepared, oid, runs, chain(first, merged)):
            await resp.write(line.encode())
    return resp


def check_sampling(sampling: dict, state) -> None:
    """A 400 for sampling parameters the router does not carry (named as the client sent them);
    ``/v1/completions``' check too."""
    if unsupported := unsupported_sampling(
        sampling, prefix="", seeded=state.config.seeded_sampling
    ):
        names = {"sampling_seed": "seed"}  # back to the OpenAI names the client sent
        raise _bad(unsupported_message([names.get(n, n) for n in unsupported]))
