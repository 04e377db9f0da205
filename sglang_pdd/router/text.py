"""Token ids to text for the router's responses, stable under streaming."""

from __future__ import annotations


class StreamingText:
    """Decode a growing list of ids; ``delta()`` returns only text that is final."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.sent = ""

    def full(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def add(self, token_ids: list[int]) -> str:
        """Append ids; return the new final text (held back while a character is incomplete)."""
        self.ids.extend(token_ids)
        text = self.full()
        if text.endswith("\ufffd"):
            return ""
        delta = text[len(self.sent) :] if text.startswith(self.sent) else text
        self.sent = text
        return delta

    def flush(self) -> str:
        text = self.full()
        delta = text[len(self.sent) :] if text.startswith(self.sent) else ""
        self.sent = text
        return delta
