"""The router's tokenizer and model config are those SGLang's servers load, with or without
torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from sglang_pdd.router.model_files import (
    PLAIN_BACKEND_MODEL_TYPES,
    load_tokenizer,
    model_config,
    model_vocab_size,
    plain_backend_applies,
)

BASES = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def test_the_plain_backend_model_types_have_no_tokenizer_class_of_their_own():
    """If transformers registers a tokenizer class for one of these model types, AutoTokenizer
    may pick it over the checkpoint's "TokenizersBackend": the list must shrink."""
    from transformers.models.auto.tokenization_auto import (
        MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS,
        TOKENIZER_MAPPING_NAMES,
    )

    for model_type in PLAIN_BACKEND_MODEL_TYPES:
        registered = TOKENIZER_MAPPING_NAMES.get(model_type)
        assert registered is None or registered.removesuffix("Fast") in BASES, (
            model_type,
            registered,
        )
        assert model_type not in MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS or registered is None


def test_the_router_loads_the_class_and_encodings_autotokenizer_gives(tiny_model):
    from transformers import AutoTokenizer

    assert plain_backend_applies(str(tiny_model))
    ours, theirs = load_tokenizer(str(tiny_model)), AutoTokenizer.from_pretrained(tiny_model)
    assert type(ours) is type(theirs)
    for text in ["", "health", "Hello, world!  two  spaces\nand a line", "<|user|>hi<|end|>"]:
        assert ours.encode(text) == theirs.encode(text)
        assert ours.encode(text, add_special_tokens=False) == theirs.encode(
            text, add_special_tokens=False
        )
    ids = theirs.encode("Tokens back to text, specials and all <|end|>")
    assert ours.decode(ids) == theirs.decode(ids)
    assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(
        ids, skip_special_tokens=True
    )
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    ) == theirs.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert len(ours) == len(theirs)


@pytest.mark.parametrize(
    "edit",
    [
        ("config.json", "model_type", "qwen2"),  # transformers has a class of its own for it
        ("tokenizer_config.json", "tokenizer_class", "LlamaTokenizer"),
        ("tokenizer_config.json", "auto_map", {"AutoTokenizer": [None, "x.Tok"]}),
        ("config.json", "auto_map", {"AutoConfig": "x.Config"}),
    ],
    ids=["model-type", "tokenizer-class", "remote-tokenizer", "remote-config"],
)
def test_anything_else_goes_through_autotokenizer(tiny_model, tmp_path, edit):
    name, key, value = edit
    copy = tmp_path / "model"
    shutil.copytree(tiny_model, copy)
    data = json.loads((copy / name).read_text())
    data[key] = value
    (copy / name).write_text(json.dumps(data))
    assert not plain_backend_applies(str(copy))


def test_a_missing_or_remote_checkpoint_goes_through_autotokenizer(tmp_path):
    assert not plain_backend_applies(str(tmp_path / "absent"))
    assert not plain_backend_applies("org/model-on-the-hub")
    assert not plain_backend_applies(str(tmp_path))  # a folder without the two files


def test_the_vocab_size_is_the_model_configs(tiny_model, tmp_path):
    config = json.loads((tiny_model / "config.json").read_text())
    tokenizer = load_tokenizer(str(tiny_model))
    assert model_vocab_size(str(tiny_model), tokenizer) == config["vocab_size"]
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 1234}}))
    assert model_vocab_size(str(nested), tokenizer) == 1234
    (nested / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert model_vocab_size(str(nested), tokenizer) == len(tokenizer)


def test_loading_the_tiny_models_tokenizer_imports_no_torch(tiny_model):
    """The point of the direct path: a router's start does not pay for importing torch."""
    code = (
        "import sys\n"
        "from sglang_pdd.router.model_files import load_tokenizer, model_config, model_vocab_size\n"
        f"t = load_tokenizer({str(tiny_model)!r})\n"
        f"model_vocab_size({str(tiny_model)!r}, t)\n"
        f"model_config({str(tiny_model)!r})\n"
        "import sglang_pdd.router.api.app, sglang_pdd.router.cli\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_a_local_config_reads_as_autoconfig_reads_it(tiny_model):
    from transformers import AutoConfig

    ours, theirs = model_config(str(tiny_model)), AutoConfig.from_pretrained(tiny_model)
    for key in ["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim"]:
        assert ours[key] == getattr(theirs, key), key
    assert ours["dtype"] == str(theirs.dtype).removeprefix("torch."), (ours["dtype"], theirs.dtype)
