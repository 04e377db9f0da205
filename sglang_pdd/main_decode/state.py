"""``MainDecodeState``: the parked requests and the control socket of one Main-Decode scheduler."""

from __future__ import annotations

import logging
import time
from array import array
from collections import Counter
from dataclasses import dataclass

import zmq

from sglang_pdd.config import is_loopback
from sglang_pdd.main_decode.idle_clock import IdleClock
from sglang_pdd.wire import codec
from sglang_pdd.wire.messages import (
    MAX_MESSAGE_BYTES,
    ControlMessage,
    Deferred,
    Error,
    Expire,
    Extended,
    Handoff,
    Ready,
    Release,
    Watch,
)
from sglang_pdd.wire.rids import is_relayed

logger = logging.getLogger("sglang_pdd")
# How many scheduler iterations an abort that found nothing parked is remembered (covers an
# abort that overtook its request across the WAN). Counted in iterations, not seconds, so that
# every TP rank forgets it in the same iteration and all ranks park the same requests.
ABORT_MEMORY_ITERATIONS = 20_000
CONTROL_RCVHWM = 10_000  # control messages queued per peer before ZeroMQ drops more
# What one control peer (a router) may have MD hold for it at once: requests watched, and
# handed-off token ids waiting for their KV or for an iteration. Beyond them its messages are
# refused (an error reply), so a buggy or hostile peer cannot grow MD's memory without bound.
MAX_WATCHES_PER_PEER = 65_536
MAX_HELD_HANDOFF_TOKENS_PER_PEER = 16_000_000


@dataclass(frozen=True)
class ControlMessages:
    """Control messages rank 0 read in one iteration: ``(peer identity, message)`` pairs. It
    rides SGLang's request broadcast (``patches/main_control_ingest.py``) to every TP rank, whose
    scheduler dispatches it to ``MainDecodeState.apply_control``: all ranks park, hand off and
    release the same requests in the same iteration."""

    items: tuple[tuple[bytes, ControlMessage | Expire], ...]


@dataclass(frozen=True)
class HandoffDeferred:
    """An admission verdict: the final handoff has no room now; the router sends it again."""

    reason: str


