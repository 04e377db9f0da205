"""Token ids to text for the router's responses, stable under streaming."""

from __future__ import annotations


class StreamingText:
    """Decode a growing list of ids; ``add()`` returns only text that is final.

    At the end, ``finish()`` trims a matched stop string or stop token the way SGLang's
    detokenizer does (unless ``no_stop_trim``), so the text equals a plain server's; the
    sampling parameters ``no_stop_trim`` and ``skip_special_tokens`` mean what they mean there.
    """

    def __init__(self, tokenizer, no_stop_trim: bool = False,
                 skip_special_tokens: bool = True) -> None:  # fmt: skip
        self.tokenizer = tokenizer
        self.no_stop_trim = no_stop_trim
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.sent = ""
        self._final: str | None = None

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def full(self) -> str:
        return self._final if self._final is not None else self._decode(self.ids)

    def add(self, token_ids: list[int]) -> str:
        """Append ids; return the new final text (held back while a character is incomplete)."""
        self.ids.extend(token_ids)
        text = self.full()
        if text.endswith("\ufffd"):
            return ""
        delta = text[len(self.sent) :] if text.startswith(self.sent) else text
        self.sent = text
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
        delta = text[len(self.sent) :] if text.startswith(self.sent) else ""
        self.sent = text
        return delta
