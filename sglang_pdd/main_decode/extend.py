"""The handoff as a batch SGLang schedules: one extend over the handed-off ids, then decode on.

``next_handoff_batch`` is called where SGLang's decode scheduler picks its next batch. When
handoffs are waiting it returns an extend batch built with SGLang's own
``ScheduleBatch.prepare_for_extend`` (each request keeps its row, so its received prompt KV and
earlier Catch-Up chunks are the prefix and only the new ids are computed). The event loop then
runs it like any prefill: ``run_batch``, then ``process_batch_result`` samples and streams the
next token of each final handoff, through SGLang's own sampling, logprob, grammar and metrics
code (and, under the overlap scheduler, its deferred result processing). On the next call
``merge_handoff_batch`` moves the finished extend into the running batch, exactly where a
co-located server merges a finished prefill batch.

A Catch-Up chunk (not final) only builds KV: it runs as a middle chunk of a chunked prefill
(``inflight_middle_chunks``), so SGLang neither appends nor streams its sampled token
(Relay-Decode already produced that position), and the request stays parked. SGLang skips
streaming one middle chunk per batch, so a batch carries at most one chunk.

Memory: a handoff is taken only when the KV pool (free plus evictable radix-cache slots, less
what the running requests reserve for their next tokens) holds its new ids. A Catch-Up chunk
that does not fit waits for a later iteration (Relay-Decode streams on meanwhile); a final
handoff that does not fit is deferred: dropped with a ``deferred`` event, the request stays
parked, and the router, which keeps Relay-Decode streaming until a final handoff is taken,
sends it again later with the ids generated since. One that could never fit is refused.
"""

from __future__ import annotations

import logging

from sglang_pdd.main_decode.handoff_tokens import set_handoff_tokens
from sglang_pdd.main_decode.parked import HandoffDeferred
from sglang_pdd.main_decode.penalties import UnknownPenalizerError, count_handed_off_ids
from sglang_pdd.request_record import request_record

logger = logging.getLogger("sglang_pdd")


