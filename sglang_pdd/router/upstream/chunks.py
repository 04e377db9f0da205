"""``GenerateChunk``: one chunk of SGLang's streamed ``/generate`` answer, decoded once.

SGLang's tokenizer manager writes each chunk as ``{"text", "output_ids", "meta_info"}``
(``TokenizerManager._handle_batch_output``, and ``_handle_abort_req`` for an abort). The router
decodes it here, in the upstream reader, into typed structs that travel on (as SGLang's own
``io_struct`` objects do): no layer above reads a chunk's keys. Fields SGLang adds are ignored;
a field declared without a default must be in every chunk, so a chunk that lacks one is refused
(``msgspec.ValidationError``) rather than read as empty.
"""

from __future__ import annotations

import msgspec


class ChunkMeta(msgspec.Struct):
    """The part of SGLang's ``meta_info`` the router reads.

    ``finish_reason``: None until the last chunk, then SGLang's reason (``{"type": "stop" |
    "length" | "abort", ...}``). The token counts are absent from an abort's chunk. The logprob
    entries come with ``return_logprob`` only: one ``[logprob, id, text]`` (and one list of top
    entries) per output token, cumulative unless the server streams incrementally."""

    id: str
    finish_reason: dict | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    output_token_logprobs: list | None = None
    output_top_logprobs: list | None = None


class GenerateChunk(msgspec.Struct):
    """One streamed ``/generate`` chunk: ``output_ids`` (cumulative once the reader has merged
    an incremental stream's), ``meta_info``, and ``text`` (None on SGLang's intermediate chunks
    of a cumulative stream; the router detokenizes the ids itself)."""

    output_ids: list[int]
    meta_info: ChunkMeta
    text: str | None = None

    @property
    def finish_reason(self) -> dict | None:
        """SGLang's finish reason (None while the request runs)."""
        return self.meta_info.finish_reason


class PrefillMeta(msgspec.Struct):
    """The part of a prefill server's ``meta_info`` the router reads: its prefix-cache hit on
    the prompt (SGLang's ``cached_tokens``; None where the answer has none)."""

    cached_tokens: int | None = None


class PrefillAnswer(msgspec.Struct):
    """P's whole answer to a PD prefill sub-request (``/generate`` not streamed)."""

    meta_info: PrefillMeta = msgspec.field(default_factory=PrefillMeta)


def required_keys(struct: type[msgspec.Struct]) -> list[str]:
    """The keys a chunk must carry for ``struct`` (its fields without a default): what the
    upgrade check looks for in SGLang's tokenizer manager."""
    return [f.encode_name for f in msgspec.structs.fields(struct) if f.required]


DECODER = msgspec.json.Decoder(GenerateChunk)
