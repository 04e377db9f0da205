"""Which failed requests may continue elsewhere, and the request that continues them."""

from __future__ import annotations

import pytest

from sglang_pdd.router.pipeline.migration import continuation, migration_refused
from sglang_pdd.router.upstream.calls import UpstreamError

MD = "http://md:1"


def _body(**sampling):
    return {
        "input_ids": [1, 2, 3],
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 10, **sampling},
    }


def _failed(instance=MD, status=502):
    return UpstreamError(status, {"error": {"message": "gone"}}, instance)


def test_a_greedy_request_whose_instance_failed_continues_within_the_limit():
    assert migration_refused(_failed(), _body(), [5, 6], done=0, limit=2) is None
    assert (
        migration_refused(_failed(status=504), _body(top_k=1, temperature=0.7), [5], 1, 2) is None
    )
    assert "--migration-limit 2" in migration_refused(_failed(), _body(), [5], 2, 2)
    assert "--migration-limit 0" in migration_refused(_failed(), _body(), [5], 0, 0)


def test_an_error_about_the_request_itself_is_not_migrated():
    assert "not a failed instance" in migration_refused(_failed(instance=None), _body(), [], 0, 2)


@pytest.mark.parametrize(
    ("sampling", "why"),
    [
        ({"temperature": 0.8}, "not greedy"),
        ({"temperature": 1.0}, "not greedy"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"repetition_penalty": 1.2}, "repetition_penalty"),
        ({"json_schema": "{}"}, "json_schema"),
        ({"regex": "a+"}, "regex"),
        ({"stop": ["\n"]}, "stop"),
    ],
)
def test_state_kept_on_the_failed_instance_prevents_migration(sampling, why):
    assert why in migration_refused(_failed(), _body(**sampling), [5], 0, 2)


def test_sampling_defaults_to_temperature_one_so_an_unset_temperature_is_not_greedy():
    body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 5}}
    assert "not greedy" in migration_refused(_failed(), body, [], 0, 2)


def test_nothing_left_to_generate_is_not_migrated():
    assert "already sent" in migration_refused(_failed(), _body(), list(range(10)), 0, 2)


def test_the_continuation_starts_from_the_prompt_plus_what_the_client_has():
    body = {**_body(min_new_tokens=4, stop_token_ids=[9]), "return_logprob": True}
    cont = continuation(body, [5, 6, 7])
    assert cont["input_ids"] == [1, 2, 3, 5, 6, 7]
    assert cont["sampling_params"] == {
        "temperature": 0.0,
        "max_new_tokens": 7,
        "min_new_tokens": 1,
        "stop_token_ids": [9],
    }
    assert cont["return_logprob"] is True
    assert body["input_ids"] == [1, 2, 3] and body["sampling_params"]["max_new_tokens"] == 10
    assert (
        continuation(_body(min_new_tokens=2), [5, 6, 7])["sampling_params"]["min_new_tokens"] == 0
    )
