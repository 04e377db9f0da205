"""``ControlSocket``: Main-Decode's ZeroMQ ROUTER socket that routers send control messages to.

Only the scheduler rank that receives requests binds it; it reads the routers' watches,
handoffs and releases, and sends them the events ``ParkedRequests`` decides on.
"""

from __future__ import annotations

import logging

import zmq

from sglang_pdd.config import is_loopback
from sglang_pdd.wire import codec
from sglang_pdd.wire.messages import MAX_MESSAGE_BYTES, ControlMessage, Error, Event

logger = logging.getLogger("sglang_pdd")
CONTROL_RCVHWM = 10_000  # control messages queued per peer before ZeroMQ drops more


class ControlSocket:
    """The bound control socket: ``read`` what peers sent, ``send`` them events."""

    def __init__(self, host: str, port: int, curve=None, vocab_size: int | None = None) -> None:
        """``curve``: a ``control_auth.CurveServer``, or None for an unauthenticated socket.
        ``vocab_size`` bounds the token ids a handoff may carry."""
        self.vocab_size = vocab_size
        # With keys, a context of its own: its authenticator then judges this socket
        # only, never SGLang's sockets on the shared context.
        context = zmq.Context() if curve is not None else zmq.Context.instance()
        self.zmq = context.socket(zmq.ROUTER)
        self.auth = curve.secure(self.zmq) if curve is not None else None  # CURVE's thread
        self.zmq.setsockopt(zmq.LINGER, 0)
        # A peer sending more than this is disconnected by ZeroMQ before MD reads anything.
        self.zmq.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        # A router that redials (after a dropped connection) keeps its identity: its new
        # connection takes the identity over from the old one, which may linger.
        self.zmq.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # A flooding peer fills this queue, not MD's memory: ZeroMQ drops what is beyond it.
        self.zmq.setsockopt(zmq.RCVHWM, CONTROL_RCVHWM)
        self.zmq.bind(f"tcp://{host}:{port}")
        mode = "CURVE" if curve is not None else "no authentication"
        logger.info("sglang-pdd: Main-Decode control socket on %s:%d (%s)", host, port, mode)
        if curve is None and not is_loopback(host):
            logger.warning(
                "sglang-pdd: INSECURE: the control socket on %s:%d takes handoffs and "
                "releases from anyone who reaches it (--pdd-control-insecure)",
                host,
                port,
            )

    def poll(self, timeout_ms: int) -> None:
        """Block up to ``timeout_ms`` until a message is pending."""
        self.zmq.poll(timeout_ms)

    def read(self) -> list[tuple[bytes, ControlMessage]]:
        """Drain the socket: the well-formed messages, in order, with their sender's identity;
        malformed ones are dropped here, their sender told why."""
        items = []
        while True:
            try:
                frames = self.zmq.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return items
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
                    self.refuse(identity, rid, str(exc))
                continue
            items.append((identity, message))

    def send(self, identity: bytes, event: Event) -> None:
        """Send ``event`` to the peer ``identity`` (ZeroMQ drops it if that peer is gone)."""
        self.zmq.send_multipart([identity, codec.encode(event)], zmq.NOBLOCK)

    def refuse(self, identity: bytes, rid: str, reason: str) -> None:
        """Answer the sender that its message about ``rid`` changed nothing, and why."""
        error = Error(rid=rid, message=f"refused: {reason}")
        try:
            self.zmq.send_multipart([identity, codec.encode(error)], zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # the peer is gone: nobody to tell
            logger.warning("sglang-pdd: refusal to a control peer not sent: %s", exc)

    def close(self, linger: int | None = None) -> None:
        """Close the socket (``linger`` as ZeroMQ's: None keeps the socket's own, 0)."""
        self.zmq.close(linger)
