"""``PddRecord``: what happened to one request, returned in ``meta_info["pdd"]`` and logged."""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_pdd.router.upstream.chunks import ChunkMeta


@dataclass
class PddRecord:
    """Per-request facts; times are seconds since the router received the request."""

    pipeline: str
    reason: str = ""  # why this pipeline, with the estimates the policy used
    rule: str = ""  # the policy's rule that chose it (the requests metric's label, e.g. within_slo)
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
    main_answer_s: float | None = None  # MD's first chunk after the final handoff, at the router
    # MD's side of the last final handoff it took (its "extended" event): how long the handoff
    # waited on MD (for a batch or KV room), and how long its extend batch ran.
    main_waited_s: float | None = None
    main_extend_s: float | None = None
    handoff_tokens: int = 0
    handoff_chunks: int = 0
    handoff_mode: str | None = None  # the mode in force at the first handoff step ("auto" resolved)
    handoff_switch: str | None = None  # "overlap" (RLD streams on) or "hold" (RLD's ids held)
    handoff_deferrals: int = 0  # final handoffs MD sent back for lack of KV room (RLD served on)
    main_refused: str | None = None  # why MD did not take the request (it finished on RLD)
    relay_failed: str | None = None  # RLD failed with MD ready: MD took over at once
    kept_on_relay: str | None = None  # why no handoff was made (RLD finishes sooner)
    relay_ids_dropped: int = 0  # RLD ids held back during the final handoff, never sent
    migrations: list[str] = field(default_factory=list)  # earlier runs left: which failed, when
    wan_bytes: int = 0
    main_cached_tokens: int | None = None
    prompt_cached_tokens: int | None = None  # P's prefix-cache hit on the prompt (usage's)
    first_token_s: float | None = None
    finished_on: str = ""
    # Where the answer's time went (seconds since the router received the request):
    prefill_s: float | None = None  # P answered its sub-request (P's queue, prefill, KV sent)
    # P answered MD's sub-request of P-RLD-MD (MD had the request and P had sent its KV)
    main_prefill_s: float | None = None
    relay_last_s: float | None = None  # RLD's last id sent to the client
    main_first_s: float | None = None  # MD's first id sent to the client
    e2e_s: float | None = None  # the last id sent (the request's end)
    # The client-visible gap at each final handoff: the last id sent before it to the next id
    # sent after it (MD's first, or RLD's held ids when MD deferred or refused it). Overlap:
    # one, at the switch (the last id, RLD's, to MD's next).
    handoff_gaps_s: list[float] = field(default_factory=list)
    relay_itl_s: float | None = None  # mean gap between RLD's chunks at the router
    main_itl_s: float | None = None  # mean gap between MD's chunks at the router
    main_itl_max_s: float | None = None

    def phases(self) -> dict[str, float]:
        """The request's E2E split into consecutive phases that add up to ``e2e_s``: to the
        first token (router wait, P's queue and prefill, KV to the first decoder, its first
        step), RLD's streaming, the handoff gap (RLD's last id to MD's first) and MD's
        streaming. Empty until the request finished."""
        if self.e2e_s is None or self.first_token_s is None:
            return {}
        out = {"to_first_token": self.first_token_s}
        relayed, mained = self.relay_last_s is not None, self.main_first_s is not None
        if relayed and mained:
            out["relay"] = self.relay_last_s - self.first_token_s
            out["handoff_gap"] = self.main_first_s - self.relay_last_s
            out["main"] = self.e2e_s - self.main_first_s
        elif relayed:
            out["relay"] = self.e2e_s - self.first_token_s
        else:
            out["main"] = self.e2e_s - self.first_token_s
        return out

    def as_dict(self) -> dict:
        """The fields (floats to 0.1 ms) and ``phases``. Runs for every streamed chunk (it is
        ``meta_info["pdd"]``): a flat copy, not ``dataclasses.asdict``'s deep one (9x the time;
        every field is a scalar or a list of scalars)."""
        out = {}
        for name, value in self.__dict__.items():  # the fields, in order (no other attributes)
            kind = type(value)
            if kind is float:
                value = round(value, 4)
            elif kind is list:
                value = [round(v, 4) if type(v) is float else v for v in value]
            out[name] = value
        out["phases"] = {k: round(v, 4) for k, v in self.phases().items()}
        return out


@dataclass
class TokenDelta:
    """New output tokens for the client, and which instance made them.

    With ``return_logprob``: each token's entry of SGLang's ``output_token_logprobs`` and
    ``output_top_logprobs``, from the instance that produced the token."""

    token_ids: list[int]
    source: str  # "relay" | "main"
    logprobs: list | None = None
    top_logprobs: list | None = None


def token_logprobs(meta: ChunkMeta, count: int) -> tuple[list, list]:
    """The entries of the last ``count`` output tokens in an instance's cumulative
    ``meta_info``. The tail, because Main-Decode's lists hold P's first token and then only the
    tokens it sampled itself, not the handed-off ones before them."""
    out = []
    for entries in (meta.output_token_logprobs, meta.output_top_logprobs):
        values = list(entries or [])[-count:] if count else []
        out.append([None] * (count - len(values)) + values)
    return out[0], out[1]


@dataclass
class Finished:
    """The end of a request: SGLang's finish reason, prompt size and the PDD record."""

    finish_reason: dict | None
    prompt_tokens: int
    record: PddRecord
    # The mean gap between MD's (RLD's) chunks when the answer had enough of them to tell the
    # instance's pace (``RouterState.note_main_itl``, ``note_relay_itl``); else None.
    main_pace_s: float | None = None
    relay_pace_s: float | None = None
