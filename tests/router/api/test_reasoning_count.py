"""``ReasoningCount``: SGLang's reasoning-token counting over a stand-in ``Req``."""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

import pytest

from sglang_pdd.router.api.reasoning_count import ReasoningCount

pytest.importorskip("sglang")


def _config(end=(5, 6), start=None):
    return types.SimpleNamespace(
        think_end_ids=list(end) if end else None,
        self_opened_think_start_ids=list(start) if start else None,
        request_selectable_think_end_id_sequences=None,
    )


def _count(config, ids, require_reasoning=True, steps=1):
    counter = ReasoningCount(config, require_reasoning, None)
    for end in range(0, len(ids), steps):  # the output as it grows
        counter.advance(ids[:end])
    return counter.advance(ids)


def test_a_forced_thought_counts_up_to_its_end():
    assert _count(_config(), [1, 2, 5, 6, 7, 8]) == 4
    assert _count(_config(), [1, 2, 5, 6, 7, 8], steps=3) == 4
    assert _count(_config(), [1, 5, 2, 6]) == 4  # no end yet: every id is reasoning


def test_without_reasoning_forced_only_a_self_opened_thought_counts():
    assert _count(_config(start=(9,)), [9, 1, 5, 6, 3], require_reasoning=False) == 4
    assert _count(_config(start=(9,)), [1, 9, 5, 6], require_reasoning=False) == 0
    assert _count(_config(), [1, 5, 6], require_reasoning=False) == 0


def test_no_reasoning_parser_counts_nothing():
    assert _count(_config(end=None), [1, 5, 6]) == 0


def _attributes_read(function, name: str) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == name
    }


def test_the_stand_in_has_what_sglang_reads():
    """Every attribute SGLang's counting reads of the ``Req`` (and of its processor) is on
    the stand-in: an upgrade that reads one more fails here."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.managers.scheduler_components.batch_result_processor import (
        SchedulerBatchResultProcessor,
    )

    counter = ReasoningCount(_config(), True, None)
    wanted = _attributes_read(SchedulerBatchResultProcessor._maybe_update_reasoning_tokens, "req")
    for method in (Req.update_reasoning_tokens, Req.update_self_opened_reasoning_tokens):
        wanted |= _attributes_read(method, "self")
    missing = {a for a in wanted if not hasattr(counter, a)}
    assert not missing
    assert _attributes_read(
        SchedulerBatchResultProcessor._maybe_update_reasoning_tokens, "self"
    ) == {"model_config"}
