"""What the emulated chips report in the servers' logs, and time dilation undone for reports.

Each emulated server logs ``sglang-pdd: emulation forwards=N overruns=M ...`` at most once a
second while it runs forwards (``sglang_pdd/emulation/runtime.py``); the testbed reads the last
line of each server before and after a contender's run. A run whose overruns exceed
``MAX_OVERRUN_FRACTION`` of its forwards measured the host, not the chips, and is not reported.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from sglang_pdd.emulation.runtime import LOG_PREFIX

MAX_OVERRUN_FRACTION = 0.01
_LINE = re.compile(re.escape(LOG_PREFIX) + r" forwards=(\d+) overruns=(\d+) ")


@dataclass(frozen=True)
class Overruns:
    """Forwards and overruns summed over servers (or a difference of two such sums)."""

    forwards: int = 0
    overruns: int = 0

    def __add__(self, other: Overruns) -> Overruns:
        return Overruns(self.forwards + other.forwards, self.overruns + other.overruns)

    def __sub__(self, other: Overruns) -> Overruns:
        return Overruns(self.forwards - other.forwards, self.overruns - other.overruns)

    @property
    def fraction(self) -> float:
        return self.overruns / self.forwards if self.forwards else 0.0

    @property
    def acceptable(self) -> bool:
        return self.fraction <= MAX_OVERRUN_FRACTION

    def describe(self) -> str:
        verdict = "ok" if self.acceptable else f"OVER the {100 * MAX_OVERRUN_FRACTION:g}% bound"
        return (
            f"overruns {self.overruns}/{self.forwards} forwards ({100 * self.fraction:.2f}%, "
            f"{verdict})"
        )


def last_counters(text: str) -> Overruns:
    """The last counters line of one server's log (zeros before its first)."""
    found = _LINE.findall(text)
    return Overruns(*map(int, found[-1])) if found else Overruns()


def counters(log_paths: list[Path]) -> Overruns:
    """The counters summed over the servers whose logs are ``log_paths``."""
    total = Overruns()
    for path in log_paths:
        total += last_counters(Path(path).read_text(errors="replace"))
    return total


def dilate_sessions(sessions, factor: float):
    """Every arrival time multiplied by ``factor`` (the emulation's time dilation)."""
    if factor == 1:
        return sessions
    return tuple(
        dataclasses.replace(
            s, turns=tuple(dataclasses.replace(t, at_s=t.at_s * factor) for t in s.turns)
        )
        for s in sessions
    )


def undilate_result(result, factor: float):
    """A ``RequestResult`` with its times divided by ``factor``: the emulated chips' time."""
    if factor == 1:
        return result
    return dataclasses.replace(
        result,
        at_s=result.at_s / factor,
        late_s=result.late_s / factor,
        ttft_s=None if result.ttft_s is None else result.ttft_s / factor,
        e2e_s=result.e2e_s / factor,
        gaps_s=[g / factor for g in result.gaps_s],
        record=_undilate_record(result.record, factor),
    )


def _undilate_record(record: dict | None, factor: float) -> dict | None:
    """PDD's ``meta_info.pdd`` record with its times (``*_s`` fields, numbers or lists of
    them such as ``handoff_gaps_s``, and ``phases``) divided."""
    if record is None:
        return None

    def is_time(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    out = {}
    for key, value in record.items():
        if key.endswith("_s") and is_time(value):
            value = value / factor
        elif key.endswith("_s") and isinstance(value, list) and all(map(is_time, value)):
            value = [v / factor for v in value]
        elif key == "phases" and isinstance(value, dict):
            value = {k: v / factor for k, v in value.items()}
        out[key] = value
    return out


def sla_goodput(results, ttft_s: float, itl_s: float) -> float:
    """Requests per second that met the SLA (TTFT and mean inter-token gap within bounds, as
    the simulator counts them: ``sim/metrics.py``) over the run's span, arrival to last end."""
    done = [r for r in results if r.status == 200 and r.ttft_s is not None]
    if not done:
        return 0.0
    good = sum(
        r.ttft_s <= ttft_s and (sum(r.gaps_s) / len(r.gaps_s) if r.gaps_s else 0.0) <= itl_s
        for r in done
    )
    span = max(r.at_s + r.late_s + r.e2e_s for r in done) - min(r.at_s for r in done)
    return good / span if span > 0 else 0.0
