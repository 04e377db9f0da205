"""``GenerateChunk``: SGLang's ``/generate`` chunks typed once; extra keys pass, a missing
required one fails (here, and against the pinned SGLang's tokenizer manager)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import msgspec
import pytest

from sglang_pdd.router.upstream.calls import UpstreamError, _ChunkReader
from sglang_pdd.router.upstream.chunks import DECODER, ChunkMeta, GenerateChunk, required_keys


def _line(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def test_keys_sglang_adds_are_ignored():
    chunk = {
        "text": "hi",
        "output_ids": [1, 2],
        "meta_info": {"id": "r", "finish_reason": None, "weight_version": "v", "e2e": 1.5},
        "prompt_token_ids": [9],
    }
    got = DECODER.decode(json.dumps(chunk))
    assert got.output_ids == [1, 2] and got.text == "hi" and got.finish_reason is None


@pytest.mark.parametrize(
    "chunk",
    [
        {"meta_info": {"id": "r", "finish_reason": None}},  # no output_ids
        {"output_ids": [1]},  # no meta_info
        {"output_ids": [1], "meta_info": {"id": "r"}},  # no finish_reason
        {"output_ids": ["a"], "meta_info": {"id": "r", "finish_reason": None}},
    ],
)
def test_a_chunk_without_what_the_router_reads_fails_the_request(chunk):
    """SGLang no longer sending a field the router reads is a 502 for the request, not ids or
    a finish read as empty."""
    with pytest.raises(UpstreamError) as caught:
        _ChunkReader(incremental=False, logprobs=False, instance="http://rld:1").feed(_line(chunk))
    assert caught.value.status == 502 and caught.value.instance is None
    assert "cannot read" in caught.value.body["error"]["message"]


def test_required_keys_are_the_fields_without_a_default():
    assert required_keys(GenerateChunk) == ["output_ids", "meta_info"]
    assert required_keys(ChunkMeta) == ["id", "finish_reason"]


def test_sglang_still_writes_every_key_the_structs_read():
    """The upgrade check: every field of ``GenerateChunk`` and ``ChunkMeta`` is a key SGLang's
    tokenizer manager writes into its chunks (a key it stops writing fails here, before a
    relayed request meets it)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the pinned SGLang installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    source = (root / "srt/managers/tokenizer_manager.py").read_text()
    for struct in (GenerateChunk, ChunkMeta):
        for field in msgspec.structs.fields(struct):
            assert f'"{field.encode_name}"' in source, f"{struct.__name__}.{field.name}"
