"""Prefill's second Mooncake engine: KV bound across the WAN leaves over TCP, the rest over RDMA.

SGLang makes one Mooncake ``TransferEngine`` per process, and the engine installs RDMA whenever
it finds an HCA (``MOONCAKE_PROTOCOL=tcp`` does not change that; only ``MC_FORCE_TCP=1`` at its
init does). Main-Decode in the other datacenter is reached over ordinary routed Ethernet, so a
Prefill on a host with RDMA cards cannot reach it with its one engine. ``RoutedTransferEngine``
stands where SGLang's ``MooncakeTransferEngine`` keeps its engine (``.engine``) and holds two:
the local one SGLang built, and a WAN one initialized with ``MC_FORCE_TCP=1``. Every write and
probe whose destination host is one of ``--pdd-wan-hosts`` goes through the WAN engine, every
other through the local one; memory registrations go to both (each engine keeps its own memory
region map, so the same KV buffers are registered twice). Decode servers keep one engine and
advertise the same session id as before: the WAN engine only initiates writes.

``EngineCounters`` counts the bytes each engine moved to each peer host; they are exported on
Prefill's ``/metrics`` (with ``--enable-metrics``) as ``sglang_pdd:kv_engine_bytes_total`` and
friends, and ``read_engine_bytes`` reads them back (the testbed's report, the e2e test).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("sglang_pdd")

# --pdd-wan-transport: "tcp" a second engine forced to TCP carries WAN-bound writes; "shared"
# one engine carries everything (RoCE across the sites, or every engine already TCP); "auto"
# is "tcp" when the local engine will be RDMA (an HCA and no MC_FORCE_TCP), else "shared".
WAN_TRANSPORTS = ("auto", "tcp", "shared")
LOCAL, WAN = "local", "wan"  # the engines, as the metrics' ``engine`` label names them
INFINIBAND_SYSFS = Path("/sys/class/infiniband")

BYTES_METRIC = "sglang_pdd:kv_engine_bytes_total"
WRITES_METRIC = "sglang_pdd:kv_engine_writes_total"
FAILED_METRIC = "sglang_pdd:kv_engine_failed_writes_total"
PROBES_METRIC = "sglang_pdd:kv_engine_probes_total"


def rdma_devices(root: Path = INFINIBAND_SYSFS) -> list[str]:
    """The RDMA devices this host lists (what Mooncake's topology discovery would find)."""
    try:
        return sorted(p.name for p in root.iterdir())
    except OSError:  # no such folder: no RDMA stack, no device
        return []


def resolve_wan_transport(
    transport: str, env: dict[str, str] | os._Environ, devices: list[str]
) -> str:
    """``tcp`` (a second, TCP engine for the WAN) or ``shared`` (one engine) for
    ``--pdd-wan-transport``: ``auto`` is ``tcp`` exactly when the local engine will be RDMA,
    which Mooncake decides by finding an HCA unless ``MC_FORCE_TCP=1``."""
    if transport not in WAN_TRANSPORTS:
        raise ValueError(
            f"--pdd-wan-transport={transport!r}: accepted values are {', '.join(WAN_TRANSPORTS)}"
        )
    if transport != "auto":
        return transport
    return "tcp" if devices and env.get("MC_FORCE_TCP") != "1" else "shared"


def local_transport(env: dict[str, str] | os._Environ, devices: list[str]) -> str:
    """The transport Mooncake installs in an engine initialized under ``env`` on this host."""
    return "rdma" if devices and env.get("MC_FORCE_TCP") != "1" else "tcp"


@contextlib.contextmanager
def forced_tcp() -> Iterator[None]:
    """``MC_FORCE_TCP=1`` in this process's environment for the duration (Mooncake reads it
    when an engine initializes), then the environment as it was. Runs while the scheduler
    starts, before any transfer thread exists."""
    before = os.environ.get("MC_FORCE_TCP")
    os.environ["MC_FORCE_TCP"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["MC_FORCE_TCP"]
        else:
            os.environ["MC_FORCE_TCP"] = before


def new_tcp_engine(hostname: str):
    """A Mooncake ``TransferEngine`` on ``hostname`` forced to TCP (P2P handshake, as SGLang's)."""
    from mooncake.engine import TransferEngine

    with forced_tcp():
        engine = TransferEngine()
        rc = engine.initialize(hostname, "P2PHANDSHAKE", "tcp", "")
    if rc != 0:
        raise RuntimeError(
            f"sglang-pdd: the WAN Mooncake engine (TCP, --pdd-wan-transport) failed to "
            f"initialize on {hostname} (rc={rc})"
        )
    return engine


@dataclass
class _PeerCounts:
    bytes: int = 0
    writes: int = 0
    failed_writes: int = 0
    probes: int = 0


class EngineCounters:
    """Bytes, writes, failed writes and probes per (engine, peer host); exported to Prometheus
    when ``export`` is on (the counters then live in SGLang's multiprocess metrics dir)."""

    def __init__(self, export: bool = False) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], _PeerCounts] = defaultdict(_PeerCounts)
        self._prom = _prometheus_counters() if export else None

    def wrote(self, engine: str, peer: str, nbytes: int, ok: bool) -> None:
        """One write of ``nbytes`` through ``engine`` to ``peer`` returned (``ok``: it did not
        fail; failed writes count apart, their bytes not at all)."""
        with self._lock:
            c = self._counts[(engine, peer)]
            if ok:
                c.bytes += nbytes
                c.writes += 1
            else:
                c.failed_writes += 1
        if self._prom is not None:
            bytes_c, writes_c, failed_c, _ = self._prom
            if ok:
                bytes_c.labels(engine=engine, peer=peer).inc(nbytes)
                writes_c.labels(engine=engine, peer=peer).inc()
            else:
                failed_c.labels(engine=engine, peer=peer).inc()

    def probed(self, engine: str, peer: str) -> None:
        """One probe (SGLang's check that a blacklisted receiver is back) through ``engine``."""
        with self._lock:
            self._counts[(engine, peer)].probes += 1
        if self._prom is not None:
            self._prom[3].labels(engine=engine, peer=peer).inc()

    def snapshot(self) -> dict[str, dict[str, dict[str, int]]]:
        """{engine: {peer: {"bytes", "writes", "failed_writes", "probes"}}}."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        with self._lock:
            for (engine, peer), c in self._counts.items():
                out.setdefault(engine, {})[peer] = dict(vars(c))
        return out


def _prometheus_counters():
    from prometheus_client import Counter, values

    # prometheus_client picks its value class (in-process or multiprocess files) when it is
    # first imported. A CPU server whose scheduler was forked from a process that imported it
    # before SGLang set PROMETHEUS_MULTIPROC_DIR would keep these counters in memory, where
    # /metrics (served by another process) never sees them; pick again now that it is set.
    if values.ValueClass.__name__ == "MutexValue":
        values.ValueClass = values.get_value_class()

    labels = ("engine", "peer")
    return (
        Counter(BYTES_METRIC, "KV bytes written per Mooncake engine and peer host", labels),
        Counter(WRITES_METRIC, "Mooncake batch writes per engine and peer host", labels),
        Counter(FAILED_METRIC, "failed Mooncake writes per engine and peer host", labels),
        Counter(PROBES_METRIC, "Mooncake probes per engine and peer host", labels),
    )


class RoutedTransferEngine:
    """Two Mooncake engines behind the interface SGLang's ``MooncakeTransferEngine`` calls on
    its ``.engine``: writes and probes to a WAN host through ``wan``, the rest through
    ``local``; registrations on both. With ``wan`` None, everything goes through ``local``
    (still counted, under ``local``).

    Only the methods SGLang's wrapper calls exist here (``tests/transfer/test_wan_engine.py``
    checks the installed SGLang calls no other): a method this class does not route must fail,
    never reach one engine for a peer only the other can reach.
    """

    def __init__(
        self, local, wan, is_wan_host: Callable[[str], bool], counters: EngineCounters
    ) -> None:
        # Imported here: config.py imports this module, and the ledger imports config.
        from sglang_pdd.transfer.ledger import session_host

        self.local, self.wan = local, wan
        self._session_host = session_host
        self._is_wan_host = is_wan_host
        self.counters = counters

    def _route(self, session_id: str):
        """(engine name, engine, peer host) for a write or probe to ``session_id``."""
        host = self._session_host(session_id)
        if self.wan is not None and self._is_wan_host(host):
            return WAN, self.wan, host
        return LOCAL, self.local, host

    def _engines(self) -> list:
        return [self.local] if self.wan is None else [self.local, self.wan]

    # -- memory: mirrored, so either engine can read every registered buffer --

    def register_memory(self, ptr: int, length: int) -> int:
        rc = self.local.register_memory(ptr, length)
        if rc == 0 and self.wan is not None:
            rc = self.wan.register_memory(ptr, length)
            if rc != 0:  # registered in one engine only: undo, so SGLang's failure is whole
                self.local.unregister_memory(ptr)
        return rc

    def unregister_memory(self, ptr: int) -> int:
        rcs = [engine.unregister_memory(ptr) for engine in self._engines()]
        return next((rc for rc in rcs if rc != 0), 0)

    def batch_register_memory(self, ptrs: list[int], lengths: list[int]) -> int:
        rc = self.local.batch_register_memory(ptrs, lengths)
        if rc == 0 and self.wan is not None:
            rc = self.wan.batch_register_memory(ptrs, lengths)
            if rc != 0:
                self.local.batch_unregister_memory(ptrs)
        return rc

    def batch_unregister_memory(self, ptrs: list[int]) -> int:
        rcs = [engine.batch_unregister_memory(ptrs) for engine in self._engines()]
        return next((rc for rc in rcs if rc != 0), 0)

    # -- writes and probes: routed by destination host --

    def transfer_sync_write(self, session_id: str, buffer: int, peer_address: int, length: int):
        name, engine, host = self._route(session_id)
        ok = False
        try:
            ret = engine.transfer_sync_write(session_id, buffer, peer_address, length)
            ok = ret >= 0
            return ret
        finally:
            self.counters.wrote(name, host, length, ok)

    def batch_transfer_sync_write(
        self, session_id: str, buffers: list[int], peer_addresses: list[int], lengths: list[int]
    ):
        name, engine, host = self._route(session_id)
        ok = False
        try:
            ret = engine.batch_transfer_sync_write(session_id, buffers, peer_addresses, lengths)
            ok = ret >= 0
            return ret
        finally:
            self.counters.wrote(name, host, sum(lengths), ok)

    def send_probe(self, session_id: str) -> int:
        name, engine, host = self._route(session_id)
        self.counters.probed(name, host)
        return engine.send_probe(session_id)

    # -- identity: the local engine's (the session id SGLang announces is the local one's) --

    def get_rpc_port(self) -> int:
        return self.local.get_rpc_port()

    def get_engine(self):
        return self.local.get_engine()

    def wan_rpc_port(self) -> int | None:
        """The WAN engine's handshake port (None without one), for the log and the docs."""
        return None if self.wan is None else self.wan.get_rpc_port()


