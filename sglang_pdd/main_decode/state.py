"""``MainDecodeState``: Main-Decode on one scheduler rank, the I/O around ``ParkedRequests``.

The scheduler's hooks (``patches/main_*.py``) call it; it feeds ``ParkedRequests`` what
happened, with the time, and executes the actions it returns: events to routers on the control
socket (rank 0 only), requests put back into or ended through SGLang's scheduler.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sglang_pdd.main_decode.control_socket import ControlSocket
from sglang_pdd.main_decode.parked import Action, Notify, ParkedRequests
from sglang_pdd.main_decode.watches import MAX_HELD_HANDOFF_TOKENS_PER_PEER, MAX_WATCHES_PER_PEER
from sglang_pdd.request_record import request_record
from sglang_pdd.wire.messages import ControlMessage, Expire

logger = logging.getLogger("sglang_pdd")


@dataclass(frozen=True)
class ControlMessages:
    """Control messages rank 0 read in one iteration: ``(peer identity, message)`` pairs. It
    rides SGLang's request broadcast (``patches/main_control_ingest.py``) to every TP rank, whose
    scheduler dispatches it to ``MainDecodeState.apply_control``: all ranks park, hand off and
    release the same requests in the same iteration."""

    items: tuple[tuple[bytes, ControlMessage | Expire], ...]


class MainDecodeState:
    """Lives on the scheduler (``scheduler._pdd.main``); driven once per scheduler iteration."""

    def __init__(
        self,
        control_port: int | None,
        host: str = "127.0.0.1",
        vocab_size: int | None = None,
        ttl_s: float = 600.0,
        curve=None,
        max_watches_per_peer: int = MAX_WATCHES_PER_PEER,
        max_held_tokens_per_peer: int = MAX_HELD_HANDOFF_TOKENS_PER_PEER,
    ) -> None:
        """``control_port`` None: a scheduler rank without the socket (TP ranks other than the
        one that receives requests): it applies the control messages rank 0 reads, which reach
        it through SGLang's request broadcast, and sends nothing. ``ttl_s``: a request with no
        control activity that long is ended (``--pdd-parked-ttl-s``). ``curve``: a
        ``control_auth.CurveServer``, or None for an unauthenticated socket."""
        self.requests = ParkedRequests(ttl_s, max_watches_per_peer, max_held_tokens_per_peer)
        self.socket: ControlSocket | None = None
        if control_port is not None:
            self.socket = ControlSocket(host, control_port, curve, vocab_size)
        # The extend batch built last iteration and its (req, ids, final) handoffs, merged into
        # the running batch once it ran (main_decode/extend.py).
        self.handoff_batch: tuple[object, list] | None = None

    def execute(self, actions: list[Action]) -> None:
        """Send what ``ParkedRequests`` decided (nothing on a rank without the socket)."""
        if self.socket is None:
            return
        for action in actions:
            if isinstance(action, Notify):
                self.socket.send(action.identity, action.event)
            else:
                self.socket.refuse(action.identity, action.rid, action.reason)

    # -- control messages -----------------------------------------------------------------
    def wait_for_control(self, timeout_ms: int) -> None:
        """Block up to ``timeout_ms`` until a control message is pending (no-op without the
        socket): an idle scheduler with only parked work waits here instead of spinning."""
        if self.socket is not None:
            self.socket.poll(timeout_ms)

    def read_control(self) -> ControlMessages | None:
        """Drain the socket (rank 0): the well-formed messages, in order, and an ``Expire`` for
        each request idle past the TTL, for ``apply_control`` on every rank."""
        if self.socket is None:
            return None
        items = self.socket.read()
        items += [(b"", Expire(rid=rid)) for rid in self.requests.expired(time.monotonic())]
        return ControlMessages(tuple(items)) if items else None

    def apply_control(self, batch: ControlMessages) -> None:
        """Act on messages ``read_control`` took (every rank, in the same iteration).

        The boundary between the control plane and SGLang's scheduler, which exits on an
        exception: a message whose handling raises is logged and answered with an error, and
        the next one is handled; nothing propagates."""
        for identity, message in batch.items:
            try:
                self.execute(self.requests.apply(identity, message, time.monotonic()))
            except Exception as exc:
                logger.exception("sglang-pdd: handling %r failed", message)
                if identity and self.socket is not None:
                    self.socket.refuse(identity, message.rid, f"{type(exc).__name__}: {exc}")

    def poll_control(self, timeout_ms: int = 0) -> None:
        """Read and apply pending control messages on this rank alone (tests; TP = 1)."""
        self.wait_for_control(timeout_ms)
        if (batch := self.read_control()) is not None:
            self.apply_control(batch)

    # -- the scheduler's iteration ----------------------------------------------------------
    def park_arrivals(self, scheduler) -> None:
        """Move relayed requests whose KV has arrived out of the waiting queue into the parked
        set; announce every arrival to its router."""
        self.requests.next_iteration()
        keep = []
        for req in scheduler.waiting_queue:
            record = request_record(req)
            if record.arrived_on_main:
                keep.append(req)
                continue
            record.arrived_on_main = True
            publish_prompt(scheduler, req)
            if not self.requests.token_kv_bytes:
                self.requests.token_kv_bytes = kv_bytes_per_token(scheduler)
            self.execute(self.requests.arrive(req, time.time(), time.monotonic()))
            if req.rid not in self.requests.parked:  # a P-MD request: it decodes now
                keep.append(req)
        if len(keep) != len(scheduler.waiting_queue):
            scheduler.waiting_queue = keep

    def unpark_for_abort(self, scheduler, rid_prefix: str, abort_all: bool) -> None:
        """Put parked requests an abort names back in the waiting queue, where SGLang's abort
        releases them (their KV is inserted into the radix cache, so MD stays as warm as P)."""
        for req in self.requests.unpark_for_abort(rid_prefix, abort_all):
            scheduler.waiting_queue.insert(0, req)

    def release_finished(self, scheduler) -> None:
        """End parked requests that finished on Relay-Decode, through SGLang's own abort, which
        inserts their prompt KV into the radix cache: MD's cache stays as warm as P's."""
        from sglang.srt.managers.io_struct import AbortReq

        for rid in self.requests.take_releases():
            scheduler.abort_request(AbortReq(rid=rid))  # our abort hook unparks it first

    # -- handoffs (main_decode/extend.py) ---------------------------------------------------
    def take_ready_handoffs(self, admit) -> list[tuple]:
        """``ParkedRequests.take_ready_handoffs``, its events sent."""
        taken, actions = self.requests.take_ready_handoffs(admit)
        self.execute(actions)
        return taken

    def refuse(self, req, reason: str) -> None:
        """Tell the router a handoff was refused; the request stays parked until aborted."""
        self.execute(self.requests.refuse(req, reason))

    def note_kv_wait(self, rid: str) -> None:
        """``rid``'s handoff waits for KV memory (the next extend batch cannot take it yet)."""
        self.requests.note_kv_wait(rid)

    def note_extend_started(self, rid: str) -> None:
        """The extend batch carrying ``rid``'s handoff was built (it runs next)."""
        self.requests.note_extend_started(rid, time.monotonic())

    def notify_extended(self, rid: str, tokens: int, final: bool) -> None:
        """Tell the router MD holds KV for ``tokens`` handed-off ids, with how long the handoff
        waited on MD and how long its extend batch ran (0 if none ran: nothing to extend)."""
        now, wall = time.monotonic(), time.time()
        self.execute(self.requests.notify_extended(rid, tokens, final, now, wall))


def publish_prompt(scheduler, req) -> None:
    """Insert the prompt KV that just landed into MD's radix tree now, not when the request
    ends: a concurrent request sharing the prefix (another session's system prompt, a side call)
    then finds it in MD's cache instead of pulling it across the WAN again, and the KV events
    tell the router MD holds it. The prompt stays locked by the request, as after a chunked
    prefill, and SGLang's own release inserts the rest when the request ends."""
    tree = scheduler.tree_cache
    if req.skip_radix_cache_insert or tree.disable:
        return
    req.refresh_fill_ids()
    tree.checkpoint(req, up_to=len(req.origin_input_ids))


def kv_bytes_per_token(scheduler) -> int:
    """KV bytes one token occupies in this scheduler's pool (all layers, K and V)."""
    pool = scheduler.token_to_kv_pool_allocator.get_kvcache()
    try:
        k_size, v_size = pool.get_kv_size_bytes()
        return int((k_size + v_size) // max(pool.size + pool.page_size, 1))
    except (AttributeError, TypeError):
        return 0
