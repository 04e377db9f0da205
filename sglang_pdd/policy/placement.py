"""Placement: a request's pipeline and its P, RLD and MD, chosen alike by router and simulator.

The router builds a ``ClusterSnapshot`` from its live state (cache views, the link ledger,
/v1/loads, its moving averages) and the simulator builds one from its modelled instances; both
call ``place`` on it, so the simulator makes the router's choices at the router's moment (the
request's arrival) from the same kind of estimates. Pure: no I/O, no clock.

Choices, in order of what matters most:
* Main-Decode: the one holding (or about to hold) most of the prompt (a session stays where
  its KV is), then the one whose KV would be ready first (what is queued on its link), then
  the one serving fewest requests, then the first listed;
* Prefill: the best prefix hit (P keeps its radix cache), then the fewest requests, then
  round-robin by ``turn``;
* Relay-Decode: the least loaded, round-robin by ``turn`` among equals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sglang_pdd.policy.pipeline import (
    PIPELINE_P_MD,
    PIPELINE_P_RLD,
    LinkEstimate,
    PipelineDecision,
    PipelinePolicy,
    RequestFacts,
)

# Weight of the newest sample in every moving average placement reads.
SMOOTHING = 0.2
# Seconds from arrival to P's KV at Relay-Decode assumed before any relayed request measured it.
PREFILL_PRIOR_S = 0.05


class MovingAverage:
    """An exponential moving average (``SMOOTHING``) starting from ``prior`` (None: from the
    first sample)."""

    def __init__(self, prior: float | None = None) -> None:
        self.value = prior

    def note(self, sample: float) -> None:
        """Fold in one measurement."""
        known = self.value
        self.value = sample if known is None else known + SMOOTHING * (sample - known)


# A request whose RLD or MD stream had this many gaps teaches its instance's pace (its mean gap).
PACE_MIN_GAPS = 8
# The measured MD/RLD pace ratio is trusted within these bounds (a few odd requests, e.g. one
# whose RLD stream was frozen, must not switch relaying off or on for everyone).
PACE_RATIO_BOUNDS = (0.25, 4.0)


def pace_ratio(main_s_per_id: float | None, relay_s_per_id: float | None) -> float:
    """Main-Decode's seconds per id over Relay-Decode's, within ``PACE_RATIO_BOUNDS``; 1.0
    while either is unmeasured."""
    if not main_s_per_id or not relay_s_per_id:
        return 1.0
    low, high = PACE_RATIO_BOUNDS
    return min(high, max(low, main_s_per_id / relay_s_per_id))


@dataclass(frozen=True)
class PrefillCandidate:
    """A prefill instance: the prompt tokens its cache holds, the requests it is serving and
    the seconds of prefill it has queued (0 when unknown)."""

    name: str
    hit_tokens: int
    active: int
    backlog_s: float = 0.0


@dataclass(frozen=True)
class RelayCandidate:
    """A Relay-Decode instance and its live load (0..1: the busier of batch slots and KV)."""

    name: str
    load: float


@dataclass(frozen=True)
class MainCandidate:
    """A Main-Decode instance.

    covered_tokens: prompt tokens its radix cache will hold once the transfer this prompt
        depends on has landed; link: the WAN path to it as a transfer started now would see it;
    active: requests it is serving.
    """

    name: str
    covered_tokens: int
    link: LinkEstimate
    active: int


@dataclass(frozen=True)
class ClusterSnapshot:
    """What placement sees of the cluster for one request (only instances it may use).

    prefill_s: expected seconds from arrival until P has prefilled (queue included);
    handoff_gap_s: what a final handoff costs the client; pace_ratio: Main-Decode's seconds per
    id over Relay-Decode's (1.0 until measured); turn: a counter the caller advances per
    request, for round-robin among equals.
    """

    prefills: tuple[PrefillCandidate, ...]
    relays: tuple[RelayCandidate, ...]
    mains: tuple[MainCandidate, ...]
    prefill_s: float
    handoff_gap_s: float
    kv_bytes_per_token: int
    turn: int = 0
    pace_ratio: float = 1.0


@dataclass(frozen=True)
class Placement:
    """The pipeline and the instances (by name) a request goes to.

    relay: None when no Relay-Decode is left; main: None when no Main-Decode is left (the
    decision is then P-RLD, rule ``failover``).
    """

    decision: PipelineDecision
    prefill: str
    relay: str | None
    main: str | None


def place(
    snapshot: ClusterSnapshot,
    input_tokens: int,
    max_output_tokens: int,
    policy: PipelinePolicy,
) -> Placement:
    """Pick the pipeline and the instances for one request.

    ValueError when the snapshot has no prefill instance or no decoding instance at all.
    """
    s = snapshot
    if not s.prefills or not (s.mains or s.relays):
        raise ValueError("no instance left to serve the request")
    relay_load = min((r.load for r in s.relays), default=0.0)
    prefill = min(_rotated(s.prefills, s.turn), key=lambda p: (-p.hit_tokens, p.active))
    best = None
    for main in s.mains:
        facts = RequestFacts(
            input_tokens=input_tokens,
            main_cached_tokens=main.covered_tokens,
            max_output_tokens=max_output_tokens,
            kv_bytes_per_token=s.kv_bytes_per_token,
        )
        decision = policy.decide(
            facts,
            main.link,
            relay_load,
            prefill_s=s.prefill_s,
            handoff_gap_s=s.handoff_gap_s,
            pace_ratio=s.pace_ratio,
            prefill_backlog_s=prefill.backlog_s,
        )
        key = (-main.covered_tokens, round(decision.est_main_ready_s, 2), main.active)
        if best is None or key < best[0]:
            best = (key, decision, main.name)
    if best is None:  # no Main-Decode left: Relay-Decode finishes the request
        decision = PipelineDecision(
            PIPELINE_P_RLD, "no Main-Decode left", 0, math.inf, rule="failover"
        )
        main_name = None
    else:
        _, decision, main_name = best
        if not s.relays and decision.pipeline != PIPELINE_P_MD:
            decision = replace(
                decision,
                pipeline=PIPELINE_P_MD,
                rule="failover",
                reason="no Relay-Decode left; " + decision.reason,
            )
    relay = min(_rotated(s.relays, s.turn), key=lambda r: r.load).name if s.relays else None
    return Placement(decision, prefill.name, relay, main_name)


def _rotated(items: tuple, turn: int) -> tuple:
    """``items`` starting at ``turn`` (mod their count): ``min`` then breaks ties round-robin."""
    start = turn % len(items)
    return items[start:] + items[:start]
