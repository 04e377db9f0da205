"""Handoff planning: one-shot, catch-up chunks, auto switching by RLD load, validation."""

import pytest

from sglang_pdd.policy import HandoffPolicy, HandoffPolicyConfig


def test_one_shot_hands_over_everything_and_stops_relay():
    plan = HandoffPolicy().plan(300, relay_load=0.1)
    assert (plan.mode, plan.tokens_now, plan.relay_continues) == ("one-shot", 300, False)


def test_catch_up_sends_chunks_while_backlog_is_large():
    policy = HandoffPolicy(HandoffPolicyConfig(mode="catch-up", catchup_chunk_tokens=50))
    plan = policy.plan(300, relay_load=0.1)
    assert (plan.tokens_now, plan.relay_continues) == (50, True)
    final = policy.plan(40, relay_load=0.1)
    assert (final.tokens_now, final.relay_continues) == (40, False)


def test_auto_switches_on_relay_load():
    policy = HandoffPolicy(HandoffPolicyConfig(mode="auto", auto_relay_busy_fraction=0.5))
    assert policy.plan(300, relay_load=0.2).mode == "catch-up"
    busy = policy.plan(300, relay_load=0.9)
    assert (busy.mode, busy.tokens_now, busy.relay_continues) == ("one-shot", 300, False)


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"mode": "two-shot"}, "mode"),
        ({"catchup_threshold_tokens": 0}, "catchup_threshold_tokens"),
        ({"catchup_chunk_tokens": 1.5}, "catchup_chunk_tokens"),
        ({"auto_relay_busy_fraction": 1.5}, "auto_relay_busy_fraction"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        HandoffPolicyConfig(**kwargs)


def test_plan_rejects_negative_backlog():
    with pytest.raises(ValueError, match="backlog_tokens"):
        HandoffPolicy().plan(-1, 0.0)
