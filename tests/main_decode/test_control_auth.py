"""CURVE on the Main-Decode control socket, with real ZeroMQ sockets (no SGLang)."""

from __future__ import annotations

import asyncio
import shutil

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from sglang_pdd.config import PddServerConfig
from sglang_pdd.main_decode.control_auth import CurveClient, CurveServer, write_keys
from sglang_pdd.main_decode.state import MainDecodeState
from sglang_pdd.router.config import RouterConfig
from sglang_pdd.router.instances.main_control import MainControlClient
from sglang_pdd.testbed.ports import free_port
from sglang_pdd.wire.messages import Extended, Watch

_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


@pytest.fixture
def keys(tmp_path):
    """Pairs for MD, a router and an intruder; MD accepts the router's public key only."""
    write_keys(str(tmp_path / "keys"), ["main", "router", "intruder"])
    clients = tmp_path / "clients"
    clients.mkdir()
    shutil.copy(tmp_path / "keys" / "router.key", clients)
    return tmp_path / "keys", clients


async def _read_until(state: MainDecodeState, count: int) -> list:
    """What MD's socket delivered, once ``count`` messages have come."""
    messages = []
    while len(messages) < count:
        await asyncio.to_thread(state.wait_for_control, 100)
        batch = state.read_control()
        if batch is not None:
            state.apply_control(batch)
            messages += [message for _, message in batch.items]
    return messages


def _rejected(sock: zmq.Socket) -> int:
    """Wait for the socket's handshake to be refused; the monitor event's code."""
    monitor = sock.get_monitor_socket(_FAILED)
    try:
        if not monitor.poll(60_000):
            raise AssertionError("the handshake was never refused")
        return recv_monitor_message(monitor)["event"]
    finally:
        sock.disable_monitor()
        monitor.close()


def test_only_a_router_whose_key_md_accepts_reaches_the_control_socket(keys):
    folder, clients = keys
    port = free_port()
    server = CurveServer(str(folder / "main.key_secret"), str(clients))
    state = MainDecodeState(port, host="127.0.0.1", curve=server)
    endpoint = f"tcp://127.0.0.1:{port}"
    context = zmq.Context()
    intruder = plain = None
    try:
        # An intruder with a key pair of its own, and a peer without CURVE: both refused at the
        # handshake, so nothing they send can reach MD.
        intruder = context.socket(zmq.DEALER)
        CurveClient(str(folder / "intruder.key_secret"), str(folder / "main.key")).secure(intruder)
        intruder.connect(endpoint)
        intruder.send(b'{"op": "release", "rid": "victim.pdd-relayed"}')
        assert _rejected(intruder) == zmq.EVENT_HANDSHAKE_FAILED_AUTH
        plain = context.socket(zmq.DEALER)
        plain.connect(endpoint)
        plain.send(b'{"op": "release", "rid": "victim.pdd-relayed"}')
        assert _rejected(plain) & _FAILED

        async def router_side():
            curve = CurveClient(str(folder / "router.key_secret"), str(folder / "main.key"))
            client = MainControlClient(endpoint, "http://md:1", curve=curve)
            client.start()
            queue = await client.watch("r.pdd-relayed")
            got = await _read_until(state, 1)
            state.notify_extended("r.pdd-relayed", 5, False)  # MD answers its watcher
            event = await asyncio.wait_for(queue.get(), 60)
            await client.close()
            return got, event

        got, event = asyncio.run(router_side())
        # The router's watch was the only message MD read: the others never got through.
        assert got == [Watch(rid="r.pdd-relayed")]
        assert event == Extended(rid="r.pdd-relayed", tokens=5, final=False, t=event.t)
    finally:
        for sock in (intruder, plain):
            if sock is not None:
                sock.close(0)
        state.socket.close(0)
        state.socket.auth.stop()
        context.term()


def test_curve_flags_are_refused_alone_or_with_unreadable_keys(keys, tmp_path):
    folder, clients = keys
    secret, public = str(folder / "main.key_secret"), str(folder / "main.key")
    main = {"role": "main", "control_port": 5000}
    with pytest.raises(ValueError, match="go together"):
        PddServerConfig(**main, control_curve_secret=secret)
    with pytest.raises(ValueError, match="only accepted with --pdd-role main"):
        PddServerConfig(role="relay", control_curve_secret=secret, control_curve_clients=".")
    with pytest.raises(ValueError, match="--pdd-control-curve-secret .*holds no secret key"):
        PddServerConfig(**main, control_curve_secret=public, control_curve_clients=str(clients))
    with pytest.raises(ValueError, match="--pdd-control-curve-clients .*needs a folder"):
        PddServerConfig(
            **main, control_curve_secret=secret, control_curve_clients=str(tmp_path / "no")
        )
    ok = PddServerConfig(**main, control_curve_secret=secret, control_curve_clients=str(clients))
    assert ok.control_curve() == CurveServer(secret, str(clients))
    base = {"prefill": ("http://p:1",), "relay": ("http://r:1",)}
    from sglang_pdd.router.config import MainEndpoint

    base["main"] = (MainEndpoint("http://m:1", "tcp://m:2"),)
    with pytest.raises(ValueError, match="--control-curve-secret and --control-curve-server"):
        RouterConfig(**base, control_curve_secret=str(folder / "router.key_secret"))
    with pytest.raises(ValueError, match="--control-curve-server .*not a readable"):
        RouterConfig(
            **base,
            control_curve_secret=str(folder / "router.key_secret"),
            control_curve_server=str(tmp_path / "missing.key"),
        )
