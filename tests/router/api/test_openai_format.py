"""OpenAI ``response_format`` becomes the ``json_schema`` sampling parameter exactly as SGLang's
own OpenAI server derives it, and no response_format makes the router raise anything but a 400."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.router.api.openai_format import response_format_schema, sampling_params
from sglang_pdd.router.api.request_model import InvalidRequest, RequestLimits, validate_openai
from tests.conftest import sglang_installed

LIMITS = RequestLimits()

names = st.text("abcdefgh_", min_size=1, max_size=6)
schemas = st.recursive(
    st.sampled_from(
        [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"enum": ["a", "b"]}]
    ),
    lambda inner: (
        st.builds(
            lambda props, strict: {
                "type": "object",
                "properties": {**props, **({"strict": {"default": strict}} if strict else {})},
                "required": sorted(props),
            },
            st.dictionaries(names, inner, min_size=1, max_size=3),
            st.sampled_from([None, True, False]),
        )
        | st.builds(lambda item: {"type": "array", "items": item}, inner)
    ),
    max_leaves=6,
)
response_formats = st.one_of(
    st.just({"type": "text"}),
    st.just({"type": "json_object"}),
    st.builds(
        lambda name, schema, strict: {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, **strict},
        },
        names,
        schemas,
        st.sampled_from([{}, {"strict": True}, {"strict": False}]),
    ),
    # SGLang's extension: the schema at response_format.schema (its title names it)
    st.builds(lambda schema: {"type": "json_schema", "schema": schema}, schemas),
)


def _sglang_json_schema(kind: str, body: dict) -> str | None:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest

    if kind == "chat" or "json_schema" not in body["response_format"]:
        # SGLang's completions server refuses the schema at response_format.schema (a
        # chat-only extension of SGLang's); the router reads it as SGLang's chat does.
        request = ChatCompletionRequest(
            model="m", messages=[{"role": "user", "content": "hi"}], **body
        )
        return request.to_sampling_params(stop=[], model_generation_config={}).get("json_schema")
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion

    request = CompletionRequest(model="m", prompt="hi", **body)
    # The completions server builds its sampling parameters in a method that reads no state.
    params = OpenAIServingCompletion._build_sampling_params(None, request)
    return params.get("json_schema")


@pytest.mark.skipif(not sglang_installed(), reason="sglang is not installed")
@settings(max_examples=60, deadline=None)
@given(response_formats, st.sampled_from(["chat", "completion"]))
def test_response_format_maps_as_sglang_maps_it(response_format, kind):
    body = {"response_format": json.loads(json.dumps(response_format))}
    validate_openai({**body, "prompt": "hi"}, LIMITS)
    ours = sampling_params(json.loads(json.dumps(body)), default_max_tokens=None).get("json_schema")
    theirs = _sglang_json_schema(kind, json.loads(json.dumps(body)))
    assert ours == theirs
    if ours is not None:
        assert json.loads(ours)  # a schema xgrammar can be given


def test_text_and_none_add_no_constraint():
    assert response_format_schema(None) is None
    assert response_format_schema({"type": "text"}) is None
    assert response_format_schema({"type": "json_object"}) == '{"type": "object"}'


@pytest.mark.parametrize(
    ("response_format", "named"),
    [
        ({"type": "json_schema"}, "response_format.json_schema.schema"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema"),
        (
            {"type": "json_schema", "json_schema": {"name": "x"}, "schema": {}},
            "response_format.json_schema.schema",
        ),
        ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema"),
        ({"type": "structural_tag", "structures": []}, "response_format.type"),
        ({"type": "yaml"}, "response_format.type"),
        ("json", "response_format"),
        ({"type": "json_schema", "json_schema": {"name": "x", "strict": "yes"}}, "strict"),
    ],
)
def test_bad_response_formats_are_refused_naming_the_field(response_format, named):
    with pytest.raises(InvalidRequest, match=named):
        validate_openai({"prompt": "hi", "response_format": response_format}, LIMITS)


json_leaf = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5)
json_value = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=12,
)
hostile_formats = json_value | st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "json_object", "json_schema"]) | json_value},
    optional={"json_schema": json_value | st.fixed_dictionaries({"name": json_value},
              optional={"schema": json_value, "strict": json_value}), "schema": json_value},
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(hostile_formats)
def test_no_response_format_makes_the_router_raise_anything_but_a_client_error(response_format):
    body = {"prompt": "hi", "response_format": response_format}
    try:
        validate_openai(body, LIMITS)
    except InvalidRequest:
        return
    schema = sampling_params(body, default_max_tokens=None).get("json_schema")
    assert schema is None or isinstance(json.loads(schema), dict)
