"""Migration by token ids: a request whose instance failed or went silent continues on other
instances from its prompt plus the ids the client already has.

The ids the client has become part of the new run's prompt; P prefills them, and the new run's
first token is the one the failed instance would have sent next. That holds token for token only
when the next tokens depend on nothing but the ids so far: greedy sampling without state that
lives inside an instance (penalties count output tokens, a grammar's automaton, stop strings
matched on an instance's own output text). Other requests are not migrated: they end with the
failed instance's error, as before.
"""

from __future__ import annotations

from sglang_pdd.router.pipeline.request_fields import max_new_tokens
from sglang_pdd.router.upstream.calls import UpstreamError

# Sampling fields whose state lives on the instance that generated the output so far.
_STATEFUL = (
    "frequency_penalty",
    "presence_penalty",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "stop",
    "stop_regex",
)


def migration_refused(
    exc: UpstreamError, body: dict, emitted: list[int], done: int, limit: int
) -> str | None:
    """Why the request may not continue elsewhere after ``exc`` (None: it may).

    ``emitted``: the ids the client has; ``done``: migrations already made; ``limit``: the most
    a request may make (``--migration-limit``)."""
    if exc.instance is None:
        return "the error is about the request, not a failed instance"
    if done >= limit:
        return f"--migration-limit {limit} reached"
    sampling = body.get("sampling_params") or {}
    if float(sampling.get("temperature", 1.0)) != 0.0 and int(sampling.get("top_k", -1)) != 1:
        return "sampling is not greedy (temperature 0 or top_k 1): a replay would draw again"
    for field in _STATEFUL:
        if sampling.get(field):
            return f"sampling_params.{field} keeps state on the instance that generated"
    if float(sampling.get("repetition_penalty", 1.0)) != 1.0:
        return "sampling_params.repetition_penalty keeps state on the instance that generated"
    if max_new_tokens(sampling) <= len(emitted):
        return "every token was already sent"
    return None


def continuation(body: dict, emitted: list[int]) -> dict:
    """The request that continues ``body`` after the client received ``emitted``."""
    sampling = dict(body.get("sampling_params") or {})
    sampling["max_new_tokens"] = max_new_tokens(sampling) - len(emitted)
    if sampling.get("min_new_tokens"):
        sampling["min_new_tokens"] = max(0, int(sampling["min_new_tokens"]) - len(emitted))
    return {**body, "input_ids": [*body["input_ids"], *emitted], "sampling_params": sampling}
