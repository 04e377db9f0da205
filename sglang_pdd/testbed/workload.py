"""Workloads for the testbed: agentic multi-turn sessions and Mooncake-format trace replays.

A workload is a tuple of ``Session``s; each turn has a fixed arrival time (seconds from the
start), the token ids it appends to the session's history, and an output budget. A turn's prompt
is the session's history: every earlier turn's new ids and output, so consecutive turns share a
growing prefix exactly as an agent's context grows. Side calls see the history but their output
is not appended (an agent's sub-query). Outputs are produced with ``ignore_eos`` so that every
contender decodes the same number of tokens.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from sglang_pdd.cache.prefix_blocks import block_hashes

# Token ids drawn for generated text: inside the tiny model's byte range, away from specials.
TOKEN_RANGE = (10, 250)


@dataclass(frozen=True)
class Turn:
    """One request of a session."""

    at_s: float  # fixed arrival time, seconds from the workload's start
    new_ids: tuple[int, ...]  # appended to the history before this request
    max_new_tokens: int
    kind: str = "user"  # "user", "tool" (a tool result), "cold" (a fresh document), "side"


@dataclass(frozen=True)
class Session:
    sid: int
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class AgenticConfig:
    """An agentic multi-turn workload shaped like the brief's traffic, scaled to a CPU testbed.

    Every session starts with a system prompt shared by all sessions plus its own context, then
    alternates user messages and tool results; a few turns bring a fresh long document (the cold
    tail, low prefix hit); some turns are side calls with short outputs.
    """

    sessions: int = 6
    turns: int = 6
    system_tokens: int = 400
    context_tokens: int = 1600
    user_tokens: int = 40
    tool_tokens: int = 200
    tool_fraction: float = 0.4
    cold_fraction: float = 0.1
    cold_tokens: int = 1500
    side_call_fraction: float = 0.15
    side_call_output_tokens: int = 24
    output_tokens: int = 300
    turn_interval_s: float = 8.0
    stagger_s: float = 1.5
    seed: int = 0
    # A session ends before a turn whose prompt plus output would exceed this (the model's
    # context length): its history grows by every turn's new ids and output.
    max_context_tokens: int = 8000

    def __post_init__(self) -> None:
        for name in ("sessions", "turns", "output_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        for name in ("tool_fraction", "cold_fraction", "side_call_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"--{name.replace('_', '-')} must be within [0, 1]")
        if self.turn_interval_s <= 0 or self.stagger_s < 0:
            raise ValueError("--turn-interval-s must be > 0 and --stagger-s >= 0")


def _tokens(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(*TOKEN_RANGE) for _ in range(n))


def agentic_sessions(cfg: AgenticConfig) -> tuple[Session, ...]:
    """Generate the agentic workload (deterministic for a seed)."""
    rng = random.Random(cfg.seed)
    system = _tokens(rng, cfg.system_tokens)
    sessions = []
    for sid in range(cfg.sessions):
        start = sid * cfg.stagger_s
        turns = [Turn(start, system + _tokens(rng, cfg.context_tokens), _output(rng, cfg))]
        history = len(turns[0].new_ids) + turns[0].max_new_tokens
        for k in range(1, cfg.turns):
            at = start + k * cfg.turn_interval_s
            roll = rng.random()
            if roll < cfg.cold_fraction:
                turn = Turn(at, _tokens(rng, cfg.cold_tokens), _output(rng, cfg), "cold")
            elif roll < cfg.cold_fraction + cfg.tool_fraction:
                turn = Turn(at, _tokens(rng, cfg.tool_tokens), _output(rng, cfg), "tool")
            else:
                turn = Turn(at, _tokens(rng, cfg.user_tokens), _output(rng, cfg))
            side = None
            if rng.random() < cfg.side_call_fraction:
                side = Turn(
                    at + cfg.turn_interval_s / 2,
                    _tokens(rng, cfg.user_tokens),
                    cfg.side_call_output_tokens,
                    "side",
                )
            history += len(turn.new_ids) + turn.max_new_tokens
            if history > cfg.max_context_tokens:
                break
            turns.append(turn)
            if side is not None and history + len(side.new_ids) + side.max_new_tokens <= (
                cfg.max_context_tokens
            ):
                turns.append(side)
        sessions.append(Session(sid, tuple(turns)))
    return tuple(sessions)


def _output(rng: random.Random, cfg: AgenticConfig) -> int:
    return max(1, int(cfg.output_tokens * rng.uniform(0.75, 1.25)))


@dataclass(frozen=True)
class TraceConfig:
    """Replay of a Mooncake-format trace (``timestamp`` ms, ``input_length``, ``output_length``,
    ``hash_ids`` of 512-token blocks), scaled to the testbed.

    block_tokens: tokens per trace block here (a 512-token block becomes this many tokens, so
        lengths scale by block_tokens / 512 and equal hash ids stay equal prefixes).
    speed: replay speed (2.0: twice as fast as recorded).
    """

    path: str
    requests: int = 40
    block_tokens: int = 32
    speed: float = 1.0
    max_output_tokens: int = 256
    start: int = 0

    def __post_init__(self) -> None:
        if self.requests < 1 or self.block_tokens < 1 or self.speed <= 0:
            raise ValueError(
                "--trace-requests and --trace-block-tokens must be >= 1, --trace-speed > 0"
            )
        if not Path(self.path).is_file():
            raise ValueError(f"--trace {self.path!r} is not a file")


def trace_sessions(cfg: TraceConfig) -> tuple[Session, ...]:
    """One single-turn session per trace request; equal hash ids give equal token blocks."""
    rows = []
    with open(cfg.path) as f:
        for i, line in enumerate(f):
            if i < cfg.start:
                continue
            if len(rows) >= cfg.requests:
                break
            rows.append(json.loads(line))
    if not rows:
        raise ValueError(f"--trace {cfg.path!r}: no requests at or after {cfg.start}")
    t0 = rows[0]["timestamp"]
    sessions = []
    for sid, row in enumerate(rows):
        ids: list[int] = []
        for h in row["hash_ids"]:
            ids.extend(_tokens(random.Random(h), cfg.block_tokens))
        n = max(1, round(row["input_length"] * cfg.block_tokens / 512))
        out = max(1, min(cfg.max_output_tokens, int(row["output_length"])))
        at = (row["timestamp"] - t0) / 1000 / cfg.speed
        sessions.append(Session(sid, (Turn(at, tuple(ids[:n]), out),)))
    return tuple(sessions)


def ideal_prefix_hit(prompts: list[list[int]], block_tokens: int = 16) -> float:
    """Mean share of each prompt already seen as a prefix of an earlier one (unbounded cache)."""
    seen: set[int] = set()
    hits = []
    for ids in prompts:
        hashes = block_hashes(ids, block_tokens)
        k = 0
        while k < len(hashes) and hashes[k] in seen:
            k += 1
        hits.append(k * block_tokens / max(len(ids), 1))
        seen.update(hashes)
    return sum(hits) / max(len(hits), 1)
