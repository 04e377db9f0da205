"""One forward's emulated duration, and the pacer that makes a real forward last that long.

``ForwardShape`` is what the step-time model needs of a batch (read from SGLang's
``ScheduleBatch`` by ``shape_of``); ``ForwardPacer`` turns it into seconds on the emulated chip,
waits out what the real CPU forward left of them, and counts overruns (a real forward slower than
its emulated duration: the emulated chip would have been faster than this host, so that forward's
time is the CPU's, not the chip's). The scheduler's own time before a forward counts toward it,
up to the step model's per-forward overhead: on the chip that is where scheduling happens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang_pdd.emulation.config import EmulationConfig


@dataclass(frozen=True)
class ForwardShape:
    """A batch as the step-time model sees it, in testbed tokens.

    extends: (new tokens, cached prefix) per extending request (prefill chunks, handoffs, the
        running requests of a mixed batch); decode_batch / decode_context: requests decoding
        one token each and the KV tokens they hold together."""

    extends: tuple[tuple[int, int], ...] = ()
    decode_batch: int = 0
    decode_context: int = 0

    @property
    def empty(self) -> bool:
        return not self.extends and self.decode_batch == 0


def shape_of(batch) -> ForwardShape:
    """The shape of SGLang's ``ScheduleBatch`` (``sglang_surface`` pins the fields read)."""
    mode = batch.forward_mode
    if mode.is_decode():
        # Req.seqlen: ScheduleBatch.seq_lens_sum is not kept on every path (PD decode)
        return ForwardShape(
            decode_batch=len(batch.reqs), decode_context=sum(r.seqlen for r in batch.reqs)
        )
    if mode.is_extend() and batch.extend_lens is not None:
        return ForwardShape(
            extends=tuple(
                zip(map(int, batch.extend_lens), map(int, batch.prefix_lens), strict=True)
            )
        )
    return ForwardShape()  # idle, prebuilt (PD's placeholder): nothing runs on the chip


@dataclass
class PacerStats:
    """Counters one server reports (log and /metrics)."""

    forwards: int = 0
    overruns: int = 0
    emulated_s: float = 0.0  # sum of emulated durations (dilated)
    real_s: float = 0.0  # sum of the real forwards' wall time
    overrun_s: float = 0.0  # how much the real forwards exceeded their emulated durations
    between_cpu_s: float = 0.0  # the scheduler thread's CPU between forwards
    iterations: int = 0  # forwards after which between_cpu_s was measured


@dataclass
class ForwardPacer:
    """Pads each forward to the emulated chip's duration; see the module docstring."""

    config: EmulationConfig
    on_decode_server: bool = False
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    thread_cpu: Callable[[], float] = time.thread_time
    stats: PacerStats = field(default_factory=PacerStats)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cpu_after_last: float | None = None
    _ended_at: float | None = None  # when the last padded forward ended
    _began: float = 0.0  # when the current forward really began

    @property
    def credit_s(self) -> float:
        """The most scheduler time between forwards a forward's emulated duration absorbs: the
        step model's per-forward overhead (``EngineProfile.step_overhead_s``: scheduling,
        launch, sampling), which the real scheduler spends before the forward starts."""
        return self.config.engine.step_overhead_s * self.config.time_dilation

    def duration(self, shape: ForwardShape) -> float:
        """Seconds the emulated chip takes for ``shape`` (time dilation applied)."""
        if shape.empty:
            return 0.0
        k = self.config.token_scale
        seconds = self.config.perf.forward_time(
            [(n * k, ctx * k) for n, ctx in shape.extends],
            shape.decode_batch,
            shape.decode_context * k,
            on_decode_server=self.on_decode_server,
        )
        return seconds * self.config.time_dilation

    def begin(self) -> float:
        """Call when a forward starts; returns the start of its emulated duration for ``end``:
        now, less the scheduler's time since the last forward ended up to ``credit_s`` (on the
        chip that time is part of the step). Charges the scheduler thread's CPU since the last
        forward to the iteration."""
        cpu = self.thread_cpu()
        if self._cpu_after_last is not None:
            with self._lock:
                self.stats.between_cpu_s += cpu - self._cpu_after_last
                self.stats.iterations += 1
        self._began = now = self.clock()
        if self._ended_at is None:
            return now
        return now - min(max(now - self._ended_at, 0.0), self.credit_s)

    def end(self, started: float, shape: ForwardShape) -> bool:
        """Wait until ``started`` plus the emulated duration; True when the real forward (with
        the credited scheduler time) already took longer: an overrun. Forwards the chip does
        not run are not counted."""
        target = self.duration(shape)
        if target <= 0:
            self._cpu_after_last = self.thread_cpu()
            return False
        now = self.clock()
        elapsed = now - started
        overrun = elapsed > target
        if not overrun:
            self.sleep(target - elapsed)
        with self._lock:
            s = self.stats
            s.forwards += 1
            s.emulated_s += target
            s.real_s += now - self._began
            if overrun:
                s.overruns += 1
                s.overrun_s += elapsed - target
        self._ended_at = self.clock()
        self._cpu_after_last = self.thread_cpu()
        return overrun
