"""Prefill's two Mooncake engines (``sglang_pdd/transfer/wan_engine.py``).

The routing and mirroring rules on stand-in engines (pure logic); then real Mooncake engines in
one process (TCP on loopback, as this host has no RDMA): one buffer registered in a local and a
WAN engine, each writing to its own receiver, byte for byte; and the installed SGLang's
``MooncakeTransferEngine`` calling nothing on its engine that the router does not route."""

from __future__ import annotations

import ctypes
import os
import re

import pytest

from sglang_pdd import config as pdd_config
from sglang_pdd.transfer import wan_engine
from sglang_pdd.transfer.wan_engine import (
    EngineCounters,
    RoutedTransferEngine,
    forced_tcp,
    parse_engine_bytes,
    resolve_wan_transport,
)

MD, RLD = "10.1.0.21", "10.0.0.12"


class StandIn:
    """A Mooncake engine's interface, recording calls; ``fail`` names methods that fail."""

    def __init__(self, name: str, fail: tuple[str, ...] = ()) -> None:
        self.name, self.fail, self.calls = name, fail, []

    def _call(self, method: str, *args):
        self.calls.append((method, *args))
        return -1 if method in self.fail else 0

    def register_memory(self, ptr, length):
        return self._call("register_memory", ptr, length)

    def unregister_memory(self, ptr):
        return self._call("unregister_memory", ptr)

    def batch_register_memory(self, ptrs, lengths):
        return self._call("batch_register_memory", ptrs, lengths)

    def batch_unregister_memory(self, ptrs):
        return self._call("batch_unregister_memory", ptrs)

    def batch_transfer_sync_write(self, session, buffers, peers, lengths):
        return self._call("batch_transfer_sync_write", session)

    def transfer_sync_write(self, session, buffer, peer, length):
        return self._call("transfer_sync_write", session)

    def send_probe(self, session):
        return self._call("send_probe", session)

    def get_rpc_port(self):
        return 15001 if self.name == "local" else 15003


def _routed(local=None, wan=None):
    local = local or StandIn("local")
    wan = StandIn("wan") if wan is None else wan
    return RoutedTransferEngine(local, wan, {MD}.__contains__, EngineCounters()), local, wan


def test_writes_and_probes_to_a_wan_host_take_the_wan_engine_and_the_rest_the_local_one():
    routed, local, wan = _routed()
    assert routed.batch_transfer_sync_write(f"{MD}:16001", [1, 2], [3, 4], [100, 28]) == 0
    assert routed.batch_transfer_sync_write(f"{RLD}:16001", [1], [3], [64]) == 0
    assert routed.transfer_sync_write(f"{MD}:16001", 1, 3, 8) == 0
    assert routed.send_probe(f"{MD}:16001") == 0
    assert routed.send_probe(f"{RLD}:16001") == 0
    assert [c[:2] for c in wan.calls] == [
        ("batch_transfer_sync_write", f"{MD}:16001"),
        ("transfer_sync_write", f"{MD}:16001"),
        ("send_probe", f"{MD}:16001"),
    ]
    assert [c[:2] for c in local.calls] == [
        ("batch_transfer_sync_write", f"{RLD}:16001"),
        ("send_probe", f"{RLD}:16001"),
    ]
    snap = routed.counters.snapshot()
    assert snap["wan"] == {MD: {"bytes": 136, "writes": 2, "failed_writes": 0, "probes": 1}}
    assert snap["local"] == {RLD: {"bytes": 64, "writes": 1, "failed_writes": 0, "probes": 1}}


def test_the_session_id_is_the_local_engines():
    routed, _, _ = _routed()
    assert routed.get_rpc_port() == 15001 and routed.wan_rpc_port() == 15003


def test_registrations_are_mirrored_to_both_engines():
    routed, local, wan = _routed()
    assert routed.batch_register_memory([10, 20], [4096, 8192]) == 0
    assert routed.register_memory(30, 16) == 0
    assert routed.batch_unregister_memory([10, 20]) == 0
    assert routed.unregister_memory(30) == 0
    assert (
        local.calls
        == wan.calls
        == [
            ("batch_register_memory", [10, 20], [4096, 8192]),
            ("register_memory", 30, 16),
            ("batch_unregister_memory", [10, 20]),
            ("unregister_memory", 30),
        ]
    )


