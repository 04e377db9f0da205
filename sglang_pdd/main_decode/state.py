"""``MainDecodeState``: the parked requests and the control socket of one Main-Decode scheduler."""

from __future__ import annotations

import logging
import time
from array import array

import zmq

from sglang_pdd.main_decode import is_relayed, protocol

logger = logging.getLogger("sglang_pdd")


class MainDecodeState:
    """Lives on the scheduler (``scheduler._pdd_main``); driven once per scheduler iteration."""

    def __init__(self, control_port: int, host: str = "0.0.0.0") -> None:
        self._ctx = zmq.Context.instance()
        self.socket = self._ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(f"tcp://{host}:{control_port}")
        self.parked: dict[str, object] = {}  # rid -> Req with its prompt KV in place
        self.parked_at: dict[str, float] = {}
        self.watchers: dict[str, bytes] = {}  # rid -> ZeroMQ identity of the router
        self.handoffs: dict[str, list[int]] = {}  # rid -> token ids, waiting for the KV
        logger.info("sglang-pdd: Main-Decode control socket on port %d", control_port)

    # -- control socket -------------------------------------------------------------------
    def _send(self, rid: str, event: dict) -> None:
        identity = self.watchers.get(rid)
        if identity is not None:
            self.socket.send_multipart([identity, protocol.encode({**event, "rid": rid})])

    def poll_control(self, timeout_ms: int = 0) -> None:
        """Drain pending control messages (waiting up to ``timeout_ms`` for the first)."""
        if timeout_ms and not self.socket.poll(timeout_ms):
            return
        while True:
            try:
                identity, payload = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                message = protocol.decode(payload)
            except ValueError as exc:
                logger.warning("sglang-pdd: bad control message dropped: %s", exc)
                continue
            rid = message["rid"]
            if message["op"] == "watch":
                self.watchers[rid] = identity
                if rid in self.parked:
                    self._send(rid, self._ready_event(self.parked[rid]))
            else:
                self.handoffs[rid] = list(message["token_ids"])

    # -- parking --------------------------------------------------------------------------
    def _ready_event(self, req) -> dict:
        prompt = len(req.origin_input_ids)
        cached = int(getattr(req, "disagg_decode_prefix_len", 0) or 0)
        return {
            "event": "ready",
            "t": self.parked_at[req.rid],
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "received_tokens": prompt - cached,
        }

    def park_arrivals(self, scheduler) -> None:
        """Move relayed requests whose KV has arrived out of the waiting queue into ``parked``."""
        keep = []
        for req in scheduler.waiting_queue:
            if is_relayed(req.rid) and not getattr(req, "_pdd_handed_off", False):
                self.parked[req.rid] = req
                self.parked_at[req.rid] = time.time()
                event = self._ready_event(req)
                event["kv_bytes"] = event["received_tokens"] * kv_bytes_per_token(scheduler)
                self._send(req.rid, event)
            else:
                keep.append(req)
        if len(keep) != len(scheduler.waiting_queue):
            scheduler.waiting_queue = keep

    def unpark_for_abort(self, scheduler, rid_prefix: str, abort_all: bool) -> None:
        """Put parked requests an abort names back in the waiting queue, where SGLang's abort
        releases them (their KV is inserted into the radix cache, so MD stays as warm as P)."""
        for rid in [r for r in self.parked if abort_all or r.startswith(rid_prefix)]:
            scheduler.waiting_queue.insert(0, self.parked.pop(rid))
            self.parked_at.pop(rid, None)
            self.handoffs.pop(rid, None)
            self.watchers.pop(rid, None)

    def take_ready_handoffs(self) -> list[tuple[object, list[int]]]:
        """Parked requests whose handoff has arrived, removed from ``parked``."""
        ready = [rid for rid in self.handoffs if rid in self.parked]
        taken = []
        for rid in ready:
            req = self.parked.pop(rid)
            self.parked_at.pop(rid, None)
            req._pdd_handed_off = True
            taken.append((req, self.handoffs.pop(rid)))
        return taken

    def notify_extended(self, rid: str, tokens: int) -> None:
        self._send(rid, {"event": "extended", "t": time.time(), "tokens": tokens})
        self.watchers.pop(rid, None)


def kv_bytes_per_token(scheduler) -> int:
    """KV bytes one token occupies in this scheduler's pool (all layers, K and V)."""
    pool = scheduler.token_to_kv_pool_allocator.get_kvcache()
    try:
        k_size, v_size = pool.get_kv_size_bytes()
        return int((k_size + v_size) // max(pool.size + pool.page_size, 1))
    except (AttributeError, TypeError):
        return 0


def set_handoff_tokens(req, token_ids: list[int]) -> None:
    """Make ``token_ids`` the request's output so far: prompt KV stays, the ids get extended."""
    req.output_ids = array("q", token_ids)
    req.full_untruncated_fill_ids = array("q", req.origin_input_ids) + req.output_ids
    prompt_len = len(req.origin_input_ids)
    req.prefix_len = prompt_len
    req.extend_end = prompt_len + len(token_ids)
