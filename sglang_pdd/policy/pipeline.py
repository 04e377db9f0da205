"""Per-request pipeline choice: P-MD, P-RLD-MD, or (anomalous traffic only) P-RLD.

This module is shared by the router (live decisions) and the simulator (replayed decisions), so
both use exactly the same rule. It is pure Python and imports nothing from SGLang.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sglang_pdd.options import option

PIPELINE_P_MD = "P-MD"
PIPELINE_P_RLD_MD = "P-RLD-MD"
PIPELINE_P_RLD = "P-RLD"
PIPELINES = (PIPELINE_P_MD, PIPELINE_P_RLD_MD, PIPELINE_P_RLD)
# The longest --prefill-backlog-window-s: the router keeps about two minutes of P's looks.
MAX_BACKLOG_WINDOW_S = 60.0


def _check_non_negative_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def _check_finite(name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if not positive and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


@dataclass(frozen=True)
class PipelinePolicyConfig:
    """How the router picks a pipeline for each request.

    ttft_slo_s: the operator's TTFT objective. A request whose first token from Main-Decode is
        estimated to come later than this (prefill, then the KV's wait on the live link) goes
        through RLD (P-RLD-MD), which streams while the WAN transfer runs; otherwise P-MD.
        0 relays every request. None (the default): an objective relative to what RLD gives:
        relay when RLD's head start outweighs what a handoff costs the client (the router's
        measured handoff gap), which is when relaying ends the whole answer sooner too. The
        head start is the ids RLD makes until the router learns MD's KV has landed (the KV's
        wait on the link plus MD's "ready" crossing back, half an RTT), valued in MD's time:
        each saves MD one id, so it is scaled by MD's seconds per id over RLD's (the
        ``pace_ratio`` the router measures).
    enable_relay: False turns PDD into plain cross-datacenter PD (every request P-MD).
    enable_anomaly_filter: block the WAN transfer of long-input / short-output requests whose
        transfer would be slow and let RLD finish them (P-RLD).
    anomaly_min_input_tokens, anomaly_max_output_tokens: what "long input" and "short output"
        mean for the filter.
    max_relay_load: when the least-loaded RLD is at least this busy (batch slots or KV memory,
        1.0 = full), relaying only queues the request behind RLD, so it goes P-MD instead.
    relay_shares_prefill: RLD runs on Prefill's chips (or cores). Each id RLD decodes then
        takes compute from P, so while P has prefills queued, relaying one request delays the
        first token of every request waiting for P (measured: docs/testbed.md). A topology file
        sets it when a Relay-Decode and a Prefill share a host and chips.
    prefill_backlog_limit_s: with ``relay_shares_prefill``, requests go P-MD while P has more
        than this many seconds of prefill queued (its /v1/loads' waiting uncached tokens over
        its measured prefill rate). Not applied with ``ttft_slo_s`` 0 (relay every request).
    prefill_backlog_window_s: ... and has had more than that at every look for this long (0,
        the default: the last look alone). Meant to tell a standing queue from a burst P is
        about to clear (a relayed request decodes only after what is queued ahead of it); on
        the testbed a 2 s window yielded less and did no better (docs/testbed.md).
    """

    ttft_slo_s: float | None = option(
        None,
        "TTFT objective: a request whose first token from Main-Decode (prefill plus the KV's "
        "time on the live link) is estimated later than this streams from Relay-Decode first "
        "(P-RLD-MD); 0: always relay. Default: relay when RLD's head start (the KV's wait on the "
        "link plus half an RTT, scaled by MD's measured seconds per id over RLD's) exceeds the "
        "measured handoff gap (relaying then ends the whole answer sooner, not only its first "
        "token)",
    )
    enable_relay: bool = option(True, "P-MD only (no Relay-Decode)", flag="--no-relay")
    enable_anomaly_filter: bool = option(
        True,
        "never finish long-input/short-output requests on Relay-Decode alone",
        flag="--no-anomaly-filter",
    )
    anomaly_min_input_tokens: int = option(32768, "anomaly filter: inputs at least this long ...")
    anomaly_max_output_tokens: int = option(
        32, "... with max_new_tokens at most this finish on RLD alone (P-RLD)"
    )
    max_relay_load: float = option(
        1.0, "send requests P-MD when the least busy RLD's live load reaches this (1.0: full)"
    )
    relay_shares_prefill: bool = option(
        False,
        "Relay-Decode runs on Prefill's chips or cores (a topology file sets this when they "
        "share a host and chips): while P has prefills queued, requests go P-MD, since RLD's "
        "decoding would delay them",
    )
    prefill_backlog_limit_s: float = option(
        0.5,
        "with --relay-shares-prefill: requests go P-MD while P has more than this many seconds "
        "of prefill queued (not with --ttft-slo-s 0)",
    )
    prefill_backlog_window_s: float = option(
        0.0,
        "with --relay-shares-prefill: ... and has had more than --prefill-backlog-limit-s "
        "queued at every look for this many seconds (a standing queue, not a burst); 0: the "
        "last look alone; at most 60",
    )

    def __post_init__(self) -> None:
        if self.ttft_slo_s is not None:
            _check_finite("ttft_slo_s", self.ttft_slo_s, positive=False)
        _check_finite("max_relay_load", self.max_relay_load, positive=True)
        _check_finite("prefill_backlog_limit_s", self.prefill_backlog_limit_s, positive=False)
        _check_finite("prefill_backlog_window_s", self.prefill_backlog_window_s, positive=False)
        if self.prefill_backlog_window_s > MAX_BACKLOG_WINDOW_S:
            raise ValueError(
                f"prefill_backlog_window_s must be between 0 and {MAX_BACKLOG_WINDOW_S}, "
                f"got {self.prefill_backlog_window_s!r}"
            )
        for flag in ("enable_relay", "enable_anomaly_filter", "relay_shares_prefill"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        _check_non_negative_int("anomaly_min_input_tokens", self.anomaly_min_input_tokens)
        if self.anomaly_min_input_tokens < 1:
            raise ValueError(
                f"anomaly_min_input_tokens must be >= 1, got {self.anomaly_min_input_tokens!r}"
            )
        _check_non_negative_int("anomaly_max_output_tokens", self.anomaly_max_output_tokens)


@dataclass(frozen=True)
class RequestFacts:
    """What the router knows about a request when its prefill is scheduled.

    main_cached_tokens: prompt tokens MD's decode-side radix cache already holds (may exceed
        input_tokens when a full cached block covers a partial last block; it is capped).
    max_output_tokens: the request's output budget (max_tokens), the router's only view of its
        output length.
    """

    input_tokens: int
    main_cached_tokens: int
    max_output_tokens: int
    kv_bytes_per_token: int

    def __post_init__(self) -> None:
        for name in ("input_tokens", "main_cached_tokens", "max_output_tokens"):
            _check_non_negative_int(name, getattr(self, name))
        _check_non_negative_int("kv_bytes_per_token", self.kv_bytes_per_token)

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens MD lacks, which must cross the WAN."""
        return max(0, self.input_tokens - self.main_cached_tokens)


