"""The router's control connection to Main-Decode across a reconnect (real ZeroMQ)."""

from __future__ import annotations

import asyncio
import json

import zmq
import zmq.asyncio

from sglang_pdd.router.instances.main_control import MainControlClient
from sglang_pdd.testbed.ports import free_port


async def _bind(port: int) -> zmq.asyncio.Socket:
    sock = zmq.asyncio.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    for _ in range(100):  # the old socket's port may take a moment to free
        try:
            sock.bind(f"tcp://127.0.0.1:{port}")
            return sock
        except zmq.ZMQError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"port {port} never became free")


async def _rids(md: zmq.asyncio.Socket, count: int) -> tuple[bytes, set[str]]:
    rids, identity = set(), b""
    while len(rids) < count:
        identity, payload = await asyncio.wait_for(md.recv_multipart(), 60)
        message = json.loads(payload)
        assert message["op"] == "watch"
        rids.add(message["rid"])
    return identity, rids


def test_after_a_reconnect_every_followed_request_is_watched_again_and_events_flow():
    async def run():
        port = free_port()
        md = await _bind(port)
        client = MainControlClient(f"tcp://127.0.0.1:{port}", "http://md:1")
        client.start()
        queues = {rid: await client.watch(rid) for rid in ("a.pdd-relayed", "b.pdd-relayed")}
        _, first = await _rids(md, 2)
        client.forget("b.pdd-relayed")  # finished: not watched again
        md.close()  # Main-Decode's end goes away...
        md = await _bind(port)  # ...and comes back: nothing it sent meanwhile arrived
        identity, again = await _rids(md, 1)
        event = {"event": "ready", "rid": "a.pdd-relayed", "t": 0, "extended_tokens": 64}
        await md.send_multipart([identity, json.dumps(event).encode()])
        got = await asyncio.wait_for(queues["a.pdd-relayed"].get(), 60)
        await client.close()
        md.close()
        return first, again, got

    first, again, got = asyncio.run(run())
    assert first == {"a.pdd-relayed", "b.pdd-relayed"} and again == {"a.pdd-relayed"}
    assert got.extended_tokens == 64


def test_a_message_nobody_takes_fails_naming_main_decode_instead_of_waiting():
    import pytest

    from sglang_pdd.router.upstream.calls import UpstreamError

    async def run():
        port = free_port()  # nothing listens: the DEALER has no peer to queue for
        client = MainControlClient(f"tcp://127.0.0.1:{port}", "http://md:1", send_timeout_ms=200)
        client.start()
        try:
            with pytest.raises(UpstreamError) as caught:
                await client.watch("a.pdd-relayed")
        finally:
            await client.close()
        return caught.value

    error = asyncio.run(run())
    assert error.status == 502 and error.instance == "http://md:1"
    assert "took nothing for 0.2 s" in error.body["error"]["message"]


def test_a_release_never_waits_for_an_unreachable_main_decode():
    async def run():
        client = MainControlClient(f"tcp://127.0.0.1:{free_port()}", "http://md:1")
        client.start()
        try:
            return client.release_nowait("a.pdd-relayed")  # returns at once, nothing sent
        finally:
            await client.close()

    assert asyncio.run(run()) is False