@pytest.mark.parametrize("method", ["batch_register_memory", "register_memory"])
def test_a_registration_the_wan_engine_refuses_is_undone_in_the_local_one(method):
    routed, local, _ = _routed(wan=StandIn("wan", fail=(method,)))
    rc = (
        routed.batch_register_memory([10], [64])
        if method.startswith("batch")
        else (routed.register_memory(10, 64))
    )
    assert rc == -1
    undo = "batch_unregister_memory" if method.startswith("batch") else "unregister_memory"
    assert local.calls[-1][0] == undo


def test_a_failed_write_counts_as_failed_and_carries_no_bytes():
    routed, _, _ = _routed(wan=StandIn("wan", fail=("batch_transfer_sync_write",)))
    assert routed.batch_transfer_sync_write(f"{MD}:1", [1], [2], [500]) == -1
    assert routed.counters.snapshot()["wan"][MD] == {
        "bytes": 0,
        "writes": 0,
        "failed_writes": 1,
        "probes": 0,
    }


def test_without_a_wan_engine_everything_goes_through_the_local_one():
    local = StandIn("local")
    routed = RoutedTransferEngine(local, None, {MD}.__contains__, EngineCounters())
    routed.batch_register_memory([1], [8])
    routed.batch_transfer_sync_write(f"{MD}:1", [1], [2], [8])
    assert [c[0] for c in local.calls] == ["batch_register_memory", "batch_transfer_sync_write"]
    assert routed.counters.snapshot() == {
        "local": {MD: {"bytes": 8, "writes": 1, "failed_writes": 0, "probes": 0}}
    }


@pytest.mark.parametrize(
    "transport, env, devices, resolved",
    [
        ("auto", {}, ["mlx5_0"], "tcp"),  # an RDMA host: the WAN gets its own TCP engine
        ("auto", {"MC_FORCE_TCP": "1"}, ["mlx5_0"], "shared"),  # the whole process is TCP
        ("auto", {}, [], "shared"),  # no HCA: Mooncake installs TCP anyway
        ("tcp", {}, [], "tcp"),
        ("shared", {}, ["mlx5_0"], "shared"),  # RoCE across the sites
    ],
)
def test_auto_is_tcp_exactly_when_the_local_engine_will_be_rdma(transport, env, devices, resolved):
    assert resolve_wan_transport(transport, env, devices) == resolved


def test_a_bad_transport_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--pdd-wan-transport='rdma'.*auto, tcp, shared"):
        resolve_wan_transport("rdma", {}, [])
    with pytest.raises(ValueError, match="--pdd-wan-transport='udp'"):
        pdd_config.PddServerConfig(role="prefill", wan_hosts=(MD,), wan_transport="udp")


@pytest.mark.parametrize(
    "role, hosts", [("relay", (MD,)), ("main", (MD,)), ("prefill", ()), ("none", ())]
)
def test_the_wan_transport_is_a_prefill_flag_with_wan_hosts(role, hosts):
    kwargs = {"control_port": 5600} if role == "main" else {}
    with pytest.raises(ValueError, match="--pdd-wan-transport tcp is only accepted with"):
        pdd_config.PddServerConfig(role=role, wan_hosts=hosts, wan_transport="tcp", **kwargs)
    pdd_config.PddServerConfig(role=role, wan_hosts=hosts, **kwargs)  # auto: accepted anywhere


def test_forced_tcp_sets_the_variable_only_inside(monkeypatch):
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    with forced_tcp():
        assert os.environ["MC_FORCE_TCP"] == "1"
    assert "MC_FORCE_TCP" not in os.environ
    monkeypatch.setenv("MC_FORCE_TCP", "0")
    with forced_tcp():
        assert os.environ["MC_FORCE_TCP"] == "1"
    assert os.environ["MC_FORCE_TCP"] == "0"


def test_engine_bytes_are_read_back_from_prometheus_text():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    c = Counter(wan_engine.BYTES_METRIC, "x", ("engine", "peer"), registry=registry)
    c.labels(engine="wan", peer=MD).inc(1000)
    c.labels(engine="local", peer=RLD).inc(24)
    assert parse_engine_bytes(generate_latest(registry).decode()) == {
        "wan": {MD: 1000},
        "local": {RLD: 24},
    }