_counters: EngineCounters | None = None


def counters() -> EngineCounters | None:
    """This process's engine counters (None until a Prefill's engine was routed)."""
    return _counters


def install(transfer_engine, hostname: str, wan_hosts: tuple[str, ...], transport: str) -> None:
    """Put a ``RoutedTransferEngine`` into SGLang's ``MooncakeTransferEngine`` ``transfer_engine``
    (already initialized, nothing registered yet): with a TCP engine for ``wan_hosts`` when
    ``transport`` (``--pdd-wan-transport``) resolves to ``tcp``."""
    global _counters
    devices = rdma_devices()
    resolved = resolve_wan_transport(transport, os.environ, devices)
    wan = new_tcp_engine(hostname) if resolved == "tcp" and wan_hosts else None
    hosts = frozenset(wan_hosts)
    # SGLang sets PROMETHEUS_MULTIPROC_DIR in every process of a server with --enable-metrics.
    export = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    _counters = EngineCounters(export=export)
    routed = RoutedTransferEngine(transfer_engine.engine, wan, hosts.__contains__, _counters)
    transfer_engine.engine = routed
    logger.info(
        "sglang-pdd: Mooncake engines: local %s:%d (%s)%s",
        hostname,
        routed.get_rpc_port(),
        local_transport(os.environ, devices),
        f", WAN {hostname}:{routed.wan_rpc_port()} (tcp) for {','.join(sorted(hosts))}"
        if wan is not None
        else f" for every peer (--pdd-wan-transport {transport} -> shared)",
    )


