"""Testbed workloads: agentic sessions and trace replays are deterministic and well formed."""

import json

import pytest

from sglang_pdd.testbed.workload import (
    AgenticConfig,
    TraceConfig,
    agentic_sessions,
    ideal_prefix_hit,
    trace_sessions,
)


def test_agentic_sessions_share_a_system_prompt_and_have_fixed_times():
    cfg = AgenticConfig(sessions=3, turns=5, system_tokens=50, context_tokens=100, seed=1)
    a, b = agentic_sessions(cfg), agentic_sessions(cfg)
    assert a == b
    firsts = [s.turns[0].new_ids for s in a]
    assert all(f[:50] == firsts[0][:50] for f in firsts) and firsts[0][50:] != firsts[1][50:]
    for s in a:
        assert s.turns[0].at_s == s.sid * cfg.stagger_s
        times = [t.at_s for t in s.turns if t.kind != "side"]
        assert times == sorted(times)


def test_invalid_workload_flags_are_refused():
    with pytest.raises(ValueError, match="--cold-fraction"):
        AgenticConfig(cold_fraction=2)
    with pytest.raises(ValueError, match="--sessions"):
        AgenticConfig(sessions=0)


def test_trace_blocks_map_to_equal_token_prefixes(tmp_path):
    rows = [
        {"timestamp": 1000, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
        {"timestamp": 3000, "input_length": 1500, "output_length": 900, "hash_ids": [1, 2, 3]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    s = trace_sessions(
        TraceConfig(str(path), requests=2, block_tokens=8, speed=2.0, max_output_tokens=64)
    )
    first, second = s[0].turns[0], s[1].turns[0]
    assert len(first.new_ids) == 16 and len(second.new_ids) == round(1500 * 8 / 512)
    assert second.new_ids[:16] == first.new_ids
    assert (first.at_s, second.at_s) == (0.0, 1.0) and second.max_new_tokens == 64
    assert ideal_prefix_hit([list(first.new_ids), list(second.new_ids)], 8) == pytest.approx(
        0.5 * 16 / 23
    )


def test_missing_trace_is_refused():
    with pytest.raises(ValueError, match="--trace"):
        TraceConfig("/nonexistent/trace.jsonl")


def test_sessions_stay_within_the_context_length():
    cfg = AgenticConfig(
        sessions=4,
        turns=20,
        context_tokens=1500,
        output_tokens=600,
        max_context_tokens=4000,
        seed=2,
    )
    for s in agentic_sessions(cfg):
        history = 0
        for t in s.turns:
            prompt = history + len(t.new_ids)
            assert prompt + t.max_new_tokens <= 4000
            if t.kind != "side":
                history = prompt + t.max_new_tokens
