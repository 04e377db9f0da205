"""Send a workload to one contender at its fixed arrival times, concurrently, and record each
request (TTFT, inter-token gaps, E2E, output ids, PDD record).

One thread per session sends its turns in order: a turn goes at its arrival time, or when the
session's previous turn has finished if that is later (its prompt contains that turn's output);
such a late send is recorded. Side calls run on their own threads so they overlap the session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang_pdd.testbed.client import GenerateResult
from sglang_pdd.testbed.workload import Session

Sender = Callable[[dict], GenerateResult]


@dataclass
class RequestResult:
    """One request as the client saw it."""

    sid: int
    turn: int
    kind: str
    prompt_tokens: int
    at_s: float
    late_s: float  # sent this much after its arrival time (previous turn still running)
    status: int
    ttft_s: float | None
    e2e_s: float
    gaps_s: list[float] = field(default_factory=list)  # per streamed chunk after the first
    output_ids: list[int] = field(default_factory=list)
    record: dict | None = None  # meta_info["pdd"] when the contender is PDD
    error: str = ""
    prompt_ids: list[int] = field(default_factory=list, repr=False)


def _result(sid, k, turn, prompt, at, late, res: GenerateResult) -> RequestResult:
    times = [t for t, _ in res.token_times]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    meta = res.body.get("meta_info") or {}
    error = "" if res.status == 200 else str(res.body)[:300]
    return RequestResult(
        sid,
        k,
        turn.kind,
        len(prompt),
        at,
        late,
        res.status,
        res.ttft_s,
        res.latency_s,
        gaps,
        list(res.body.get("output_ids") or ()),
        meta.get("pdd"),
        error,
        list(prompt),
    )


def _request_body(prompt: list[int], turn) -> dict:
    """A turn's /generate body: greedy, exactly the turn's output length."""
    return {
        "input_ids": prompt,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": turn.max_new_tokens,
            "ignore_eos": True,
        },
    }


def run_workload(
    sessions: tuple[Session, ...],
    send: Sender,
    on_result: Callable[[RequestResult], None] | None = None,
) -> list[RequestResult]:
    """Replay ``sessions`` through ``send``; returns every request's result."""
    results: list[RequestResult] = []
    lock = threading.Lock()
    t0 = time.monotonic() + 0.5  # every session's clock starts together

    def record(r: RequestResult) -> None:
        with lock:
            results.append(r)
        if on_result is not None:
            on_result(r)

    def call(sid, k, turn, prompt, at):
        late = max(time.monotonic() - (t0 + at), 0.0)
        try:
            res = send(_request_body(prompt, turn))
        except Exception as exc:  # noqa: BLE001 - a failed request is a result, not a crash
            res = GenerateResult(599, {"error": repr(exc)})
        r = _result(sid, k, turn, prompt, at, late, res)
        record(r)
        return r

    def run_session(session: Session) -> None:
        history: list[int] = []
        side_threads = []
        for k, turn in enumerate(session.turns):
            delay = t0 + turn.at_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            prompt = history + list(turn.new_ids)
            if turn.kind == "side":
                th = threading.Thread(
                    target=call, args=(session.sid, k, turn, prompt, turn.at_s), daemon=True
                )
                th.start()
                side_threads.append(th)
                continue
            r = call(session.sid, k, turn, prompt, turn.at_s)
            history = prompt + r.output_ids
        for th in side_threads:
            th.join()

    threads = [threading.Thread(target=run_session, args=(s,), daemon=True) for s in sessions]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    results.sort(key=lambda r: (r.sid, r.turn))
    return results
