"""WAN-bound KV sends get their own transfer queues, checked against SGLang's real queue choice."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import pytest

from sglang_pdd import config as pdd_config
from sglang_pdd.transfer.queue_split import is_wan_bound, queues_for
from sglang_pdd.transfer.wan_link import WanLinkConfig


def test_wan_bound_and_halves():
    assert is_wan_bound(["127.0.0.2:17001"], ["127.0.0.2"])
    assert not is_wan_bound(["127.0.0.1:17001", "[::1]:5"], ["127.0.0.2"])
    assert queues_for("abcd", wan=False) == ["a", "b"]
    assert queues_for("abcd", wan=True) == ["c", "d"]
    assert queues_for("abcde", wan=True) == ["c", "d", "e"]
    assert queues_for("a", wan=True) == ["a"]  # nothing to split


class _Queue:
    def __init__(self, name: str) -> None:
        self.name, self.items = name, []

    def put(self, item) -> None:
        self.items.append(item)


def _sender(conn, receivers: dict[int, str]) -> SimpleNamespace:
    """The state SGLang's add_transfer_request reads, for rooms sent to ``receivers``."""
    from sglang.srt.disaggregation.base import KVPoll
    from sglang.srt.disaggregation.utils import DisaggregationMode

    return SimpleNamespace(
        disaggregation_mode=DisaggregationMode.PREFILL,
        request_status={room: KVPoll.WaitingForInput for room in receivers},
        check_status=lambda room: KVPoll.WaitingForInput,
        transfer_infos={room: {session: object()} for room, session in receivers.items()},
        transfer_queues=[_Queue(f"q{i}") for i in range(4)],
    )


def _queue_of(sender, room: int, send) -> str:
    send(sender, room, np.arange(4, dtype=np.int32), slice(0, 4), False)
    return next(q.name for q in sender.transfer_queues for item in q.items if item.room == room)


@pytest.fixture
def wan_prefill():
    previous = pdd_config.current()
    pdd_config.set_current(
        pdd_config.PddServerConfig(
            role="prefill",
            wan_hosts=("127.0.0.2",),
            wan_bandwidth_mbps=WanLinkConfig().bandwidth_mbps,
        )
    )
    yield
    pdd_config.set_current(previous)


def test_colliding_ports_no_longer_share_a_queue(wan_prefill):
    conn = importlib.import_module("sglang.srt.disaggregation.mooncake.conn")
    hook = importlib.import_module("sglang_pdd.patches.kv_transfer_queue_split").hook
    real = conn.MooncakeKVManager.add_transfer_request
    real = getattr(real, "__wrapped__", real)  # the plugin may have wrapped it in this process
    # Ports 15035 and 15175 are equal mod 4: SGLang alone puts both sends on one queue.
    receivers = {1: "127.0.0.1:15175", 2: "127.0.0.2:15035"}
    plain = _sender(conn, receivers)
    assert _queue_of(plain, 1, real) == _queue_of(plain, 2, real)

    def hooked(sender, room, *args):
        return hook(real, sender, room, *args)

    split = _sender(conn, receivers)
    relay_queue, wan_queue = _queue_of(split, 1, hooked), _queue_of(split, 2, hooked)
    assert relay_queue in ("q0", "q1") and wan_queue in ("q2", "q3")
    assert [q.name for q in split.transfer_queues] == ["q0", "q1", "q2", "q3"]  # restored
