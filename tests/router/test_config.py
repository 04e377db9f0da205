"""``sglang-pdd router`` flags -> ``RouterConfig``: accepted values and the errors for bad ones."""

from __future__ import annotations

import dataclasses

import pytest

from sglang_pdd.options import field_default, flags
from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.router.cli import build_parser, config_from_args
from sglang_pdd.router.config import MainEndpoint, RouterConfig
from sglang_pdd.router.instances.breaker import BreakerConfig

BASE = [
    "--prefill",
    "http://127.0.0.1:1",
    "--relay",
    "http://127.0.0.1:2",
    "--main",
    "http://127.0.0.2:3",
    "--main-control",
    "tcp://127.0.0.2:4",
]


def _config(*extra: str):
    return config_from_args(build_parser().parse_args([*BASE, *extra]))


def test_flags_map_onto_the_config():
    cfg = _config(
        "--handoff-mode",
        "catch-up",
        "--catchup-threshold",
        "8",
        "--port",
        "9000",
        "--upstream-keepalive-s",
        "0",
        "--ttft-slo-s",
        "0",
    )
    assert cfg.handoff.mode == "catch-up" and cfg.handoff.catchup_threshold_tokens == 8
    assert cfg.port == 9000 and cfg.upstream_keepalive_s == 0
    assert cfg.pipeline.ttft_slo_s == 0
    cfg = _config(
        "--handoff-mode",
        "auto",
        "--auto-relay-busy-fraction",
        "0.3",
        "--max-relay-load",
        "0.9",
        "--anomaly-max-output-tokens",
        "8",
    )
    assert cfg.handoff.auto_relay_busy_fraction == 0.3 and cfg.pipeline.max_relay_load == 0.9
    assert cfg.pipeline.anomaly_max_output_tokens == 8
    assert cfg.main[0].url == "http://127.0.0.2:3" and cfg.main[0].control == "tcp://127.0.0.2:4"
    assert _config().handoff_retry_s == 0.5
    assert _config("--handoff-retry-s", "2").handoff_retry_s == 2
    assert _config("--handoff-gap-prior-s", "0.3").handoff_gap_prior_s == 0.3


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--upstream-keepalive-s", "-1"], "--upstream-keepalive-s"),
        (["--upstream-connect-timeout-s", "0"], "--upstream-connect-timeout-s"),
        (["--upstream-idle-timeout-s", "-5"], "--upstream-idle-timeout-s"),
        (["--handoff-retry-s", "0"], "--handoff-retry-s"),
        (["--handoff-gap-prior-s", "-1"], "--handoff-gap-prior-s"),
        (["--migration-limit", "-1"], "--migration-limit"),
        (["--control-timeout-s", "0"], "--control-timeout-s"),
        (["--port", "70000"], "--port"),
        (["--wan-bandwidth-mbps", "0"], "--wan-bandwidth-mbps"),
        (["--main", "http://127.0.0.2:5"], "--main-control"),  # one control socket too few
        (["--auto-relay-busy-fraction", "1.5"], "--auto-relay-busy-fraction"),
        (["--max-relay-load", "0"], "--max-relay-load"),
        (["--catchup-threshold", "0"], "--catchup-threshold"),
        (["--catchup-chunk", "-3"], "--catchup-chunk"),
        (["--ttft-slo-s", "-1"], "--ttft-slo-s"),
        (["--anomaly-min-input-tokens", "0"], "--anomaly-min-input-tokens"),
        (["--max-prompt-tokens", "-1"], "--max-prompt-tokens"),
        (["--kv-bytes-per-token", "-1"], "--kv-bytes-per-token"),
    ],
)
def test_bad_values_name_the_flag(extra, flag):
    with pytest.raises(ValueError, match=flag):
        _config(*extra)


def test_urls_and_required_roles_are_checked():
    parser = build_parser()
    with pytest.raises(ValueError, match="--prefill is required"):
        config_from_args(parser.parse_args(BASE[2:]))
    with pytest.raises(ValueError, match="--relay is required"):
        config_from_args(parser.parse_args([*BASE[:2], *BASE[4:]]))
    bad_url = [*BASE[:1], "127.0.0.1:1", *BASE[2:]]
    with pytest.raises(ValueError, match="--prefill takes http"):
        config_from_args(parser.parse_args(bad_url))
    bad_control = [*BASE[:-1], "127.0.0.2:4"]
    with pytest.raises(ValueError, match="--main-control must look like tcp://"):
        config_from_args(parser.parse_args(bad_control))


