"""Main-Decode keeps serving whatever arrives on its control socket (malformed, forged ids), and
Prefill whatever arrives on its transfer ledger."""

from __future__ import annotations

import json
import random

import pytest
import requests
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_pdd.testbed.client import generate
from sglang_pdd.testbed.held_links import generate_acting_at
from tests.wire.test_codec import shaped

pytestmark = pytest.mark.servers


def _greedy(ids, budget):
    return {"input_ids": ids, "sampling_params": {"temperature": 0.0, "max_new_tokens": budget}}


def _still_serves_identically(pdd_cluster, colocated, seed: int) -> None:
    """MD is up, and a greedy request through the router equals the co-located server's."""
    assert requests.get(f"{pdd_cluster.main.url}/health", timeout=30).status_code == 200
    rng = random.Random(seed)
    ids = [rng.randrange(10, 250) for _ in range(300)]
    got = generate(pdd_cluster.router_url, _greedy(ids, 32))
    assert (
        got.status == 200 and got.output_ids == generate(colocated.url, _greedy(ids, 32)).output_ids
    )


def test_malformed_control_messages_leave_main_decode_serving(pdd_cluster, colocated):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(pdd_cluster.control_via_wan)
    try:
        refused_with_rid = [
            {"op": "handoff", "rid": "forged.pdd-relayed", "token_ids": [10**9]},  # off vocab
            {"op": "handoff", "rid": "forged.pdd-relayed", "token_ids": [-5]},
            {"op": "handoff", "rid": "forged.pdd-relayed", "token_ids": [True]},
            {"op": "steal", "rid": "forged.pdd-relayed"},
        ]
        for message in refused_with_rid:
            sock.send(json.dumps(message).encode())
        sock.send(b"{not json")
        sock.send_multipart([b"three", b"frames"])
        sock.send(json.dumps({"rid": "no-op-at-all"}).encode())
        errors = []
        while len(errors) < len(refused_with_rid) and sock.poll(60_000):
            errors.append(json.loads(sock.recv()))
        assert len(errors) == len(refused_with_rid)
        assert all(e["event"] == "error" and e["rid"] == "forged.pdd-relayed" for e in errors)
    finally:
        sock.close()
    _still_serves_identically(pdd_cluster, colocated, seed=77)


# One control message as it may arrive from a hostile peer: bytes, a JSON object shaped like
# a message (right and wrong fields), a valid op naming a relayed rid no router sent, or
# several ZeroMQ frames.
_frames = st.one_of(
    st.binary(max_size=300).map(lambda b: [b]),
    shaped.map(lambda d: [json.dumps(d).encode()]),
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(["watch", "handoff", "release", "expire"]),
            "rid": st.text("abc", min_size=1, max_size=4).map(lambda r: f"fuzz-{r}.pdd-relayed"),
        },
        optional={"token_ids": st.lists(st.integers(0, 300), max_size=6), "final": st.booleans()},
    ).map(lambda d: [json.dumps(d).encode()]),
    st.lists(st.binary(max_size=20), min_size=2, max_size=3),
)


def _send_generated(sock, frames, read_answer) -> list:
    """Send batches of generated ``frames`` (hypothesis) on ``sock``, reading each answer that
    has come with ``read_answer``; returns every message sent."""
    sent = []

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(frames, min_size=1, max_size=8))
    def send(batch):
        for message in batch:
            sock.send_multipart(message)
            sent.append(message)
        while sock.poll(0):
            read_answer()

    send()
    return sent