def test_the_engine_split_names_misrouted_bytes():
    split = wan_engine.engine_split({"wan": {MD: 900}, "local": {RLD: 300}}, [MD])
    assert split == wan_engine.EngineSplit(900, 300, 0)
    split = wan_engine.engine_split({"wan": {RLD: 5}, "local": {MD: 7, RLD: 1}}, [MD])
    assert split == wan_engine.EngineSplit(5, 8, 12)
    assert wan_engine.engine_split({}, [MD]) == wan_engine.EngineSplit(0, 0, 0)


def test_sglang_calls_only_routed_methods_on_its_engine():
    """Every ``self.engine.X`` in SGLang's MooncakeTransferEngine after init is a method the
    router has: a new call would otherwise fail at run time, or (were it delegated blindly)
    reach one engine for a peer only the other can reach."""
    import importlib.util

    # The source file, read without importing SGLang (an import costs ~15 s).
    spec = importlib.util.find_spec("sglang")
    if spec is None:
        pytest.skip("sglang is not installed in this environment")
    path = os.path.join(
        spec.submodule_search_locations[0],
        "srt/distributed/device_communicators/mooncake_transfer_engine.py",
    )
    with open(path) as f:
        source = f.read().split("class MooncakeTransferEngine", 1)[1].split("\ndef ", 1)[0]
    called = set(re.findall(r"self\.engine\.(\w+)\(", source)) - {"initialize"}
    assert called and called <= {
        name for name in vars(RoutedTransferEngine) if not name.startswith("_")
    }, called


def _engine(host: str):
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    assert engine.initialize(host, "P2PHANDSHAKE", "tcp", "") == 0
    return engine


def test_two_real_engines_share_one_buffer_and_each_reaches_its_receiver():
    """Real Mooncake engines in this process: P's local engine and a WAN engine built as a
    Prefill builds it (``MC_FORCE_TCP`` only around its init), the same source buffer
    registered in both; Relay-Decode's receiver on 127.0.0.1, Main-Decode's on 127.0.0.2."""
    pytest.importorskip("mooncake.engine")
    rld, md = _engine("127.0.0.1"), _engine("127.0.0.2")
    size = 1 << 16
    rld_buf, md_buf = ctypes.create_string_buffer(size), ctypes.create_string_buffer(size)
    assert rld.register_memory(ctypes.addressof(rld_buf), size) == 0
    assert md.register_memory(ctypes.addressof(md_buf), size) == 0

    routed = RoutedTransferEngine(
        _engine("127.0.0.1"),
        wan_engine.new_tcp_engine("127.0.0.1"),
        {"127.0.0.2"}.__contains__,
        EngineCounters(),
    )
    src = ctypes.create_string_buffer(bytes(range(256)) * (size // 256), size)
    src_addr = ctypes.addressof(src)
    assert routed.batch_register_memory([src_addr], [size]) == 0
    md_session = f"127.0.0.2:{md.get_rpc_port()}"
    rld_session = f"127.0.0.1:{rld.get_rpc_port()}"
    half = size // 2
    assert (
        routed.batch_transfer_sync_write(
            md_session,
            [src_addr, src_addr + half],
            [ctypes.addressof(md_buf), ctypes.addressof(md_buf) + half],
            [half, half],
        )
        == 0
    )
    assert (
        routed.batch_transfer_sync_write(
            rld_session, [src_addr], [ctypes.addressof(rld_buf)], [4096]
        )
        == 0
    )
    assert routed.send_probe(md_session) == 0
    assert md_buf.raw == src.raw and rld_buf.raw[:4096] == src.raw[:4096]
    snap = routed.counters.snapshot()
    assert snap["wan"] == {
        "127.0.0.2": {"bytes": size, "writes": 1, "failed_writes": 0, "probes": 1}
    }
    assert snap["local"] == {
        "127.0.0.1": {"bytes": 4096, "writes": 1, "failed_writes": 0, "probes": 0}
    }
    assert routed.batch_unregister_memory([src_addr]) == 0
