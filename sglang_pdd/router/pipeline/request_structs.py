"""The request structs: every request field the router serves, declared once.

``/generate`` and the OpenAI bodies are decoded with msgspec (as SGLang's own ``io_struct``)
into the structs below, which state each field's type and range as SGLang's
``SamplingParams.verify`` accepts them (``router.api.request_model`` checks bodies with them).
A field's part in the router's merge is metadata on the field itself (``msgspec.Meta`` extras,
read by ``field_meta``): ``request_fields`` derives the served-field sets from the structs, and
the OpenAI-to-SGLang sampling names from the OpenAI fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

import msgspec

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]
Temperature = Annotated[float, msgspec.Meta(ge=0.0)]
TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
MinP = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
RepetitionPenalty = Annotated[float, msgspec.Meta(gt=0.0, le=2.0)]
TopK = Annotated[int, msgspec.Meta(ge=-1)]  # -1: no limit (0 refused by request_model)
Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Rid = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


def to_sampling(sglang_name: str | None = None) -> msgspec.Meta:
    """Field metadata: an OpenAI field SGLang reads as the sampling parameter ``sglang_name``
    (the field's own name when None)."""
    return msgspec.Meta(extra={"sampling": sglang_name})


# Field metadata: a sampling parameter the router checks but does not carry across the handoff
# (refused unless its value means "off").
NOT_CARRIED = msgspec.Meta(extra={"carried": False})
# Field metadata: a /generate field sent on to every instance (each token's logprobs come from
# the instance that produced it; only output logprobs: logprob_start_len other than -1 is refused).
EVERY_INSTANCE = msgspec.Meta(extra={"every_instance": True})
# Field metadata: an OpenAI field about tools (chat only: refused on /v1/completions).
TOOLS = msgspec.Meta(extra={"tools": True})


def field_meta(struct: type[msgspec.Struct]) -> dict[str, dict[str, Any]]:
    """Each field of ``struct``, in declaration order, with its metadata (the extras of the
    ``msgspec.Meta`` annotating the field; empty for none)."""
    hints = get_type_hints(struct, include_extras=True)
    fields = {}
    for name in struct.__struct_fields__:
        extras: dict[str, Any] = {}
        hint = hints[name]
        if get_origin(hint) is Annotated:
            for meta in get_args(hint)[1:]:
                if isinstance(meta, msgspec.Meta) and meta.extra:
                    extras.update(meta.extra)
        fields[name] = extras
    return fields


class SamplingParams(msgspec.Struct):
    """SGLang's ``sampling_params`` as the router checks them (other fields pass unchecked
    here and are refused by ``request_fields``). The router carries each field across the
    handoff unless it is ``NOT_CARRIED``.

    Penalties and min_new_tokens are carried because MD counts the handed-off ids into SGLang's
    penalizers (sglang_pdd.main_decode.penalties); grammars (json_schema, regex, ebnf,
    structural_tag: one xgrammar matcher each) because MD advances the request's grammar over
    them (sglang_pdd.main_decode.extend.advance_grammar); logit_bias is static per request.
    Refused: custom logit processors, stop_regex (untested across the handoff), beam search and
    watermarks."""

    max_new_tokens: NonNegInt | None = None
    min_new_tokens: NonNegInt | None = None
    n: Annotated[PosInt | None, NOT_CARRIED] = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    repetition_penalty: RepetitionPenalty | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[NonNegInt] | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    no_stop_trim: bool | None = None
    spaces_between_special_tokens: bool | None = None
    stream_interval: PosInt | None = None
    sampling_seed: Seed | None = None
    logit_bias: dict[str, float] | None = None
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None


class GenerateRequest(msgspec.Struct):
    """SGLang's ``/generate`` body (``GenerateReqInput``), the fields the router reads."""

    text: str | list[str] | None = None
    input_ids: list[Any] | None = (
        None  # ids, or one list of ids per prompt (checked by request_model)
    )
    sampling_params: SamplingParams | list[SamplingParams] | None = None
    stream: bool | None = None
    rid: Rid | list[Rid] | None = None
    return_logprob: Annotated[bool | None, EVERY_INSTANCE] = None
    top_logprobs_num: Annotated[NonNegInt | None, EVERY_INSTANCE] = None
    return_text_in_logprobs: Annotated[bool | None, EVERY_INSTANCE] = None


class JsonSchemaFormat(msgspec.Struct):
    """OpenAI ``response_format.json_schema`` (SGLang's ``JsonSchemaResponseFormat``)."""

    name: str
    description: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseFormat(msgspec.Struct):
    """OpenAI ``response_format`` (SGLang's ``ResponseFormat``). SGLang also accepts the schema
    at ``response_format.schema``; its ``structural_tag`` type is refused by the router."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    schema: dict[str, Any] | None = None


class OpenAIRequest(msgspec.Struct):
    """OpenAI ``/v1/completions`` and ``/v1/chat/completions`` bodies: the fields the router
    serves (``messages`` are checked by the chat template; ``Any`` fields pass unchecked). A
    ``to_sampling`` field becomes SGLang's sampling parameter of that name."""

    model: str | None = None
    prompt: str | list[NonNegInt] | None = None
    messages: list[dict[str, Any]] | None = None
    stream: bool | None = None
    max_tokens: Annotated[NonNegInt | None, to_sampling("max_new_tokens")] = None
    max_completion_tokens: Annotated[NonNegInt | None, to_sampling("max_new_tokens")] = None
    min_tokens: Annotated[NonNegInt | None, to_sampling("min_new_tokens")] = None
    n: PosInt | None = None
    temperature: Annotated[Temperature | None, to_sampling()] = None
    top_p: Annotated[TopP | None, to_sampling()] = None
    top_k: Annotated[TopK | None, to_sampling()] = None
    min_p: Annotated[MinP | None, to_sampling()] = None
    frequency_penalty: Annotated[Penalty | None, to_sampling()] = None
    presence_penalty: Annotated[Penalty | None, to_sampling()] = None
    repetition_penalty: Annotated[RepetitionPenalty | None, to_sampling()] = None
    stop: Annotated[str | list[str] | None, to_sampling()] = None
    stop_token_ids: Annotated[list[NonNegInt] | None, to_sampling()] = None
    seed: Annotated[Seed | None, to_sampling("sampling_seed")] = None
    ignore_eos: Annotated[bool | None, to_sampling()] = None
    skip_special_tokens: Annotated[bool | None, to_sampling()] = None
    no_stop_trim: Annotated[bool | None, to_sampling()] = None
    logit_bias: Annotated[dict[str, float] | None, to_sampling()] = None
    logprobs: bool | NonNegInt | None = None
    top_logprobs: NonNegInt | None = None
    user: str | None = None
    response_format: ResponseFormat | None = None
    stream_options: Any = None
    # chat only (router/api/openai_chat.py)
    tools: Annotated[Any, TOOLS] = None
    tool_choice: Annotated[Any, TOOLS] = None
    parallel_tool_calls: Annotated[Any, TOOLS] = None