def test_generated_control_messages_leave_main_decode_serving(pdd_cluster, colocated):
    """A few hundred generated control messages (hypothesis) to MD's control socket through
    the WAN link: MD stays up and its answers stay identical to the co-located server's."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(pdd_cluster.control_via_wan)
    try:
        # MD's error replies are read as they come, so none piles up.
        sent = _send_generated(sock, _frames, lambda: sock.recv_multipart())
        # One message MD must answer proves it read everything sent before it (one socket).
        sock.send(
            json.dumps({"op": "handoff", "rid": "last.pdd-relayed", "token_ids": [-1]}).encode()
        )
        last = None
        while sock.poll(60_000):
            last = json.loads(sock.recv_multipart()[-1])
            if last.get("rid") == "last.pdd-relayed":
                break
        assert last is not None and last["event"] == "error", last
    finally:
        sock.close()
    assert len(sent) >= 100, len(sent)
    _still_serves_identically(pdd_cluster, colocated, seed=79)


_ledger_frames = st.one_of(
    st.binary(max_size=300).map(lambda b: [b]),
    shaped.map(lambda d: [json.dumps(d).encode()]),
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(["claim", "drop", "steal"]),
            "rid": st.text("abc", min_size=1, max_size=4).map(lambda r: f"fuzz-{r}"),
        },
        optional={
            "main": st.sampled_from(["http://md", 7, ""]),
            "blocks": st.lists(st.integers(-2, 2**64), max_size=6),
            "nbytes": st.floats(allow_nan=True),
        },
    ).map(lambda d: [json.dumps(d).encode()]),
    st.lists(st.binary(max_size=20), min_size=2, max_size=3),
)


def test_generated_ledger_messages_leave_prefill_and_its_ledger_serving(pdd_cluster, colocated):
    """Generated messages (hypothesis) to Prefill's transfer ledger: every well-framed one is
    answered, the ledger still grants a real claim after them, and the cluster still answers
    as the co-located server does. The fuzzer's claims end with its drops or their TTL; their
    blocks are hashes no prompt has, so no router waits on them."""
    from sglang_pdd.wire import ledger as wire

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{pdd_cluster.ledger_port}")
    try:
        # Every answer must be a well-formed event.
        sent = _send_generated(sock, _ledger_frames, lambda: wire.decode_event(sock.recv()))
        sock.send(wire.encode(wire.Claim(rid="last", main="http://fuzz", blocks=[1], nbytes=1)))
        last = None
        while sock.poll(60_000):
            last = wire.decode_event(sock.recv())
            if last.rid == "last":
                break
        # Granted, with what P measured in hand for the WAN then (its --pdd-wan-hosts are set;
        # whatever other tests' transfers are still crossing).
        assert isinstance(last, wire.Granted) and last.others_bytes == 0.0, last
        assert last.sending_bytes is not None and last.sending_bytes >= 0, last
        sock.send(wire.encode(wire.Drop(rid="last")))
    finally:
        sock.close()
    assert len(sent) >= 100, len(sent)
    _still_serves_identically(pdd_cluster, colocated, seed=83)


def test_a_main_decode_with_curve_keys_serves_its_router_and_refuses_other_peers(
    server_group, pdd_cluster, colocated, tmp_path, held_links
):
    """MD started with CURVE keys: the router holding an accepted key hands requests off to it
    as usual (output equal to the co-located server's), while a peer with another key, through
    the same WAN link, fails the handshake."""
    import shutil

    from zmq.utils.monitor import recv_monitor_message

    from sglang_pdd.main_decode.control_auth import CurveClient, write_keys
    from sglang_pdd.testbed.cluster import add_main_decode, start_router

    keys, clients = tmp_path / "keys", tmp_path / "clients"
    write_keys(str(keys), ["main", "router", "intruder"])
    clients.mkdir()
    shutil.copy(keys / "router.key", clients)
    name = "main-curve"
    site = add_main_decode(
        server_group,
        pdd_cluster,
        name,
        extra_args=(
            "--pdd-control-curve-secret",
            str(keys / "main.key_secret"),
            "--pdd-control-curve-clients",
            str(clients),
        ),
    )
    try:
        assert "(CURVE)" in site.server.log_text()  # the control socket has its keys
        curve = (keys / "router.key_secret", keys / "main.key")
        router = start_router(
            server_group,
            pdd_cluster,
            name=f"router-{name}",
            mains=[site],
            relay_url=held_links.relay.url,
            control_curve=curve,
            tail_on_relay=False,
            handoff_switch="hold",
        )
        rng = random.Random(78)
        ids = [rng.randrange(10, 250) for _ in range(300)]
        body = {
            **_greedy(ids, 200),
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 200, "ignore_eos": True},
        }
        body["rid"] = f"curve-{rng.getrandbits(32)}"
        # RLD is held at 30 ids: the request can only end through a handoff, which needs MD's
        # "ready" over the authenticated socket (a fresh MD's first KV can take seconds).
        held_links.relay.arm(30)
        try:
            got = generate_acting_at(
                router.url,
                body,
                stream=False,
                when=lambda r: r["main_tokens"] > 0,
                what="Main-Decode's first token",
                act=lambda: None,
            )
        finally:
            held_links.relay.release()
        assert got.status == 200, got.body
        reference = {k: v for k, v in body.items() if k != "rid"}
        assert got.output_ids == generate(colocated.url, reference).output_ids
        record = got.body["meta_info"]["pdd"]
        # MD's "ready" came over the authenticated socket (else no handoff could be made).
        assert record["main_ready_s"] is not None, record
        intruder = zmq.Context.instance().socket(zmq.DEALER)
        intruder.setsockopt(zmq.LINGER, 0)
        CurveClient(str(keys / "intruder.key_secret"), str(keys / "main.key")).secure(intruder)
        monitor = intruder.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
        try:
            intruder.connect(site.control_via_wan)
            intruder.send(json.dumps({"op": "watch", "rid": "x.pdd-relayed"}).encode())
            assert monitor.poll(60_000), "the intruder's handshake was never refused"
            assert recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
        finally:
            intruder.disable_monitor()
            monitor.close()
            intruder.close()
        server_group.stop_named(f"router-{name}")
    finally:
        server_group.stop_named(
            name, f"wan-http-{name}", f"wan-control-{name}", f"wan-kv-events-{name}"
        )
