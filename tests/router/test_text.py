"""``StreamingText``: streamed deltas add up to the final text; stops are trimmed like SGLang."""

from __future__ import annotations

from sglang_pdd.router.text import StreamingText

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
