"""``PddRecord``: what happened to one request, returned in ``meta_info["pdd"]`` and logged."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class PddRecord:
    """Per-request facts; times are seconds since the router received the request."""

    pipeline: str
    reason: str = ""  # why this pipeline, with the estimates the policy used
    instance_rid: str = ""  # this run's rids on the instances start with it (.p, .relay, ...)
    main: str = ""  # the Main-Decode chosen
    est_main_ready_s: float | None = None  # the policy's estimate of MD's first token
    waited_s: float | None = None  # time waited for a transfer of this prefix already on the link
    relay_tokens: int = 0
    main_tokens: int = 0
    main_ready_s: float | None = None
    handoff_s: float | None = None
    handoff_stall_s: float | None = None  # RLD's last token to MD's first, at the router
    handoff_to_main_s: float | None = None  # the final handoff sent to MD's first token back
    handoff_tokens: int = 0
    handoff_chunks: int = 0
    handoff_mode: str | None = None  # the mode in force at the first handoff step ("auto" resolved)
    handoff_deferrals: int = 0  # final handoffs MD sent back for lack of KV room (RLD served on)
    main_refused: str | None = None  # why MD did not take the request (it finished on RLD)
    relay_failed: str | None = None  # RLD failed with MD ready: MD took over at once
    relay_ids_dropped: int = 0  # RLD ids held back during the final handoff, never sent
    migrations: list[str] = field(default_factory=list)  # earlier runs left: which failed, when
    wan_bytes: int = 0
    main_cached_tokens: int | None = None
    first_token_s: float | None = None
    finished_on: str = ""

    def as_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class TokenDelta:
    """New output tokens for the client, and which instance made them.

    With ``return_logprob``: each token's entry of SGLang's ``output_token_logprobs`` and
    ``output_top_logprobs``, from the instance that produced the token."""

    token_ids: list[int]
    source: str  # "relay" | "main"
    logprobs: list | None = None
    top_logprobs: list | None = None


def token_logprobs(meta: dict, count: int) -> tuple[list, list]:
    """The entries of the last ``count`` output tokens in an instance's cumulative
    ``meta_info``. The tail, because Main-Decode's lists hold P's first token and then only the
    tokens it sampled itself, not the handed-off ones before them."""
    out = []
    for key in ("output_token_logprobs", "output_top_logprobs"):
        values = list(meta.get(key) or [])[-count:] if count else []
        out.append([None] * (count - len(values)) + values)
    return out[0], out[1]


@dataclass
class Finished:
    """The end of a request: SGLang's finish reason, prompt size and the PDD record."""

    finish_reason: dict | None
    prompt_tokens: int
    record: PddRecord