@dataclass(frozen=True)
class LinkEstimate:
    """The router's current view of the P->MD WAN path.

    bandwidth_bytes_per_s: throughput one more transfer can expect (e.g. fair share).
    backlog_bytes: bytes queued ahead of this transfer that it cannot overtake.
    """

    bandwidth_bytes_per_s: float
    rtt_s: float
    backlog_bytes: float = 0.0

    def __post_init__(self) -> None:
        _check_finite("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, positive=True)
        _check_finite("rtt_s", self.rtt_s, positive=False)
        _check_finite("backlog_bytes", self.backlog_bytes, positive=False)

    def transfer_time_s(self, nbytes: float) -> float:
        """Estimated seconds until nbytes sent now are fully received."""
        return self.rtt_s + (self.backlog_bytes + nbytes) / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class PipelineDecision:
    """The chosen pipeline, why, the bytes it puts on the WAN and when MD should have the KV."""

    pipeline: str
    reason: str
    wan_bytes: int
    est_main_ready_s: float
    rule: str = ""  # a short, fixed name of the rule that decided (a metrics label)


class PipelinePolicy:
    """Chooses P-MD or P-RLD-MD per request (and P-RLD for filtered anomalous traffic).

    P-RLD is never chosen for ordinary low-hit requests: finishing them locally would let MD's
    decode-side cache fall behind P's, making more requests look low-hit and overloading RLD.
    """

    def __init__(self, config: PipelinePolicyConfig | None = None) -> None:
        self.config = config or PipelinePolicyConfig()

    def _over_objective(
        self,
        est: float,
        prefill_s: float,
        link: LinkEstimate,
        handoff_gap_s: float | None,
        pace_ratio: float,
    ) -> tuple[bool, str]:
        """Whether a request whose first token from MD is expected after ``est`` seconds is
        worth relaying, and the objective it was weighed against (for the decision's reason)."""
        cfg = self.config
        if cfg.ttft_slo_s is not None:
            return est > cfg.ttft_slo_s, f"SLO {cfg.ttft_slo_s}s"
        gap = link.rtt_s if handoff_gap_s is None else handoff_gap_s
        _check_finite("handoff_gap_s", gap, positive=False)
        _check_finite("pace_ratio", pace_ratio, positive=True)
        # RLD streams until MD's "ready" reaches the router (half an RTT after the KV
        # landed); each id it makes is one MD need not make, worth MD's time per id.
        wait = est - prefill_s
        head_start = (wait + link.rtt_s / 2) * pace_ratio
        return head_start > gap, (
            f"RLD head start {head_start:.2f}s (KV wait {wait:.2f}s + {link.rtt_s / 2:.2f}s, "
            f"x{pace_ratio:.2f} MD/RLD s per id) vs handoff gap {gap:.2f}s"
        )

    def decide(
        self,
        facts: RequestFacts,
        link: LinkEstimate,
        relay_load: float = 0.0,
        *,
        prefill_s: float = 0.0,
        handoff_gap_s: float | None = None,
        pace_ratio: float = 1.0,
        prefill_backlog_s: float = 0.0,
    ) -> PipelineDecision:
        """Pick the pipeline for one request given its cache facts and the link's state.

        link: the live state of the path to the chosen MD (throughput, bytes queued ahead).
        relay_load: busy fraction of the least-loaded RLD (0 when unknown).
        prefill_s: the expected time until P has prefilled it (queue included).
        handoff_gap_s: what a final handoff costs the client (the router's measured gap;
            default: the link's RTT), for the relative objective (``ttft_slo_s`` None).
        pace_ratio: MD's seconds per id over RLD's (1.0 until measured), for the relative
            objective: what one id RLD makes before the handoff saves of MD's time.
        prefill_backlog_s: seconds of prefill queued on the chosen P (0 when unknown), for
            ``relay_shares_prefill``.
        """
        cfg = self.config
        if not isinstance(relay_load, (int, float)) or not relay_load >= 0:
            raise ValueError(f"relay_load must be a number >= 0, got {relay_load!r}")
        _check_finite("prefill_s", prefill_s, positive=False)
        _check_finite("prefill_backlog_s", prefill_backlog_s, positive=False)
        wan_bytes = facts.uncached_tokens * facts.kv_bytes_per_token
        est = prefill_s + link.transfer_time_s(wan_bytes)
        why = (
            f"MD first token ~{est:.2f}s (prefill {prefill_s:.2f}s, {wan_bytes / 1e3:.0f} kB "
            f"behind {link.backlog_bytes / 1e3:.0f} kB at "
            f"{link.bandwidth_bytes_per_s * 8 / 1e6:.1f} Mbit/s, +{link.rtt_s:.2f}s)"
        )
        slow, objective = self._over_objective(est, prefill_s, link, handoff_gap_s, pace_ratio)

        def via(pipeline: str, reason: str, rule: str) -> PipelineDecision:
            return PipelineDecision(pipeline, reason, wan_bytes, est, rule)

        if not cfg.enable_relay:
            return via(PIPELINE_P_MD, f"relay disabled; {why}", "relay_disabled")
        if not slow:
            return via(PIPELINE_P_MD, f"{why}, within {objective}", "within_slo")
        if relay_load >= cfg.max_relay_load:
            why += f", over {objective}, but RLD load {relay_load:.2f} >= {cfg.max_relay_load}"
            return via(PIPELINE_P_MD, why, "relay_busy")
        if (
            cfg.enable_anomaly_filter
            and facts.input_tokens >= cfg.anomaly_min_input_tokens
            and facts.max_output_tokens <= cfg.anomaly_max_output_tokens
        ):
            return PipelineDecision(
                PIPELINE_P_RLD,
                f"anomalous: input {facts.input_tokens} >= {cfg.anomaly_min_input_tokens}, "
                f"output <= {cfg.anomaly_max_output_tokens}, {why}; RLD finishes",
                0,
                math.inf,
                "anomalous",
            )
        if (
            cfg.relay_shares_prefill
            and cfg.ttft_slo_s != 0
            and prefill_backlog_s > cfg.prefill_backlog_limit_s
        ):
            why += (
                f", over {objective}, but P has {prefill_backlog_s:.2f}s of prefill queued "
                f"(> {cfg.prefill_backlog_limit_s}s) and RLD shares its hardware"
            )
            return via(PIPELINE_P_MD, why, "prefill_busy")
        return via(PIPELINE_P_RLD_MD, f"{why}, over {objective}: RLD streams first", "over_slo")