class MainDecodeState:
    """Lives on the scheduler (``scheduler._pdd_main``); driven once per scheduler iteration."""

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
        self.vocab_size = vocab_size
        # KV bytes a token takes in the pool; learnt from the scheduler when the first request
        # parks, so a "ready" sent again (to a late watch) still says what crossed the WAN.
        self.token_kv_bytes = 0
        self.idle = IdleClock(ttl_s)
        self.socket = None
        self.auth = None  # CURVE's authenticator thread, when the socket has keys
        if control_port is not None:
            self._bind(host, control_port, curve)
        self.parked: dict[str, object] = {}  # rid -> Req with its prompt KV in place
        self.parked_at: dict[str, float] = {}
        self.watchers: dict[str, bytes] = {}  # rid -> ZeroMQ identity of the router
        # rid -> (token ids, final), waiting for the KV or for the scheduler's next iteration.
        self.handoffs: dict[str, tuple[list[int], bool]] = {}
        # rid -> [its last handoff's arrival, its extend batch built or None] (monotonic), for
        # the waited_s and extend_s of the "extended" event; bounded as the watches are.
        self.handoff_times: dict[str, list] = {}
        # Per peer: rids it watches, handed-off ids held for it (MAX_*_PER_PEER bound them).
        self.max_watches_per_peer = max_watches_per_peer
        self.max_held_tokens_per_peer = max_held_tokens_per_peer
        self.watch_counts: Counter[bytes] = Counter()
        self.held_tokens: Counter[bytes] = Counter()
        self.releases: set[str] = set()  # finished on Relay-Decode: end once the KV is in
        # Aborts that found nothing parked, by rid prefix: a relayed request whose KV lands
        # after its abort (the abort raced the transfer's last step) is ended, not parked.
        self.recent_aborts: dict[str, int] = {}  # rid prefix -> iteration of the abort
        self.iteration = 0  # scheduler iterations seen (park_arrivals runs once in each)
        self.kv_waits: set[str] = set()  # rids whose handoff waited for memory (logged once)

    # -- control socket -------------------------------------------------------------------
    def _bind(self, host: str, control_port: int, curve) -> None:
        """Open the control socket (rank 0) that routers send watches and handoffs to."""
        # With keys, a context of its own: its authenticator then judges this socket
        # only, never SGLang's sockets on the shared context.
        context = zmq.Context() if curve is not None else zmq.Context.instance()
        self.socket = context.socket(zmq.ROUTER)
        if curve is not None:
            self.auth = curve.secure(self.socket)
        self.socket.setsockopt(zmq.LINGER, 0)
        # A peer sending more than this is disconnected by ZeroMQ before MD reads anything.
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        # A router that redials (after a dropped connection) keeps its identity: its new
        # connection takes the identity over from the old one, which may linger.
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # A flooding peer fills this queue, not MD's memory: ZeroMQ drops what is beyond it.
        self.socket.setsockopt(zmq.RCVHWM, CONTROL_RCVHWM)
        self.socket.bind(f"tcp://{host}:{control_port}")
        logger.info(
            "sglang-pdd: Main-Decode control socket on %s:%d (%s)",
            host,
            control_port,
            "CURVE" if curve is not None else "no authentication",
        )
        if curve is None and not is_loopback(host):
            logger.warning(
                "sglang-pdd: INSECURE: the control socket on %s:%d takes handoffs and "
                "releases from anyone who reaches it (--pdd-control-insecure)",
                host,
                control_port,
            )

    def _send(self, event: Ready | Extended | Deferred | Error) -> None:
        """Send ``event`` to the router that watches its rid (none: nobody to tell)."""
        identity = self.watchers.get(event.rid)
        if identity is not None and self.socket is not None:
            self.socket.send_multipart([identity, codec.encode(event)], zmq.NOBLOCK)

    def _refuse(self, identity: bytes, rid: str, reason: str) -> None:
        """Answer the sender (not the request's watcher) that its message changed nothing."""
        if self.socket is not None:
            error = Error(rid=rid, message=f"refused: {reason}")
            try:
                self.socket.send_multipart([identity, codec.encode(error)], zmq.NOBLOCK)
            except zmq.ZMQError as exc:  # the peer is gone: nobody to tell
                logger.warning("sglang-pdd: refusal to a control peer not sent: %s", exc)

    def wait_for_control(self, timeout_ms: int) -> None:
        """Block up to ``timeout_ms`` until a control message is pending (no-op without the
        socket): an idle scheduler with only parked work waits here instead of spinning."""
        if self.socket is not None:
            self.socket.poll(timeout_ms)

    def read_control(self) -> ControlMessages | None:
        """Drain the socket (rank 0): the well-formed messages, in order, for ``apply_control``
        on every rank; malformed ones are dropped here, their sender told why."""
        if self.socket is None:
            return None
        items = []
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) != 2:  # ROUTER prepends the peer's identity to its one frame
                logger.warning("sglang-pdd: control message with %d frames dropped", len(frames))
                continue
            identity, payload = frames
            try:
                message = codec.decode_control(payload, self.vocab_size)
            except Exception as exc:  # ValueError by contract; anything else must not escape
                logger.warning("sglang-pdd: bad control message dropped: %s", exc)
                rid = codec.rid_of(payload)
                if rid is not None:  # tell the sender, so that its request does not hang
                    self._refuse(identity, rid, str(exc))
                continue
            items.append((identity, message))
        items += [(b"", Expire(rid=rid)) for rid in self.idle.expired()]
        return ControlMessages(tuple(items)) if items else None

    def apply_control(self, batch: ControlMessages) -> None:
        """Act on messages ``read_control`` took (every rank, in the same iteration).

        The boundary between the control plane and SGLang's scheduler, which exits on an
        exception: a message whose handling raises is logged and answered with an error, and
        the next one is handled; nothing propagates."""
        for identity, message in batch.items:
            try:
                self._apply(identity, message)
            except Exception as exc:
                logger.exception("sglang-pdd: handling %r failed", message)
                if identity:
                    self._refuse(identity, message.rid, f"{type(exc).__name__}: {exc}")

    def _apply(self, identity: bytes, message: ControlMessage | Expire) -> None:
        rid = message.rid
        if isinstance(message, Expire):  # made by rank 0 (the socket never accepts it)
            self._expire(rid)
            return
        self.idle.touch(rid)
        owner = self.watchers.get(rid)
        if owner is not None and owner != identity:
            # A peer acts only on requests it watched first: no other peer may redirect their
            # events, release them or hand them tokens.
            logger.warning(
                "sglang-pdd: %s for %s from a peer that does not own it refused", _op(message), rid
            )
            self._refuse(identity, rid, "another peer owns this request")
            return
        if isinstance(message, Watch):
            if owner is None and self.watch_counts[identity] >= self.max_watches_per_peer:
                self._refuse(
                    identity,
                    rid,
                    f"this peer watches {self.max_watches_per_peer} "
                    "requests already (MAX_WATCHES_PER_PEER)",
                )
                return
            self._watch(rid, identity)
            if rid in self.parked:
                self._send(self._ready_event(self.parked[rid]))
        elif owner is None:
            self._refuse(identity, rid, f"{_op(message)} before watch")
        elif isinstance(message, Release):
            self.releases.add(rid)
        elif isinstance(message, Handoff):
            old = len(self.handoffs[rid][0]) if rid in self.handoffs else 0
            held = self.held_tokens[identity] - old + len(message.token_ids)
            if held > self.max_held_tokens_per_peer:
                self._refuse(
                    identity,
                    rid,
                    f"this peer's handoffs would hold {held} token ids "
                    f"(over {self.max_held_tokens_per_peer}, MAX_HELD_HANDOFF_TOKENS_PER_PEER)",
                )
                return
            self._drop_handoff(rid)
            self.handoffs[rid] = (list(message.token_ids), message.final)
            self.held_tokens[identity] += len(message.token_ids)
            self.handoff_times[rid] = [time.monotonic(), None]

    def _expire(self, rid: str) -> None:
        """No control activity for ``idle.ttl_s``: end a parked request (its KV is cached, as
        for a release) and drop what the control state holds for the rid."""
        self.idle.forget(rid)
        self._drop_handoff(rid)
        if rid in self.parked:
            logger.warning(
                "sglang-pdd: %s parked %.0f s without a handoff or release: ending it "
                "(--pdd-parked-ttl-s)",
                rid,
                self.idle.ttl_s,
            )
            why = "parked past --pdd-parked-ttl-s without a handoff or release"
            self._send(Error(rid=rid, message=why))
            self.releases.add(rid)
        else:
            self.releases.discard(rid)
        self._unwatch(rid)

    def _watch(self, rid: str, identity: bytes) -> None:
        if self.watchers.get(rid) != identity:
            self._unwatch(rid)
            self.watchers[rid] = identity
            self.watch_counts[identity] += 1

    def _unwatch(self, rid: str) -> None:
        """``rid`` is no longer watched (its handoffs held for the peer are dropped too)."""
        self._drop_handoff(rid)
        self.handoff_times.pop(rid, None)
        identity = self.watchers.pop(rid, None)
        if identity is not None:
            self.watch_counts[identity] -= 1
            if self.watch_counts[identity] <= 0:
                del self.watch_counts[identity]

    def _drop_handoff(self, rid: str) -> None:
        held = self.handoffs.pop(rid, None)
        identity = self.watchers.get(rid)
        if held is not None and identity is not None:
            self.held_tokens[identity] -= len(held[0])
            if self.held_tokens[identity] <= 0:
                del self.held_tokens[identity]

    def poll_control(self, timeout_ms: int = 0) -> None:
        """Read and apply pending control messages on this rank alone (tests; TP = 1)."""
        self.wait_for_control(timeout_ms)
        if (batch := self.read_control()) is not None:
            self.apply_control(batch)

    # -- parking --------------------------------------------------------------------------
    def _ready_event(self, req) -> Ready:
        prompt = len(req.origin_input_ids)
        # match_kv_cache set prefix_len to the decode-side radix hit; P sent the rest.
        cached = int(req.prefix_len or 0)
        return Ready(
            rid=req.rid,
            t=self.parked_at[req.rid],
            prompt_tokens=prompt,
            cached_tokens=cached,
            received_tokens=prompt - cached,
            kv_bytes=(prompt - cached) * self.token_kv_bytes,
            # Handed-off ids whose KV is built (Catch-Up chunks): a router that lost an
            # "extended" event in a reconnect learns it from the "ready" its new watch brings.
            extended_tokens=int(getattr(req, "_pdd_extended", 0) or 0),  # ours, set on extend
        )

    def park_arrivals(self, scheduler) -> None:
        """Move relayed requests whose KV has arrived out of the waiting queue into ``parked``."""
        self.iteration += 1
        keep = []
        for req in scheduler.waiting_queue:
            if getattr(req, "_pdd_seen", False):  # ours, set just below
                keep.append(req)
                continue
            req._pdd_seen = True
            publish_prompt(scheduler, req)
            self.parked_at[req.rid] = time.time()
            self.idle.touch(req.rid)
            if not self.token_kv_bytes:
                self.token_kv_bytes = kv_bytes_per_token(scheduler)
            self._send(self._ready_event(req))
            if is_relayed(req.rid):
                self.parked[req.rid] = req
                if self._aborted_before_parking(req.rid):
                    self.releases.add(req.rid)  # ends through SGLang's abort, KV cached
            else:
                self.parked_at.pop(req.rid, None)
                self._unwatch(req.rid)  # a P-MD request: nothing more to report
                self.idle.forget(req.rid)
                keep.append(req)
        if len(keep) != len(scheduler.waiting_queue):
            scheduler.waiting_queue = keep

    def unpark_for_abort(self, scheduler, rid_prefix: str, abort_all: bool) -> None:
        """Put parked requests an abort names back in the waiting queue, where SGLang's abort
        releases them (their KV is inserted into the radix cache, so MD stays as warm as P)."""
        named = [r for r in self.parked if abort_all or r.startswith(rid_prefix)]
        for rid in named:
            scheduler.waiting_queue.insert(0, self.parked.pop(rid))
            self.parked_at.pop(rid, None)
            self.idle.forget(rid)
            self._unwatch(rid)
            self.kv_waits.discard(rid)
        if not named and rid_prefix and not abort_all:
            self._forget_old_aborts()  # also here: an MD serving only P-MD never parks
            self.recent_aborts[rid_prefix] = self.iteration
        for rid in [r for r in self.releases if abort_all or r.startswith(rid_prefix)]:
            self.releases.discard(rid)

    def _forget_old_aborts(self) -> None:
        cutoff = self.iteration - ABORT_MEMORY_ITERATIONS
        for prefix in [p for p, t in self.recent_aborts.items() if t < cutoff]:
            del self.recent_aborts[prefix]

    def _aborted_before_parking(self, rid: str) -> bool:
        self._forget_old_aborts()
        return any(rid.startswith(prefix) for prefix in self.recent_aborts)

    def release_finished(self, scheduler) -> None:
        """End parked requests that finished on Relay-Decode, through SGLang's own abort, which
        inserts their prompt KV into the radix cache: MD's cache stays as warm as P's."""
        from sglang.srt.managers.io_struct import AbortReq

        for rid in [r for r in self.releases if r in self.parked]:
            self.releases.discard(rid)
            scheduler.abort_request(AbortReq(rid=rid))  # our abort hook unparks it first

    def take_ready_handoffs(self, admit) -> list[tuple[object, list[int], bool, bool | str]]:
        """Parked requests whose handoff has arrived and ``admit`` lets through now:
        ``(req, token_ids, final, verdict)``.

        ``admit(req, token_ids, final)`` answers True (run it now), False (leave it for a
        later iteration), ``HandoffDeferred`` (drop it and tell the router, which sends it again
        later; the request stays parked) or a reason to refuse it (returned with that reason,
        the handoff dropped). A final handoff taken leaves ``parked`` (it decodes on); a
        Catch-Up chunk stays parked, to be extended while Relay-Decode keeps generating.
        """
        taken = []
        for rid in [r for r in self.handoffs if r in self.parked]:
            token_ids, final = self.handoffs[rid]
            req = self.parked[rid]
            verdict = admit(req, token_ids, final)
            if verdict is False:
                continue
            self._drop_handoff(rid)
            if isinstance(verdict, HandoffDeferred):
                self._send(Deferred(rid=rid, message=verdict.reason))
                continue
            if verdict is True and final:
                del self.parked[rid]
                self.parked_at.pop(rid, None)
                self.idle.forget(rid)
            taken.append((req, token_ids, final, verdict))
        return taken

    def handoff_runnable(self) -> bool:
        """A handoff the next extend batch can take (its request parked, not waiting for KV
        memory): the scheduler must not wait on the control socket before running it."""
        return any(rid in self.parked and rid not in self.kv_waits for rid in self.handoffs)

    def note_kv_wait(self, rid: str) -> None:
        """A handoff waits for KV memory (logged once per request)."""
        if rid not in self.kv_waits:
            self.kv_waits.add(rid)
            logger.info("sglang-pdd: %s: handoff waits for KV memory", rid)

    def refuse(self, req, reason: str) -> None:
        """Tell the router a handoff was refused; the request stays parked until aborted."""
        logger.error("sglang-pdd: %s: handoff refused: %s", req.rid, reason)
        self.parked.setdefault(req.rid, req)
        self._send(Error(rid=req.rid, message=f"handoff refused: {reason}"))

    def note_extend_started(self, rid: str) -> None:
        """The extend batch carrying ``rid``'s handoff was built (it runs next)."""
        if (times := self.handoff_times.get(rid)) is not None:
            times[1] = time.monotonic()

    def notify_extended(self, rid: str, tokens: int, final: bool) -> None:
        """Tell the router MD holds KV for ``tokens`` handed-off ids, with how long the handoff
        waited on MD and how long its extend batch ran (0 if none ran: nothing to extend)."""
        now = time.monotonic()
        arrived, started = self.handoff_times.pop(rid, None) or (None, None)
        waited = extend = None
        if arrived is not None:
            waited = (started or now) - arrived
            extend = now - started if started is not None else 0.0
        event = Extended(
            rid=rid, t=time.time(), tokens=tokens, final=final, waited_s=waited, extend_s=extend
        )
        self._send(event)
        if final:
            self._unwatch(rid)
            self.kv_waits.discard(rid)


