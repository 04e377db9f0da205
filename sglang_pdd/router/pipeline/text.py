"""Token ids to text for the router's responses, stable under streaming."""

from __future__ import annotations

import logging

import tokenizers
from tokenizers import decoders
from tokenizers.decoders import DecodeStream

logger = logging.getLogger("sglang_pdd.router")

# Ids decoded again before a streamed window, for merges and spacing across its boundary.
_CONTEXT_IDS = 4


class StreamingText:
    """Decode a growing list of ids; ``add()`` returns only text that is final.

    Streaming decodes a window, not the whole output: the ids since the last emitted piece plus
    a few before it (so that a tokenizer's merges and spacing across the boundary come out as in
    a full decode); a window that ends inside a multi-byte character waits for more ids. Each
    step thus costs a few tokens, not the output so far.

    With a plain byte-level fast tokenizer (Hugging Face ``tokenizers``, no clean-up of
    spaces) the window is kept by ``tokenizers``' own ``DecodeStream`` in Rust (one call per
    chunk, about a tenth of two Python decodes: the router runs this for every streamed chunk);
    any other tokenizer, or a stream ``DecodeStream`` refuses, is decoded here.

    At the end, ``finish()`` trims a matched stop string or stop token the way SGLang's
    detokenizer does (unless ``no_stop_trim``), so the text equals a plain server's; the
    sampling parameters ``no_stop_trim`` and ``skip_special_tokens`` mean what they mean there.
    """

    def __init__(
        self, tokenizer, no_stop_trim: bool = False, skip_special_tokens: bool = True
    ) -> None:
        self.tokenizer = tokenizer
        self.no_stop_trim = no_stop_trim
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        # The text sent so far, in pieces: joined when read (``sent``), so that a chunk's
        # text is not copied onto everything before it (O(answer) per chunk).
        self._pieces: list[str] = []
        self._final: str | None = None
        self._prefix = 0  # window start: ids before it are behind the emitted text
        self._read = 0  # ids up to here have been emitted
        self._backend = rust_decoder(tokenizer)
        self._stream = (
            DecodeStream(skip_special_tokens=skip_special_tokens)
            if self._backend is not None
            else None
        )

    @property
    def sent(self) -> str:
        """The text sent so far."""
        if len(self._pieces) > 1:
            self._pieces[:] = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def full(self) -> str:
        return self._final if self._final is not None else self._decode(self.ids)

    def add(self, token_ids: list[int]) -> str:
        """Append ids; return the new final text (held back while a character is incomplete)."""
        self.ids.extend(token_ids)
        if self._stream is not None:
            try:
                piece = self._stream.step(self._backend, token_ids) if token_ids else None
            except Exception as exc:  # noqa: BLE001 - any refusal: the Python window goes on
                logger.warning(
                    "sglang-pdd router: DecodeStream failed (%s); decoding in Python", exc
                )
                self._stream = None
                self._prefix = max(self._read - _CONTEXT_IDS, 0)
            else:
                if piece is None:
                    return ""  # a character is incomplete: its ids wait
                self._read = len(self.ids)  # the text of every id so far is out
                self._pieces.append(piece)
                return piece
        before = self._decode(self.ids[self._prefix : self._read])
        window = self._decode(self.ids[self._prefix :])
        if window.endswith("\ufffd") or not window.startswith(before):
            return ""
        delta = window[len(before) :]
        self._prefix, self._read = max(self._read - _CONTEXT_IDS, 0), len(self.ids)
        self._pieces.append(delta)
        return delta

    def finish(self, finish_reason: dict | None) -> str:
        """Fix the final text for SGLang's ``finish_reason``; return what is left to send."""
        matched = (finish_reason or {}).get("matched")
        text = self._decode(self.ids)
        if matched is not None and not self.no_stop_trim:
            if isinstance(matched, str) and (pos := text.find(matched)) != -1:
                text = text[:pos]
            elif isinstance(matched, int) and self.ids and self.ids[-1] == matched:
                text = self._decode(self.ids[:-1])
        self._final = text
        sent = self.sent
        delta = text[len(sent) :] if text.startswith(sent) else ""
        self._pieces = [text]
        return delta


# Tokenizer classes whose ``decode`` is the Rust tokenizer's plus, at most, the clean-up of
# spaces (transformers 5's ``TokenizersBackend``, 4's ``PreTrainedTokenizerFast``).
_PLAIN_DECODE_MODULES = (
    "transformers.tokenization_utils_tokenizers",
    "transformers.tokenization_utils_fast",
)


def rust_decoder(tokenizer) -> tokenizers.Tokenizer | None:
    """``tokenizer``'s Rust tokenizer when decoding with it alone gives ``tokenizer``'s text
    and a window's text never depends on the ids before it: a byte-level fast tokenizer (GPT-2,
    Llama 3, Qwen style) whose ``_decode`` is transformers' own, with no clean-up of spaces.
    Else None (SentencePiece-style decoders strip a leading space at a window's start, where
    ``DecodeStream`` refuses the stream: those keep the Python window)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)  # transformers' fast tokenizers
    if not isinstance(backend, tokenizers.Tokenizer):
        return None
    if not isinstance(backend.decoder, decoders.ByteLevel):
        return None
    if getattr(tokenizer, "clean_up_tokenization_spaces", True) is not False:
        return None
    decode = getattr(type(tokenizer), "_decode", None)
    if getattr(decode, "__module__", None) not in _PLAIN_DECODE_MODULES:
        return None
    return backend
