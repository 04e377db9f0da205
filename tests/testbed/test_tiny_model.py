"""The generated model: deterministic for a seed, shaped by its flags, loadable by transformers."""

from __future__ import annotations

import hashlib

import pytest

from sglang_pdd.testbed.tiny_model import TinyModelConfig, main, write_tiny_model

pytest.importorskip("transformers")


def _digest(path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    a = write_tiny_model(tmp_path / "a", TinyModelConfig(seed=1))
    b = write_tiny_model(tmp_path / "b", TinyModelConfig(seed=1))
    c = write_tiny_model(tmp_path / "c", TinyModelConfig(seed=2))
    assert _digest(a) == _digest(b) != _digest(c)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


def test_shape_flags_set_kv_bytes_and_chat_template(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    assert (
        main(
            [
                "--out",
                str(tmp_path),
                "--layers",
                "3",
                "--hidden",
                "96",
                "--heads",
                "6",
                "--kv-heads",
                "3",
                "--vocab",
                "400",
            ]
        )
        == 0
    )
    cfg = AutoConfig.from_pretrained(tmp_path)
    assert (cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size) == (3, 3, 96)
    assert TinyModelConfig(layers=3, hidden=96, heads=6, kv_heads=3).kv_bytes_per_token() == (
        2 * 3 * 3 * 16 * 2
    )
    tok = AutoTokenizer.from_pretrained(tmp_path)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|assistant|>\n") and "hi" in text


@pytest.mark.parametrize(
    "kwargs, flag",
    [({"heads": 5}, "--hidden"), ({"kv_heads": 3}, "--heads"), ({"vocab": 10}, "--vocab")],
)
def test_bad_shapes_name_the_flag(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        TinyModelConfig(**kwargs)


def test_vocabulary_is_the_size_asked_or_refused(tmp_path):
    from transformers import AutoTokenizer

    write_tiny_model(tmp_path / "ok", TinyModelConfig(vocab=400))
    assert len(AutoTokenizer.from_pretrained(tmp_path / "ok")) == 400
    with pytest.raises(ValueError, match=r"--vocab 1024: .* yields \d+ tokens"):
        write_tiny_model(tmp_path / "big", TinyModelConfig(vocab=1024))


def test_family_variant_keeps_weights_and_vocabulary(tmp_path):
    """``--base DIR --chat-template FAMILY``: the same checkpoint and ids, the family's
    template, which renders tools, calls and results with the family's markers."""
    import json

    from transformers import AutoTokenizer

    from sglang_pdd.testbed.chat_templates import FAMILIES

    base = write_tiny_model(tmp_path / "base", TinyModelConfig(seed=1))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    markers = {
        "qwen25": "<tool_call>",
        "llama3": '"parameters": {"city": "Paris"}',
        "mistral": "[TOOL_CALLS] [",
        "deepseekv3": "<｜tool▁sep｜>get_weather",
    }
    for family, marker in markers.items():
        out = tmp_path / family
        assert main(["--out", str(out), "--base", str(base), "--chat-template", family]) == 0
        assert _digest(out) == _digest(base)
        tok = AutoTokenizer.from_pretrained(out)
        assert tok.get_vocab() == AutoTokenizer.from_pretrained(base).get_vocab()
        assert tok.chat_template == FAMILIES[family][0]
        text = tok.apply_chat_template(messages, tools=tools, tokenize=False)
        assert marker in text and "sunny" in text and json.dumps("get_weather") in text