def test_no_relay_needs_no_relay_url():
    args = build_parser().parse_args([*BASE[:2], *BASE[4:], "--no-relay"])
    assert config_from_args(args).pipeline.enable_relay is False


def test_unknown_handoff_mode_lists_the_choices(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*BASE, "--handoff-mode", "eager"])
    assert "one-shot" in capsys.readouterr().err


# Fields deliberately without a flag of their own: set by the --main trio, nested configs
# (whose fields are flags), and the cache mirror's sizing.
_NO_FLAG = {"main", "pipeline", "handoff", "breaker", "cache_block_tokens", "cache_capacity_blocks"}


@pytest.mark.parametrize(
    "cls", [RouterConfig, PipelinePolicyConfig, HandoffPolicyConfig, BreakerConfig]
)
def test_each_flag_defaults_to_its_field(cls):
    """A default is written once, on the field: the parser's is the dataclass's."""
    actions = build_parser()._option_string_actions
    assert flags(cls), cls
    for f in dataclasses.fields(cls):
        if f.name not in flags(cls):
            assert f.name in _NO_FLAG, f"{cls.__name__}.{f.name} has no flag: declare it option()"
            continue
        action = actions[flags(cls)[f.name]]
        default = field_default(f)
        if default is dataclasses.MISSING:  # required: the dataclass says what is missing
            assert action.default in ([], None), f.name
        elif isinstance(default, tuple):
            assert tuple(action.default) == default, f.name
        else:
            assert action.default == default and type(action.default) is type(default), f.name


def test_required_flags_alone_give_the_config_defaults():
    expected = RouterConfig(
        prefill=("http://127.0.0.1:1",),
        relay=("http://127.0.0.1:2",),
        main=(MainEndpoint("http://127.0.0.2:3", "tcp://127.0.0.2:4"),),
    )
    assert _config() == expected
    assert expected.pipeline == PipelinePolicyConfig()
    assert expected.handoff == HandoffPolicyConfig()


def test_boolean_flags_keep_their_names_and_sense():
    cfg = _config()
    assert cfg.pipeline.enable_relay and cfg.pipeline.enable_anomaly_filter and cfg.tail_on_relay
    assert not cfg.seeded_sampling and not cfg.incremental_streaming_output
    cfg = _config(
        "--no-anomaly-filter",
        "--no-tail-on-relay",
        "--seeded-sampling",
        "--incremental-streaming-output",
    )
    assert not cfg.pipeline.enable_anomaly_filter and not cfg.tail_on_relay
    assert cfg.seeded_sampling and cfg.incremental_streaming_output
    assert cfg.pipeline.enable_relay


def test_repeated_and_optional_flags():
    cfg = _config(
        "--prefill",
        "http://127.0.0.9:1",
        "--main",
        "http://127.0.0.3:3",
        "--main-control",
        "tcp://127.0.0.3:4",
        "--main-kv-events",
        "tcp://127.0.0.2:5",
        "--main-kv-events",
        "tcp://127.0.0.3:5",
        "--api-key",
        "k",
    )
    assert cfg.prefill == ("http://127.0.0.1:1", "http://127.0.0.9:1")
    assert [m.kv_events for m in cfg.main] == ["tcp://127.0.0.2:5", "tcp://127.0.0.3:5"]
    assert cfg.api_key == "k" and cfg.instance_api_key is None
    assert cfg.handoff_gap_prior_s is None and cfg.tokenizer_path is None


def test_help_shows_the_defaults():
    text = build_parser().format_help()
    for shown in ("(default: 8000)", "(default: one-shot)", "(default: 1.0)", "(default: 64)"):
        assert shown in text
    assert "(default: with-prefill)" in text


def test_main_turns_a_bad_value_into_a_usage_error(capsys):
    from sglang_pdd.router.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([*BASE, "--catchup-threshold", "0"])  # refused before anything is served
    assert exit_.value.code == 2
    assert "--catchup-threshold must be an integer >= 1" in capsys.readouterr().err
