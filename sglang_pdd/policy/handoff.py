"""RLD -> MD handoff: One-Shot, Catch-Up, or switching between them by RLD's live load.

Shared by the router and the simulator. A handoff sends MD the token IDs RLD generated; MD
rebuilds their KV with one extend pass and then decodes on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sglang_pdd.options import option

HANDOFF_MODES = ("one-shot", "catch-up", "auto")
# Seconds after Main-Decode deferred a final handoff (no KV room; RLD streams on) until it is
# made again: the router's --handoff-retry-s default and the simulator's retry.
HANDOFF_RETRY_S = 0.5


@dataclass(frozen=True)
class HandoffPolicyConfig:
    """How RLD hands a request over to MD.

    mode: "one-shot" (RLD stops, hands over everything: shortest RLD time, one bigger extend),
        "catch-up" (while the backlog exceeds catchup_threshold_tokens, hand over chunks of
        catchup_chunk_tokens while RLD keeps generating), or "auto" (catch-up while RLD's load
        is below auto_relay_busy_fraction, one-shot when RLD is busy).
    """

    mode: str = option(
        "one-shot",
        "how RLD hands a request over to MD",
        flag="--handoff-mode",
        choices=HANDOFF_MODES,
    )
    catchup_threshold_tokens: int = option(
        64,
        "Catch-Up: hand over in chunks while the backlog exceeds this",
        flag="--catchup-threshold",
    )
    catchup_chunk_tokens: int = option(64, "Catch-Up chunk size (tokens)", flag="--catchup-chunk")
    auto_relay_busy_fraction: float = option(
        0.8, "--handoff-mode auto: Catch-Up while RLD's live load is below this, One-Shot above"
    )

    def __post_init__(self) -> None:
        if self.mode not in HANDOFF_MODES:
            raise ValueError(f"mode must be one of {', '.join(HANDOFF_MODES)}; got {self.mode!r}")
        for name in ("catchup_threshold_tokens", "catchup_chunk_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        frac = self.auto_relay_busy_fraction
        if (
            isinstance(frac, bool)
            or not isinstance(frac, (int, float))
            or not math.isfinite(frac)
            or not 0 <= frac <= 1
        ):
            raise ValueError(f"auto_relay_busy_fraction must be in [0, 1], got {frac!r}")


@dataclass(frozen=True)
class HandoffPlan:
    """One handoff step: mode in force, tokens to send MD now, whether RLD keeps decoding."""

    mode: str
    tokens_now: int
    relay_continues: bool


class HandoffPolicy:
    """Decides each handoff step from the backlog (tokens RLD made that MD lacks) and RLD load."""

    def __init__(self, config: HandoffPolicyConfig | None = None) -> None:
        self.config = config or HandoffPolicyConfig()

    def effective_mode(self, relay_load: float) -> str:
        """The mode in force for RLD's current load (resolves "auto")."""
        if self.config.mode != "auto":
            return self.config.mode
        return "catch-up" if relay_load < self.config.auto_relay_busy_fraction else "one-shot"

    def plan(self, backlog_tokens: int, relay_load: float) -> HandoffPlan:
        """Plan the next handoff step.

        relay_load: RLD's busy fraction (e.g. used KV or batch slots / capacity), >= 0.
        """
        if isinstance(backlog_tokens, bool) or not isinstance(backlog_tokens, int):
            raise ValueError(f"backlog_tokens must be an integer >= 0, got {backlog_tokens!r}")
        if backlog_tokens < 0:
            raise ValueError(f"backlog_tokens must be an integer >= 0, got {backlog_tokens!r}")
        if not isinstance(relay_load, (int, float)) or not relay_load >= 0:
            raise ValueError(f"relay_load must be a number >= 0, got {relay_load!r}")
        mode = self.effective_mode(relay_load)
        cfg = self.config
        if mode == "one-shot" or backlog_tokens <= cfg.catchup_threshold_tokens:
            # Small backlogs go in one piece: the extend is short enough to be imperceptible.
            return HandoffPlan(mode, backlog_tokens, False)
        return HandoffPlan(mode, min(backlog_tokens, cfg.catchup_chunk_tokens), True)
