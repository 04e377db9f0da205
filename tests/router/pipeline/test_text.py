"""``StreamingText``: streamed deltas add up to the final text; stops are trimmed like SGLang."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from sglang_pdd.router.model_files import load_tokenizer
from sglang_pdd.router.pipeline.text import StreamingText, rust_decoder
from sglang_pdd.testbed.tiny_model import TinyModelConfig, _write_tokenizer

EOS = 0


class CharTokenizer:
    """Token id i is chr(i) (0 is a special end-of-sequence token)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == EOS))


def _ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_deltas_add_up():
    text = StreamingText(CharTokenizer())
    pieces = [text.add(_ids(p)) for p in ("Hel", "lo", " world")]
    pieces.append(text.finish({"type": "length", "length": 10}))
    assert "".join(pieces) == text.full() == "Hello world"


def test_stop_string_is_trimmed_unless_asked_not_to():
    for no_trim, expected in ((False, "answer"), (True, "answer\n\n")):
        text = StreamingText(CharTokenizer(), no_stop_trim=no_trim)
        streamed = text.add(_ids("answer\n\n"))
        tail = text.finish({"type": "stop", "matched": "\n\n"})
        assert text.full() == expected
        # What streamed before the match is not taken back; the tail adds nothing then.
        assert streamed == "answer\n\n" and tail == ""


def test_stop_token_is_dropped_from_the_text():
    text = StreamingText(CharTokenizer())
    text.add(_ids("done!"))
    text.finish({"type": "stop", "matched": ord("!")})
    assert text.full() == "done"
    eos = StreamingText(CharTokenizer())
    eos.add([*_ids("ok"), EOS])
    eos.finish({"type": "stop", "matched": EOS})
    assert eos.full() == "ok"


def test_special_tokens_kept_when_asked():
    text = StreamingText(CharTokenizer(), skip_special_tokens=False)
    text.add([*_ids("ok"), EOS])
    text.finish({"type": "length", "length": 3})
    assert text.full() == "ok\x00"


def test_streaming_decodes_a_window_not_the_whole_output():
    class CountingTokenizer(CharTokenizer):
        decoded = 0

        def decode(self, ids, skip_special_tokens=True):
            CountingTokenizer.decoded += len(ids)
            return super().decode(ids, skip_special_tokens)

    text = StreamingText(CountingTokenizer())
    out = "".join(text.add([ord("a") + i % 26]) for i in range(2000))
    assert out == text.full()[:2000] and len(out) == 2000
    assert CountingTokenizer.decoded < 2000 * 20  # linear, not 2000 * 1000


def test_multibyte_characters_wait_for_their_last_byte():
    class ByteTokenizer:
        def decode(self, ids, skip_special_tokens=True):
            return bytes(ids).decode("utf-8", errors="replace")

    text = StreamingText(ByteTokenizer())
    euro = list("€".encode())
    assert text.add(euro[:1]) == "" and text.add(euro[1:2]) == ""
    assert text.add(euro[2:]) == "€" and text.add(list(b"x")) == "x"


# -- the Rust DecodeStream path against the Python window, on real tokenizers ------------------


class PythonOnly:
    """The same tokenizer seen through ``decode`` alone: ``StreamingText`` keeps the window."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def decode(self, ids, skip_special_tokens=True):
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def _byte_level(tmp: Path):
    """The tiny model's tokenizer: byte-level BPE (GPT-2, Llama 3, Qwen style)."""
    _write_tokenizer(TinyModelConfig(vocab=512), tmp)
    return load_tokenizer(str(tmp))


def _metaspace(tmp: Path):
    """A SentencePiece-style BPE with byte fallback (Llama 2, Mistral style): a leading space
    stripped at the start of a decode."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>", *bytes_])
    tok.train_from_iterator(
        ["the café è déjà vu", "naïve € 100 über", "one two three"] * 50, trainer
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(tmp)
    return load_tokenizer(str(tmp))


@pytest.fixture(scope="module")
def real_tokenizer(tmp_path_factory):
    return _byte_level(tmp_path_factory.mktemp("byte-level"))


def test_a_byte_level_fast_tokenizer_streams_through_rust(real_tokenizer, tmp_path):
    assert rust_decoder(real_tokenizer) is not None
    assert rust_decoder(PythonOnly(real_tokenizer)) is None
    # DecodeStream refuses some SentencePiece-style streams (a stripped leading space): Python.
    assert rust_decoder(_metaspace(tmp_path)) is None


def test_a_refused_rust_stream_goes_on_in_python(real_tokenizer):
    class Refusing:
        def step(self, backend, ids):
            raise Exception("Invalid prefix encountered while decoding stream")

    text = StreamingText(real_tokenizer)
    python = StreamingText(PythonOnly(real_tokenizer))
    ids = real_tokenizer.encode("the one and two of three", add_special_tokens=False)
    assert text.add(ids[:3]) == python.add(ids[:3])
    text._stream = Refusing()
    assert text.add(ids[3:]) == python.add(ids[3:]) and text._stream is None
    assert text.sent == python.sent == real_tokenizer.decode(ids)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), skip=st.booleans())
def test_rust_and_python_windows_stream_the_same_text(real_tokenizer, data, skip):
    """Any ids (specials, lone bytes of a character included), in chunks of any size: the
    Rust path sends, chunk by chunk, the text the Python window sends."""
    vocab = len(real_tokenizer)
    ids = data.draw(st.lists(st.integers(0, vocab - 1), max_size=60))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=12)))
    chunks = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)], strict=True)]
    rust = StreamingText(real_tokenizer, skip_special_tokens=skip)
    python = StreamingText(PythonOnly(real_tokenizer), skip_special_tokens=skip)
    for chunk in chunks:
        assert rust.add(chunk) == python.add(chunk), chunks
    assert rust.finish(None) == python.finish(None) and rust.full() == python.full()
