"""Prefill and decode instances as event-driven servers on a simpy Environment.

Prefill: a FIFO queue served by chunked-prefill forwards of up to ``chunk_tokens`` new tokens;
several requests share a forward when they fit.

Decode: continuous batching, simulated as a fluid: between membership changes every member
advances one token per step and the step time is constant, so the instance needs one event per
join/leave rather than one per token. A step counter ``S`` measures progress; a member that
joined at S0 with n tokens to make finishes when S reaches S0 + n. Extend-Decode handoffs add
their recompute to one step (the whole batch stalls for the difference).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import simpy

from sglang_pdd.sim.chips import InstancePerf


def _at(env: simpy.Environment, delay: float, fn: Callable[[], None]) -> None:
    env.timeout(max(0.0, delay)).callbacks.append(lambda _e: fn())


@dataclass
class _PrefillJob:
    rid: int
    remaining: int
    context_done: int
    on_done: Callable[[int, float], None]
    on_chunk: Callable[[int, int, float], None] | None = None


class PrefillInstance:
    """One prefill instance: FIFO chunked prefill."""

    def __init__(self, env: simpy.Environment, perf: InstancePerf, name: str) -> None:
        self.env, self.perf, self.name = env, perf, name
        self._queue: deque[_PrefillJob] = deque()
        self.queued_tokens = 0
        self.busy = False
        self.busy_s = 0.0
        self.forwards = 0
        self.tokens_done = 0

    def submit(
        self,
        rid: int,
        new_tokens: int,
        cached_tokens: int,
        on_done: Callable[[int, float], None],
        on_chunk: Callable[[int, int, float], None] | None = None,
    ) -> None:
        """Queue a prefill of new_tokens on top of cached_tokens of reused prefix.

        on_chunk(rid, prompt_tokens_done, now) fires as each of its forwards ends (before
        on_done after the last)."""
        self._queue.append(_PrefillJob(rid, new_tokens, cached_tokens, on_done, on_chunk))
        self.queued_tokens += new_tokens
        if not self.busy:
            self._run_forward()

    def backlog_s(self) -> float:
        """Seconds of prefill queued, as the router reads them: the uncached tokens queued
        over the rate this instance has prefilled at (0 before its first forward)."""
        return self.queued_tokens * self.busy_s / self.tokens_done if self.tokens_done else 0.0

    def _run_forward(self) -> None:
        if not self._queue:
            self.busy = False
            return
        self.busy = True
        budget = self.perf.engine.chunk_tokens
        plan: list[tuple[_PrefillJob, int]] = []
        for job in self._queue:
            if budget <= 0:
                break
            take = min(job.remaining, budget)
            plan.append((job, take))
            budget -= take
        dt = self.perf.prefill_time([(take, job.context_done) for job, take in plan])
        self.busy_s += dt
        self.forwards += 1
        _at(self.env, dt, lambda: self._finish_forward(plan))

    def _finish_forward(self, plan: list[tuple[_PrefillJob, int]]) -> None:
        now = self.env.now
        finished = []
        for job, take in plan:
            job.remaining -= take
            job.context_done += take
            self.queued_tokens -= take
            self.tokens_done += take
            if job.remaining == 0:
                finished.append(job)
        while self._queue and self._queue[0].remaining == 0:
            self._queue.popleft()
        self._run_forward()
        for job, _ in plan:
            if job.on_chunk is not None:
                job.on_chunk(job.rid, job.context_done, now)
        for job in finished:
            job.on_done(job.rid, now)


@dataclass
class _Member:
    rid: int
    join_step: float
    target_step: float
    context: int
    reserved_kv: int
    on_done: Callable[[int, float], None]


@dataclass
class _Waiting:
    rid: int
    tokens: int
    context: int
    extend: int
    on_start: Callable[[int, float], None]
    on_done: Callable[[int, float], None]


class DecodeInstance:
    """One decode instance (RLD, MD or a PD decoder): fluid continuous batching."""

    def __init__(self, env: simpy.Environment, perf: InstancePerf, name: str) -> None:
        self.env, self.perf, self.name = env, perf, name
        self.max_batch = perf.engine.max_decode_batch
        self.kv_capacity = perf.kv_capacity_tokens
        self._members: dict[int, _Member] = {}
        self._heap: list[tuple[float, int, int]] = []
        self._seq = itertools.count()
        self._waiting: deque[_Waiting] = deque()
        self._step = 0.0
        self._step_time = 0.0
        self._last = 0.0
        self._stall_until = 0.0
        self._sum_context = 0
        self._sum_join = 0.0
        self._reserved_kv = 0
        self._version = 0
        # Token-weighted histogram of step times: {rounded step seconds: tokens}.
        self.itl_hist: dict[float, float] = {}
        self.tokens_made = 0.0
        self.busy_s = 0.0

    # --- load ---------------------------------------------------------------------------
    @property
    def batch(self) -> int:
        """Requests decoding now."""
        return len(self._members)

    @property
    def load(self) -> float:
        """Busy fraction: the larger of batch-slot and KV-memory use (waiting requests count)."""
        waiting_kv = sum(w.context + w.tokens for w in self._waiting)
        slots = (len(self._members) + len(self._waiting)) / self.max_batch
        return max(slots, (self._reserved_kv + waiting_kv) / self.kv_capacity)

    @property
    def step_s(self) -> float:
        """The current decode step's duration (0 while idle)."""
        return self._step_time

    # --- fluid clock --------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.env.now
        start = max(self._last, min(self._stall_until, now))
        if now > start and self._members and self._step_time > 0:
            steps = (now - start) / self._step_time
            self._step += steps
            made = steps * len(self._members)
            self.tokens_made += made
            key = round(self._step_time, 3)
            self.itl_hist[key] = self.itl_hist.get(key, 0.0) + made
        if self._members:
            self.busy_s += now - self._last
        self._last = now

    def _context_now(self) -> float:
        n = len(self._members)
        return self._sum_context + n * self._step - self._sum_join

    def _reschedule(self) -> None:
        self._version += 1
        n = len(self._members)
        self._step_time = self.perf.decode_step_time(n, self._context_now()) if n else 0.0
        while self._heap and self._heap[0][2] not in self._members:
            heapq.heappop(self._heap)
        if not self._heap:
            return
        version = self._version
        now = self.env.now
        start = max(now, self._stall_until)
        delay = start - now + max(0.0, self._heap[0][0] - self._step) * self._step_time
        _at(self.env, delay, lambda: self._complete(version))

    def _complete(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        done = []
        # Members due within a nanosecond finish now; smaller gaps are float noise that would
        # schedule zero-length timeouts forever.
        tol = 1e-9 / self._step_time if self._step_time > 0 else 1e-9
        while self._heap and self._heap[0][0] <= self._step + tol:
            target, _, rid = heapq.heappop(self._heap)
            m = self._members.get(rid)
            if m is not None and m.target_step == target:
                done.append(self._drop(rid))
        self._admit()
        self._reschedule()
        now = self.env.now
        for m in done:
            m.on_done(m.rid, now)

    def _drop(self, rid: int) -> _Member:
        m = self._members.pop(rid)
        self._sum_context -= m.context
        self._sum_join -= m.join_step
        self._reserved_kv -= m.reserved_kv
        return m

    # --- membership ---------------------------------------------------------------------
    def add(
        self,
        rid: int,
        tokens: int,
        context: int,
        on_start: Callable[[int, float], None],
        on_done: Callable[[int, float], None],
        extend: int = 0,
    ) -> None:
        """Decode ``tokens`` tokens for a request holding ``context`` tokens of KV.

        extend > 0: the first step also recomputes that many handed-off token IDs (their KV
        is rebuilt in the same forward). on_start(rid, first_token_time) fires at admission,
        on_done(rid, now) when the last token is out. Waits in FIFO if batch or KV is full.
        """
        if tokens < 1:
            raise ValueError(f"decode needs tokens >= 1, got {tokens}")
        self._waiting.append(_Waiting(rid, tokens, context, extend, on_start, on_done))
        self._advance()
        self._admit()
        self._reschedule()

    def _admit(self) -> None:
        while self._waiting:
            w = self._waiting[0]
            need = w.context + w.tokens
            full = len(self._members) >= self.max_batch
            if self._members and (full or self._reserved_kv + need > self.kv_capacity):
                return
            self._waiting.popleft()
            self._join(w)

    def _join(self, w: _Waiting) -> None:
        now = self.env.now
        need = w.context + w.tokens
        n = len(self._members) + 1
        ctx = self._context_now() + w.context
        step = self.perf.decode_step_time(n, ctx, w.extend, w.context)
        if w.extend:
            # The handoff's recompute rides one step; the batch waits for the longer forward.
            base = self.perf.decode_step_time(n, ctx)
            self._stall_until = max(self._stall_until, now) + (step - base)
        m = _Member(w.rid, self._step, self._step + w.tokens, w.context, need, w.on_done)
        self._members[w.rid] = m
        self._sum_context += w.context
        self._sum_join += m.join_step
        self._reserved_kv += need
        heapq.heappush(self._heap, (m.target_step, next(self._seq), w.rid))
        first = max(now, self._stall_until) + self.perf.decode_step_time(n, ctx)
        w.on_start(w.rid, first)

    def can_admit(self, tokens: int, context: int) -> bool:
        """Whether a request would start decoding now rather than queue."""
        if self._waiting:
            return False
        if not self._members:
            return True
        return (
            len(self._members) < self.max_batch
            and self._reserved_kv + context + tokens <= self.kv_capacity
        )

    def cancel_waiting(self, rid: int) -> bool:
        """Withdraw a request still queued for admission; False if it is not queued."""
        for i, w in enumerate(self._waiting):
            if w.rid == rid:
                del self._waiting[i]
                return True
        return False

    def tokens_so_far(self, rid: int) -> int:
        """Whole tokens a member has produced up to now."""
        self._advance()
        m = self._members[rid]
        return min(
            int(m.target_step - m.join_step), int(math.floor(self._step - m.join_step + 1e-9))
        )

    def has(self, rid: int) -> bool:
        """Whether rid is decoding here now."""
        return rid in self._members

    def stop(self, rid: int) -> int:
        """Stop a member early (RLD handing over); returns the tokens it produced."""
        made = self.tokens_so_far(rid)
        self._drop(rid)
        self._admit()
        self._reschedule()
        return made

    def add_extend_work(self, tokens: int, context: int) -> float:
        """A catch-up chunk recomputed on this instance outside its batch; returns its seconds."""
        self._advance()
        n = len(self._members)
        ctx = self._context_now()
        extra = self.perf.decode_step_time(n, ctx, tokens, context) - self.perf.decode_step_time(
            n, ctx
        )
        self._stall_until = max(self._stall_until, self.env.now) + extra
        self._reschedule()
        return self._stall_until - self.env.now