class KvBudget:
    """The KV slots one handoff batch may take, from the scheduler's pool right now."""

    def __init__(self, free: int, total: int, page: int = 1) -> None:
        self.left, self.total, self.page = free, total, max(page, 1)

    @classmethod
    def of(cls, scheduler, running_reqs: int) -> KvBudget:
        """Free plus evictable slots, less what running requests reserve for their next ids."""
        allocator = scheduler.token_to_kv_pool_allocator
        tree = scheduler.tree_cache
        evictable = 0 if tree.disable else int(tree.evictable_size())
        queue = scheduler.disagg_decode_prealloc_queue  # None outside decode mode
        per_req = int(queue.num_reserved_decode_tokens or 0) if queue is not None else 0
        free = int(allocator.available_size()) + evictable - per_req * running_reqs
        return cls(free, int(allocator.size), int(allocator.page_size or 1))

    def slots(self, new_ids: int) -> int:
        """Slots ``new_ids`` take once rounded up to whole pages (plus one page of slack)."""
        return (new_ids // self.page + 2) * self.page

    def take(self, new_ids: int) -> bool:
        need = self.slots(new_ids)
        if need > self.left:
            return False
        self.left -= need
        return True


class _AlreadyExtended:
    """Admission's answer to a Catch-Up chunk MD has already extended (sent again)."""


ALREADY_EXTENDED = _AlreadyExtended()


class HandoffAdmission:
    """Which waiting handoffs one batch takes: ``admit(req, token_ids, final)`` answers True
    (take it), False (wait for a later iteration), ``HandoffDeferred`` (a final handoff with no
    room now: the router sends it again later, Relay-Decode streaming meanwhile),
    ``ALREADY_EXTENDED`` (a chunk sent again that MD has extended) or the reason to refuse
    it."""

    def __init__(self, budget: KvBudget) -> None:
        self.budget = budget
        self.taken = self.chunks = 0
        self.short_of_kv: list[str] = []  # rids left waiting for memory this time

    def __call__(self, req, token_ids, final) -> bool | str | HandoffDeferred:
        if not token_ids:
            return True
        already = request_record(req).extended_ids
        if (
            not final
            and already
            and len(token_ids) == already
            and list(req.output_ids[1:already]) == token_ids[1:already]
        ):
            # A chunk made again after a control reconnect that MD had already extended:
            # nothing to compute, the router only needs its "extended".
            return ALREADY_EXTENDED
        # A handoff must bring at least one id without KV: the last handed-off token's KV is
        # what the extend computes before sampling the next token.
        if len(token_ids) <= already or list(req.output_ids[1:already]) != token_ids[1:already]:
            return f"handoff of {len(token_ids)} ids after {already} extended"
        new_ids = len(token_ids) - already
        if self.budget.slots(new_ids) > self.budget.total:
            return f"{len(token_ids)} handed-off ids need more KV than the pool holds"
        if not final and self.chunks:
            return False  # SGLang skips streaming one middle chunk per batch
        if not self.budget.take(new_ids):
            self.short_of_kv.append(req.rid)
            if final:
                return HandoffDeferred(
                    f"no KV room for {new_ids} handed-off ids now ({self.budget.left} free)"
                )
            return False
        self.taken += 1
        self.chunks += not final
        return True


def next_handoff_batch(scheduler, state, running_batch):
    """An extend batch for the parked requests whose handoff can run now, or None."""
    taken = []
    admit = HandoffAdmission(KvBudget.of(scheduler, len(running_batch.reqs)))
    for req, token_ids, final, verdict in state.take_ready_handoffs(admit):
        if verdict is ALREADY_EXTENDED:
            state.notify_extended(req.rid, len(token_ids), final)
            continue
        if isinstance(verdict, str):
            state.refuse(req, verdict)
            continue
        if not token_ids:  # nothing was generated elsewhere: continue as plain PD
            scheduler.waiting_queue.insert(0, req)
            state.notify_extended(req.rid, 0, final)
            continue
        if req.output_ids and req.output_ids[0] != token_ids[0]:
            logger.warning(
                "sglang-pdd: %s: handed-off first token %d differs from prefill's %d; "
                "continuing from the handed-off tokens (what the client saw)",
                req.rid,
                token_ids[0],
                req.output_ids[0],
            )
        if (reason := advance_grammar(req, token_ids)) is not None:
            state.refuse(req, reason)
            continue
        set_handoff_tokens(req, token_ids)
        request_record(req).extended_ids = len(token_ids)
        req.inflight_middle_chunks = 0 if final else 1
        # The handed-off ids are output, not prompt: no input logprobs for them (SGLang's
        # input-logprob bookkeeping would otherwise expect the whole prompt's and fail).
        req.logprob_start_len = -1
        taken.append((req, token_ids, final))
    for rid in admit.short_of_kv:
        state.note_kv_wait(rid)
    if not taken:
        return None
    batch = _extend_batch(scheduler, taken)
    state.handoff_batch = (batch, [(req, len(ids), final) for req, ids, final in taken])
    for req, _, _ in taken:
        state.note_extend_started(req.rid)
    return batch


def _extend_batch(scheduler, taken: list):
    """The extend batch over ``taken`` (request, handed-off ids, final), its penalizers
    counting the handed-off ids as output."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    batch = ScheduleBatch.init_new(
        reqs=[req for req, _, _ in taken],
        req_to_token_pool=scheduler.req_to_token_pool,
        token_to_kv_pool_allocator=scheduler.token_to_kv_pool_allocator,
        tree_cache=scheduler.tree_cache,
        model_config=scheduler.model_config,
        enable_overlap=scheduler.enable_overlap,
        spec_algorithm=scheduler.spec_algorithm,
    )
    batch.prepare_for_extend()
    try:
        count_handed_off_ids(
            batch.sampling_info.penalizer_orchestrator, [list(ids) for _, ids, _ in taken]
        )
    except UnknownPenalizerError as exc:
        # Cannot be carried: run the extend anyway (its KV is right) but end the requests.
        from sglang.srt.managers.schedule_batch import FINISH_ABORT

        for req, _, _ in taken:
            req.to_finish = FINISH_ABORT(f"sglang-pdd: {exc}")
    return batch


def advance_grammar(req, token_ids: list[int]) -> str | None:
    """Advance the request's grammar (json_schema, regex) over the handed-off ids it has
    not seen, so that MD's next token is constrained where a co-located server's would be.
    SGLang's own PD decode accepts P's first token when a prebuilt request joins decoding; a
    parked request never did, so its grammar starts from the first id. Returns why the ids
    cannot be accepted (the handoff is then refused), or None."""
    grammar = req.grammar
    if grammar is None:
        return None
    record = request_record(req)
    try:
        for token in token_ids[record.grammar_ids :]:
            grammar.accept_token(token)
    except ValueError as exc:  # xgrammar raises ValueError for a token the grammar rejects
        return f"the grammar rejects a handed-off id: {exc}"
    record.grammar_ids = len(token_ids)
    return None


def merge_handoff_batch(scheduler, state, running_batch):
    """Merge last iteration's handoff batch into ``running_batch`` (what SGLang's prefill
    scheduler does with a finished extend) and tell the router each handoff ran."""
    last = scheduler.last_batch
    if state.handoff_batch is None or state.handoff_batch[0] is not last:
        return running_batch  # last iteration ran no handoff batch
    handed = state.handoff_batch[1]
    state.handoff_batch = None  # merged once
    chunks = [req for req, _, final in handed if not final]
    last.filter_batch(reqs_to_exclude=chunks)  # chunks stay parked; finished requests drop
    for req, tokens, final in handed:
        state.notify_extended(req.rid, tokens, final)
    if last.is_empty():
        return running_batch
    running_batch.batch_is_full = False
    if running_batch.is_empty():
        return last
    running_batch.merge_batch(last)
    return running_batch
