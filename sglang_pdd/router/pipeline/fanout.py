"""Several prompts or samples in one request: batched ``/generate`` and ``n`` > 1.

SGLang answers a batch of B prompts with n samples each as B*n outputs, prompt-major (prompt
b's samples at b*n .. b*n+n-1): a list when not streaming, chunks tagged with ``index`` when
streaming. The router fans such a request out into B*n independent PDD requests (each planned,
relayed and handed off on its own) and merges their answers back in that order and shape.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sglang_pdd.router.pipeline.record import TokenDelta
from sglang_pdd.router.pipeline.run import ClientRun
from sglang_pdd.router.state import RouterState
from sglang_pdd.router.upstream.calls import UpstreamError


@dataclass(frozen=True)
class SubRequest:
    """One prompt and one sample of a client's request."""

    input_ids: list[int]
    sampling: dict
    extra: dict = field(default_factory=dict)


def _bad(message: str) -> UpstreamError:
    return UpstreamError(400, {"error": {"message": message, "code": 400}})


def sample_count(sampling: dict, name: str = "sampling_params.n") -> int:
    n = sampling.get("n", 1)
    if n is None:
        return 1
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise _bad(f"{name} must be a positive integer, got {n!r}")
    return n


def expand_generate(body: dict, tokenizer, extra: dict) -> tuple[list[SubRequest], bool]:
    """The sub-requests of a ``/generate`` body, and whether the answer is a list (a batch or
    n > 1). ``extra`` holds the fields every sub-request carries (logprob options)."""
    text, input_ids = body.get("text"), body.get("input_ids")
    batched = isinstance(text, list) or bool(input_ids) and isinstance(input_ids[0], list)
    if batched:
        prompts = (
            [tokenizer.encode(t) for t in text]
            if text is not None
            else [list(ids) for ids in input_ids]
        )
    else:
        prompts = [tokenizer.encode(text) if text is not None else list(input_ids)]
    if not prompts:
        raise _bad("an empty batch has nothing to generate")
    sampling = body.get("sampling_params") or {}
    per_prompt = sampling if isinstance(sampling, list) else [sampling] * len(prompts)
    if len(per_prompt) != len(prompts):
        raise _bad(f"sampling_params has {len(per_prompt)} entries for {len(prompts)} prompts")
    rid = body.get("rid")
    rids = rid if isinstance(rid, list) else [rid] * len(prompts)
    if len(rids) != len(prompts):
        raise _bad(f"rid has {len(rids)} entries for {len(prompts)} prompts")
    subs = []
    for ids, params, base in zip(prompts, per_prompt, rids, strict=True):
        n = sample_count(params)
        one = {k: v for k, v in params.items() if k != "n"}
        for j in range(n):
            sub_rid = base if n == 1 else (f"{base}-{j}" if base else None)
            subs.append(
                SubRequest(ids, dict(one), {**extra, **({"rid": sub_rid} if sub_rid else {})})
            )
    given = [s.extra["rid"] for s in subs if "rid" in s.extra]
    if len(set(given)) < len(given):
        raise _bad("rid repeats within the batch")
    return subs, batched or len(subs) > 1


def start_runs(state: RouterState, subs: list[SubRequest]) -> list[ClientRun]:
    """A ``ClientRun`` per sub-request; none is left registered if one cannot start. Past
    ``--max-live-requests`` in flight, a 503 (as SGLang's full request queue answers)."""
    limit = state.config.max_live_requests
    if len(state.live) + len(subs) > limit:
        why = (
            f"the router has {len(state.live)} requests in flight and takes at most {limit} "
            "(--max-live-requests); retry later"
        )
        state.metrics.refused_at_capacity.inc()
        # Retry-After: requests here last seconds; a second lets some of them end.
        raise UpstreamError(
            503, {"error": {"message": why, "code": 503}}, headers={"Retry-After": "1"}
        )
    runs: list[ClientRun] = []
    try:
        for sub in subs:
            runs.append(ClientRun(state, sub.input_ids, dict(sub.sampling), dict(sub.extra)))
    except Exception:
        for run in runs:
            state.live.pop(run.rid, None)
            state.run_in_background(run.run.close())
        raise
    return runs


async def merged_events(runs):
    """Yield ``(index, event)`` from several ``ClientRun``s as they come. A run is advanced only
    after its previous event was consumed (the consumer's text state must see each delta
    before the run's end is processed). A failing run raises here after the others are
    closed (their clean-up aborts them on every instance)."""
    streams = [run.events() for run in runs]
    loop = asyncio.get_running_loop()
    pending = {loop.create_task(anext(stream)): i for i, stream in enumerate(streams)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=pending.get):
                index = pending.pop(task)
                try:
                    event = task.result()
                except StopAsyncIteration:
                    continue
                yield index, event
                pending[loop.create_task(anext(streams[index]))] = index
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.gather(*(stream.aclose() for stream in streams), return_exceptions=True)


async def chain(first, rest):
    """``first``, then ``rest``'s items (the event read before an answer began, then the rest)."""
    yield first
    async for item in rest:
        yield item


async def read_all(runs: list[ClientRun], merged) -> None:
    """Every run's output into its text (``ClientRun.text``), until all ended."""
    async for index, event in merged:
        if isinstance(event, TokenDelta):
            runs[index].text.add(event.token_ids)
