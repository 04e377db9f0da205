"""Fan-out of batched /generate and n > 1: sub-requests in SGLang's order, merged events."""

from __future__ import annotations

import asyncio

import pytest

from sglang_pdd.router.pipeline.fanout import expand_generate, merged_events, sample_count
from sglang_pdd.router.upstream.calls import UpstreamError


class WordTokenizer:
    def encode(self, text):
        return [len(w) for w in text.split()]


def test_a_single_prompt_is_one_sub_request():
    subs, many = expand_generate(
        {"text": "a bb", "sampling_params": {"max_new_tokens": 3}}, WordTokenizer(), {}
    )
    assert not many and [(s.input_ids, s.sampling) for s in subs] == [
        ([1, 2], {"max_new_tokens": 3})
    ]


def test_batch_times_n_is_prompt_major_with_rids_and_extra():
    body = {
        "text": ["a", "bb cc"],
        "rid": ["x", "y"],
        "sampling_params": {"n": 2, "temperature": 0},
    }
    subs, many = expand_generate(body, WordTokenizer(), {"return_logprob": True})
    assert many
    assert [s.input_ids for s in subs] == [[1], [1], [2, 2], [2, 2]]
    assert [s.extra["rid"] for s in subs] == ["x-0", "x-1", "y-0", "y-1"]
    assert all(s.sampling == {"temperature": 0} and s.extra["return_logprob"] for s in subs)


def test_input_ids_batches_and_per_prompt_sampling():
    body = {
        "input_ids": [[1, 2], [3]],
        "sampling_params": [{"max_new_tokens": 1}, {"max_new_tokens": 2, "n": 1}],
    }
    subs, many = expand_generate(body, WordTokenizer(), {})
    assert many and [s.sampling["max_new_tokens"] for s in subs] == [1, 2]
    assert "rid" not in subs[0].extra
    subs, many = expand_generate(
        {"input_ids": [4, 5], "sampling_params": {"n": 3}}, WordTokenizer(), {}
    )
    assert many and len(subs) == 3


@pytest.mark.parametrize(
    "body, message",
    [
        ({"text": [], "sampling_params": {}}, "empty batch"),
        ({"text": ["a", "b"], "sampling_params": [{}]}, "1 entries for 2 prompts"),
        ({"text": ["a", "b"], "rid": ["r"]}, "rid has 1 entries"),
        ({"text": ["a", "b"], "rid": ["r", "r"]}, "rid repeats"),
        ({"text": "a", "sampling_params": {"n": 0}}, "sampling_params.n must be a positive"),
        ({"text": "a", "sampling_params": {"n": "2"}}, "sampling_params.n must be a positive"),
    ],
)
def test_bad_batches_are_refused_by_name(body, message):
    with pytest.raises(UpstreamError) as err:
        expand_generate(body, WordTokenizer(), {})
    assert err.value.status == 400 and message in err.value.body["error"]["message"]


def test_openai_n():
    assert sample_count({}, "n") == 1 and sample_count({"n": 3}, "n") == 3
    with pytest.raises(UpstreamError, match="n must be"):
        sample_count({"n": True}, "n")


class FakeRun:
    def __init__(self, events, fail=False):
        self._events, self.fail, self.closed = events, fail, False

    async def events(self):
        try:
            for event in self._events:
                await asyncio.sleep(0)
                yield event
            if self.fail:
                raise UpstreamError(502, {"error": {"message": "gone"}})
            await asyncio.sleep(3600)  # a run that never ends unless cancelled
        finally:
            self.closed = True


def test_merged_events_interleave_and_a_failure_cancels_the_rest():
    async def main():
        runs = [FakeRun(["a1", "a2"]), FakeRun(["b1"], fail=True)]
        seen = []
        with pytest.raises(UpstreamError):
            async for index, event in merged_events(runs):
                seen.append((index, event))
        return runs, seen

    runs, seen = asyncio.run(main())
    assert (1, "b1") in seen and set(seen) <= {(0, "a1"), (0, "a2"), (1, "b1")}
    assert all(run.closed for run in runs)  # the endless one was cancelled: its clean-up ran