def parse_engine_bytes(metrics_text: str) -> dict[str, dict[str, int]]:
    """{engine: {peer host: bytes}} from a Prefill's ``/metrics`` text
    (``sglang_pdd:kv_engine_bytes_total``)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, int]] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name != BYTES_METRIC:
                continue
            engine, peer = sample.labels["engine"], sample.labels["peer"]
            out.setdefault(engine, {})[peer] = int(sample.value)
    return out


def read_engine_bytes(prefill_url: str, timeout: float = 10.0) -> dict[str, dict[str, int]]:
    """{engine ("local", "wan"): {peer host: KV bytes written}} of the Prefill at
    ``prefill_url`` (started with ``--enable-metrics``), read from its ``/metrics``; empty
    before its first write."""
    with urllib.request.urlopen(f"{prefill_url.rstrip('/')}/metrics", timeout=timeout) as r:
        return parse_engine_bytes(r.read().decode())


@dataclass(frozen=True)
class EngineSplit:
    """Where a Prefill's KV bytes went, by engine: what a run's report shows."""

    wan_engine_bytes: int  # through the WAN engine (to WAN hosts, if routed right)
    local_engine_bytes: int  # through the local engine (to hosts in P's datacenter)
    misrouted_bytes: int  # WAN hosts' bytes on the local engine, or others' on the WAN one


def engine_split(
    per_engine: dict[str, dict[str, int]], wan_hosts: tuple[str, ...] | list[str]
) -> EngineSplit:
    """Summarize ``read_engine_bytes``'s answer for a Prefill whose ``--pdd-wan-hosts`` are
    ``wan_hosts``. With one engine (``--pdd-wan-transport shared``) the WAN hosts' bytes are on
    the local engine by design and count as misrouted: read it with the flag in mind."""
    hosts = set(wan_hosts)
    wan, local = per_engine.get(WAN, {}), per_engine.get(LOCAL, {})
    misrouted = sum(b for h, b in wan.items() if h not in hosts)
    misrouted += sum(b for h, b in local.items() if h in hosts)
    return EngineSplit(sum(wan.values()), sum(local.values()), misrouted)