def _op(message: ControlMessage) -> str:
    """The wire tag of a control message (``watch``, ``handoff``, ``release``), for logs."""
    return type(message).__struct_config__.tag


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


def set_handoff_tokens(req, token_ids: list[int]) -> int:
    """Make ``token_ids`` the request's output so far and return how many need extending.

    The prompt's KV (and that of ids extended by earlier Catch-Up chunks) stays in the request's
    row as the prefix; the extend covers the rest.
    """
    done = getattr(req, "_pdd_extended", 0)  # ours: ids extended by earlier Catch-Up chunks
    req.output_ids = array("q", token_ids)
    req.full_untruncated_fill_ids = array("q", req.origin_input_ids) + req.output_ids
    prompt_len = len(req.origin_input_ids)
    req.prefix_len = prompt_len + done
    req.extend_end = prompt_len + len(token_ids)
    if req.return_logprob:
        _align_output_logprobs(req.logprob, token_ids)
    return len(token_ids) - done


def _align_output_logprobs(logprob, token_ids: list[int]) -> None:
    """Give each handed-off id an (empty) entry in the request's output logprob lists, so that
    SGLang's streaming, which slices those lists by output position, sends the entry of each
    token MD samples at that token's position. P's first-token entry stays; the router takes
    the handed-off ids' logprobs from the instance that produced them."""
    count = len(token_ids)
    for name, pad in (
        ("output_token_logprobs_val", None),
        ("output_top_logprobs_val", []),
        ("output_top_logprobs_idx", []),
        ("output_token_ids_logprobs_val", []),
        ("output_token_ids_logprobs_idx", []),
    ):
        values = getattr(logprob, name)  # ReqLogprob fields (sglang_surface); None: not kept
        if values is not None:
            del values[count:]
            values.extend([pad] * (count - len(values)))
    ids = logprob.output_token_logprobs_idx
    if ids is not None:
        del ids[count:]
        ids.extend(token_ids[len(ids) :])
