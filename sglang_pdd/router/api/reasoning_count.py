"""A chat answer's ``reasoning_tokens`` (usage), counted as SGLang's scheduler counts them.

SGLang counts a request's reasoning tokens on the server that generates it, token by token
(``SchedulerBatchResultProcessor._maybe_update_reasoning_tokens`` on the ``Req``), and its OpenAI
layer reports the count in ``usage.reasoning_tokens``. A PDD answer is generated on two servers
(RLD, then MD from RLD's ids as its prompt), neither of which sees the whole output, so the router
counts over the output ids it sends, with SGLang's own functions on a stand-in for the ``Req``
(``ReasoningCount``: the attributes they read and write, pinned by
``tests/test_sglang_surface.py``), and the think-end ids SGLang's scheduler derives from its
``--reasoning-parser`` (``think_ids``).
"""

from __future__ import annotations

import types


def think_ids(model_config, reasoning_parser: str | None, tokenizer) -> None:
    """Set on ``model_config`` the ids SGLang's scheduler sets when it starts with
    ``--reasoning-parser`` (``Scheduler.__init__``): the think-end sequence, the think-start
    sequence of a model that opens its reasoning itself, and the request-selectable ends."""
    if not reasoning_parser:
        return
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    detector = ReasoningParser(
        model_type=reasoning_parser, stream_reasoning=False, tokenizer=tokenizer
    ).detector
    end_ids = detector.get_think_end_token_ids(tokenizer)
    if end_ids:
        model_config.think_end_ids = end_ids
        model_config.self_opened_think_start_ids = detector.get_self_opened_think_start_token_ids(
            tokenizer
        )
    # One detector class defines these; SGLang's scheduler reads them with the same default.
    selectable = getattr(detector, "request_selectable_think_end_tokens", ())
    if selectable:
        sequences = [tokenizer.encode(end, add_special_tokens=False) for end in selectable]
        model_config.request_selectable_think_end_id_sequences = [
            list(s) for s in dict.fromkeys(tuple(s) for s in sequences)
        ]


class ReasoningCount:
    """The reasoning tokens of one output, advanced as its ids arrive."""

    def __init__(self, model_config, require_reasoning: bool, custom_params: dict | None):
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.managers.scheduler_components.batch_result_processor import (
            SchedulerBatchResultProcessor,
        )

        # What the processor's _maybe_update_reasoning_tokens reads of itself and of the Req,
        # and what Req.update_*reasoning_tokens keep between tokens.
        self._processor = types.SimpleNamespace(model_config=model_config)
        self._step = SchedulerBatchResultProcessor._maybe_update_reasoning_tokens
        self.require_reasoning = require_reasoning
        self.sampling_params = types.SimpleNamespace(custom_params=custom_params)
        self.reasoning_tokens = 0
        self._is_reasoning_over = False
        self._think_end_matcher = None
        self._think_end_match_len = 0
        self._think_start_match_len = 0
        self.update_reasoning_tokens = types.MethodType(Req.update_reasoning_tokens, self)
        self.update_self_opened_reasoning_tokens = types.MethodType(
            Req.update_self_opened_reasoning_tokens, self
        )
        self.counted = 0  # output ids counted so far

    def advance(self, output_ids: list[int]) -> int:
        """The count over ``output_ids`` (the output so far: it only grows), counting the ids
        not counted yet one at a time, as the scheduler does."""
        for token in output_ids[self.counted :]:
            self._step(self._processor, self, token)
        self.counted = max(self.counted, len(output_ids))
        return self.reasoning_tokens
