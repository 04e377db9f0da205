"""Workloads: Mooncake-format traces and a generator of agentic sessions.

Both yield ``Request`` records in Mooncake's format: arrival time, input and output length in
tokens, and prefix block hash ids (a block is ``block_tokens`` tokens; equal ids at equal
positions mean reusable prefix KV).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sglang_pdd.cache import BlockPrefixCache

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class Request:
    """One request: arrival (s), lengths (tokens) and prefix block hash ids."""

    rid: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


def load_mooncake(
    path: str | Path, *, duration_s: float | None = None, rate_scale: float = 1.0
) -> list[Request]:
    """Read a Mooncake trace (JSON lines; ``timestamp`` in ms).

    duration_s keeps only requests arriving in the first duration_s seconds of the (scaled)
    trace; rate_scale > 1 compresses time, i.e. replays the trace faster.
    """
    if not rate_scale > 0:
        raise ValueError(f"rate_scale must be > 0, got {rate_scale!r}")
    out: list[Request] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            t = rec["timestamp"] / 1000.0 / rate_scale
            if duration_s is not None and t > duration_s:
                continue
            out.append(
                Request(
                    len(out),
                    t,
                    max(1, int(rec["input_length"])),
                    max(1, int(rec["output_length"])),
                    tuple(rec.get("hash_ids", ())),
                )
            )
    out.sort(key=lambda r: (r.arrival_s, r.rid))
    return [
        Request(i, r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids)
        for i, r in enumerate(out)
    ]


def write_mooncake(requests: Iterable[Request], path: str | Path) -> None:
    """Write requests as a Mooncake trace."""
    with open(path, "w", encoding="utf-8") as f:
        for r in requests:
            rec = {
                "timestamp": round(r.arrival_s * 1000),
                "input_length": r.input_tokens,
                "output_length": r.output_tokens,
                "hash_ids": list(r.hash_ids),
            }
            f.write(json.dumps(rec) + "\n")


@dataclass(frozen=True)
class AgenticWorkloadConfig:
    """Agentic sessions: a long context growing turn by turn, short outputs, a cold tail.

    A session starts with a shared system prompt (one of shared_prefix_variants) plus a fresh
    task context, then each turn appends the previous output and a tool result. When the
    context would pass max_context_tokens, or with probability cold_turn_fraction, the context
    is rebuilt (compaction, a new sub-agent): a cold request sharing only the system prompt.
    Turn gaps model model response plus tool execution time. With probability
    short_output_fraction a turn also spawns a side call (a judge or classifier over the current
    context, output of at most short_output_max_tokens) that the session does not continue from:
    the long-input, short-output traffic the anomaly filter targets.
    """

    duration_s: float = 600.0
    sessions_per_s: float = 1.0
    mean_turns: float = 20.0
    shared_prefix_tokens: int = 8192
    shared_prefix_variants: int = 4
    initial_context_min: int = 24_000
    initial_context_max: int = 48_000
    max_context_tokens: int = 65_536
    mean_append_tokens: float = 1000.0
    output_median_tokens: float = 300.0
    output_sigma: float = 0.7
    max_output_tokens: int = 1000
    short_output_fraction: float = 0.04
    short_output_max_tokens: int = 16
    cold_turn_fraction: float = 0.02
    mean_turn_gap_s: float = 20.0
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __post_init__(self) -> None:
        for f in (
            "duration_s",
            "sessions_per_s",
            "mean_turns",
            "mean_append_tokens",
            "output_median_tokens",
            "mean_turn_gap_s",
        ):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"workload.{f} must be a number > 0, got {v!r}")
        for f in ("short_output_fraction", "cold_turn_fraction"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ValueError(f"workload.{f} must be in [0, 1], got {v!r}")
        if not 0 < self.initial_context_min <= self.initial_context_max:
            raise ValueError("workload.initial_context_min must be in (0, initial_context_max]")
        if self.max_context_tokens <= self.shared_prefix_tokens + self.initial_context_max:
            raise ValueError(
                "workload.max_context_tokens must exceed shared_prefix_tokens + initial_context_max"
            )
        for f in (
            "shared_prefix_variants",
            "max_output_tokens",
            "block_tokens",
            "short_output_max_tokens",
        ):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"workload.{f} must be an integer >= 1, got {v!r}")


class _BlockIds:
    def __init__(self) -> None:
        self.next = 0

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next, self.next + n))
        self.next += n
        return ids


def generate_agentic(config: AgenticWorkloadConfig, seed: int = 0) -> list[Request]:
    """Generate agentic sessions as a Mooncake-format request list (sorted by arrival)."""
    rng = random.Random(seed)
    cfg = config
    bt = cfg.block_tokens
    ids = _BlockIds()
    shared_blocks = cfg.shared_prefix_tokens // bt
    variants = [ids.fresh(shared_blocks) for _ in range(cfg.shared_prefix_variants)]
    mu = math.log(cfg.output_median_tokens)
    raw: list[tuple[float, int, int, tuple[int, ...]]] = []

    def fresh_context(system: list[int]) -> tuple[int, list[int]]:
        task = rng.randint(cfg.initial_context_min, cfg.initial_context_max)
        tokens = shared_blocks * bt + task
        return tokens, system + ids.fresh(math.ceil(tokens / bt) - shared_blocks)

    t_session = rng.expovariate(cfg.sessions_per_s)
    while t_session < cfg.duration_s:
        system = variants[rng.randrange(len(variants))]
        tokens, blocks = fresh_context(system)
        t = t_session
        turns = 1 + int(rng.expovariate(1.0 / max(cfg.mean_turns - 1, 1e-9)))
        for _ in range(turns):
            if t >= cfg.duration_s:
                break
            out = min(
                cfg.max_output_tokens, max(1, round(rng.lognormvariate(mu, cfg.output_sigma)))
            )
            raw.append((t, tokens, out, tuple(blocks)))
            if rng.random() < cfg.short_output_fraction:
                # A side call (judge, classifier) over the current context plus a short
                # instruction, with a tiny output; the session does not continue from it.
                side = tokens + rng.randint(128, 1024)
                keep = tokens // bt
                side_blocks = blocks[:keep] + ids.fresh(math.ceil(side / bt) - keep)
                side_out = rng.randint(1, cfg.short_output_max_tokens)
                side_t = t + rng.uniform(0.0, cfg.mean_turn_gap_s)
                if side_t < cfg.duration_s:
                    raw.append((side_t, side, side_out, tuple(side_blocks)))
            # Next turn: previous prompt + its output + a tool result. Only the full blocks of
            # the previous prompt are reusable; its partial last block now holds new tokens.
            append = out + max(1, round(rng.expovariate(1.0 / cfg.mean_append_tokens)))
            new_tokens = tokens + append
            if new_tokens > cfg.max_context_tokens or rng.random() < cfg.cold_turn_fraction:
                tokens, blocks = fresh_context(system)
            else:
                keep = tokens // bt
                blocks = blocks[:keep] + ids.fresh(math.ceil(new_tokens / bt) - keep)
                tokens = new_tokens
            t += rng.expovariate(1.0 / cfg.mean_turn_gap_s)
        t_session += rng.expovariate(cfg.sessions_per_s)
    raw.sort(key=lambda r: r[0])
    return [Request(i, a, n, o, h) for i, (a, n, o, h) in enumerate(raw)]


@dataclass(frozen=True)
class WorkloadStats:
    """Summary of a request list; hit rates replay an unbounded cache in arrival order."""

    requests: int
    duration_s: float
    mean_input: float
    mean_output: float
    mean_hit: float
    frac_hit_over_95: float

    def as_dict(self) -> dict:
        """Plain dict for JSON."""
        return dict(self.__dict__)


def workload_stats(
    requests: list[Request], block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> WorkloadStats:
    """Lengths and prefix-hit distribution of a request list (unbounded cache)."""
    if not requests:
        return WorkloadStats(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    cache = BlockPrefixCache(sum(len(r.hash_ids) for r in requests))
    hits = []
    for r in requests:
        matched = cache.match(r.hash_ids)
        hits.append(min(r.input_tokens, matched * block_tokens) / r.input_tokens)
        cache.insert(r.hash_ids)
    n = len(requests)
    return WorkloadStats(
        n,
        requests[-1].arrival_s - requests[0].arrival_s,
        sum(r.input_tokens for r in requests) / n,
        sum(r.output_tokens for r in requests) / n,
        sum(hits) / n,
        sum(h > 0.95 for h in hits) / n,
    )
