"""``PddCluster``: a local PDD cluster (P, RLD, MD, WAN links, router) on one machine.

Datacenter A is 127.0.0.1 (Prefill, Relay-Decode, router); datacenter B is 127.0.0.2
(Main-Decode's Mooncake endpoint). KV that Prefill sends to B is paced by Prefill's emulated WAN
(``--pdd-wan-*``); the router's HTTP and control traffic to Main-Decode crosses ``sglang-pdd
wan-link`` proxies with the same bandwidth and delay.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from sglang_pdd.policy import HANDOFF_RETRY_S
from sglang_pdd.testbed.emulated_chips import ChipEmulation
from sglang_pdd.testbed.launcher import ServerGroup, ServerProcess, ServerSpec
from sglang_pdd.testbed.ports import free_port
from sglang_pdd.transfer.wan_link import WanLinkConfig

DATACENTER_B_HOST = "127.0.0.2"


@dataclass(frozen=True)
class PddClusterConfig:
    """Shape of the local cluster; every field maps onto an example/benchmark flag."""

    model_path: str
    dtype: str = "float32"
    wan: WanLinkConfig = WanLinkConfig(bandwidth_mbps=8.0, one_way_delay_ms=100.0)
    handoff_mode: str = "one-shot"
    handoff_switch: str = "hold"  # the router's --handoff-switch (its default)
    catchup_threshold: int = 64
    catchup_chunk: int = 64
    ttft_slo_s: float | None = 0.0  # 0: every request goes P-RLD-MD; None: the router's default
    chunked_prefill_size: int = 512
    max_total_tokens: int = 65536
    log_transfers: bool = True
    mains: int = 1  # Main-Decode servers in datacenter B
    kv_events: bool = True  # MDs publish SGLang KV events; the router's cache view follows them
    # Cores of datacenter A (P, RLD) and datacenter B (MDs), e.g. ("0", "1"); empty: unpinned.
    datacenter_cpus: tuple[str, str] = ("", "")
    # Decode servers (RLD, MDs) and the router stream only new ids and text
    # (--incremental-streaming-output): a stream across the WAN then grows linearly with the
    # output, not quadratically, and clients parse only what is new.
    incremental_streams: bool = False
    # Every server samples with SGLang's seeded sampler (--pdd-seeded-sampling) and the router
    # accepts seeded requests with temperature > 0.
    seeded_sampling: bool = False
    # The router parses OpenAI tool calls with this SGLang parser (its --tool-call-parser).
    tool_call_parser: str | None = None
    # ... and separates reasoning with this one (its --reasoning-parser).
    reasoning_parser: str | None = None
    # Emulated accelerators (chip A in datacenter A, chip B in B); None: the CPU as it is.
    emulation: ChipEmulation | None = None
    # P sends datacenter B's KV through its second Mooncake engine (--pdd-wan-transport tcp)
    # and exports its bytes per engine on /metrics (--enable-metrics).
    wan_engine: bool = False

    @property
    def proxy_wan(self) -> WanLinkConfig:
        """The link of the WAN proxies (HTTP, control, KV events): ``wan`` stretched by the
        emulation's time dilation, as P stretches its own emulated WAN for KV."""
        d = self.emulation.time_dilation if self.emulation else 1.0
        w = self.wan
        return WanLinkConfig(w.bandwidth_mbps / d, w.one_way_delay_ms * d, w.jitter_ms * d, w.seed)

    def chip_args(self, datacenter: str) -> tuple[str, ...]:
        """The emulated-chip flags of a server in ``datacenter`` ("A" or "B"), if any."""
        return self.emulation.server_args(datacenter) if self.emulation else ()

    def __post_init__(self) -> None:
        if self.mains < 1:
            raise ValueError(f"mains must be >= 1, got {self.mains}")


@dataclass(frozen=True)
class MainDecodeSite:
    """One Main-Decode and how datacenter A reaches it (through the emulated WAN)."""

    server: ServerProcess
    http_via_wan: str
    control_via_wan: str
    kv_events_via_wan: str | None
    control_port: int = 0  # Main-Decode's own control port (in datacenter B)


@dataclass
class PddCluster:
    """Started servers and URLs of one local PDD cluster."""

    config: PddClusterConfig
    prefill: ServerProcess
    relay: ServerProcess
    mains: list[MainDecodeSite]
    router: ServerProcess | None = None
    ledger_port: int | None = None  # P's transfer ledger, shared by every router started here

    @property
    def router_url(self) -> str:
        return self.router.url

    @property
    def main(self) -> ServerProcess:
        return self.mains[0].server

    @property
    def main_via_wan(self) -> str:  # Main-Decode's HTTP as seen from datacenter A
        return self.mains[0].http_via_wan

    @property
    def control_via_wan(self) -> str:  # Main-Decode's control socket as seen from datacenter A
        return self.mains[0].control_via_wan


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sglang_pdd.cli", *args]


def _main_decode_args(cfg: PddClusterConfig, control_port: int, events_port: int) -> tuple:
    """A Main-Decode's sglang-pdd and SGLang flags in this cluster (its cluster's MDs and any
    added later alike)."""
    extra = (
        "--pdd-role",
        "main",
        "--pdd-control-port",
        str(control_port),
        "--pdd-control-host",
        "127.0.0.1",  # reached through the WAN proxies
        "--disaggregation-decode-enable-radix-cache",
    )
    if cfg.incremental_streams:
        extra += ("--incremental-streaming-output",)
    if cfg.seeded_sampling:
        extra += ("--pdd-seeded-sampling",)
    if cfg.kv_events:
        extra += ("--kv-events-config", kv_events_config(events_port))
    return extra + cfg.chip_args("B")


def _main_specs(cfg: PddClusterConfig, common: dict):
    """Each MD's ServerSpec (datacenter B) and its (control, KV-events) ports."""
    specs, ports = [], []
    cpus_b = cfg.datacenter_cpus[1]
    for i in range(cfg.mains):
        control_port, events_port = free_port(), free_port()
        extra = _main_decode_args(cfg, control_port, events_port)
        specs.append(
            ServerSpec(
                f"main{i}" if i else "main",
                role="decode",
                env=(("SGLANG_HOST_IP", DATACENTER_B_HOST),),
                extra_args=extra,
                cpus=cpus_b,
                **common,
            )
        )
        ports.append((control_port, events_port))
    return specs, ports


def _main_site(group, cfg: PddClusterConfig, i: int, main, control_port: int, events_port: int):
    """MD ``i`` of the cluster behind its WAN proxies ("wan-http" for MD 0, "wan-http1"...)."""
    events = events_port if cfg.kv_events else None
    return _site(group, main, str(i) if i else "", control_port, events, cfg.proxy_wan)


def start_cluster(group: ServerGroup, cfg: PddClusterConfig, timeout: float = 600) -> PddCluster:
    """Launch the cluster's processes in ``group`` and wait until the router is healthy."""
    common = dict(
        model_path=cfg.model_path,
        dtype=cfg.dtype,
        chunked_prefill_size=cfg.chunked_prefill_size,
        max_total_tokens=cfg.max_total_tokens,
    )
    cpus_a = cfg.datacenter_cpus[0]
    streams = ("--incremental-streaming-output",) if cfg.incremental_streams else ()
    streams += ("--pdd-seeded-sampling",) if cfg.seeded_sampling else ()
    wan = (
        "--pdd-wan-bandwidth-mbps",
        str(cfg.wan.bandwidth_mbps),
        "--pdd-wan-delay-ms",
        str(cfg.wan.one_way_delay_ms),
        "--pdd-wan-jitter-ms",
        str(cfg.wan.jitter_ms),
    )
    prefill_args = ("--pdd-role", "prefill", "--pdd-wan-hosts", DATACENTER_B_HOST, *wan)
    prefill_args += cfg.chip_args("A")
    if cfg.wan_engine:
        prefill_args += ("--pdd-wan-transport", "tcp", "--enable-metrics")
    if cfg.seeded_sampling:
        prefill_args += ("--pdd-seeded-sampling",)
    if cfg.log_transfers:
        prefill_args += ("--pdd-log-transfers",)
    ledger_port = free_port()
    prefill_args += ("--pdd-ledger-port", str(ledger_port))
    specs, ports = _main_specs(cfg, common)
    prefill, relay, *mains = group.start(
        ServerSpec("prefill", role="prefill", extra_args=prefill_args, cpus=cpus_a, **common),
        ServerSpec(
            "relay",
            role="decode",
            extra_args=("--pdd-role", "relay", *streams, *cfg.chip_args("A")),
            cpus=cpus_a,
            **common,
        ),
        *specs,
        timeout=timeout,
    )
    sites = [
        _main_site(group, cfg, i, main, control_port, events_port)
        for i, (main, (control_port, events_port)) in enumerate(zip(mains, ports, strict=True))
    ]
    cluster = PddCluster(cfg, prefill, relay, sites, ledger_port=ledger_port)
    cluster.router = start_router(group, cluster, shared_ledger=True)
    return cluster


def kv_events_config(port: int) -> str:
    """``--kv-events-config`` for a server publishing SGLang KV events on ``port`` (loopback)."""
    return json.dumps(
        {
            "publisher": "zmq",
            "endpoint": f"tcp://127.0.0.1:{port}",
            "bind": True,
            "topic": "kv-events",
        }
    )


def start_wan_proxy(group: ServerGroup, name: str, target_port: int, link: WanLinkConfig) -> str:
    """Start a ``sglang-pdd wan-link`` proxy to ``127.0.0.1:target_port``; return its URL."""
    return start_link_proxy(group, name, target_port, link).url


def start_link_proxy(
    group: ServerGroup, name: str, target_port: int, link: WanLinkConfig
) -> ServerProcess:
    """Start a ``sglang-pdd wan-link`` proxy to ``127.0.0.1:target_port``; return its process
    (``.url``; ``.pause()`` freezes the proxy, ``.resume()`` lets it go on; ``.link(op)``
    stalls, drops, resets or restores the link through its command API)."""
    port, control = free_port(), free_port()
    proxy = group.launch_command(
        name,
        _cli(
            "wan-link",
            "--listen",
            f"127.0.0.1:{port}",
            "--target",
            f"127.0.0.1:{target_port}",
            "--bandwidth-mbps",
            str(link.bandwidth_mbps),
            "--delay-ms",
            str(link.one_way_delay_ms),
            "--jitter-ms",
            str(link.jitter_ms),
            "--control",
            f"127.0.0.1:{control}",
        ),
        port,
    )
    proxy.control_url = f"http://127.0.0.1:{control}"
    group.wait_ready(proxy, timeout=60, path=None)  # the command API is up before the proxy
    return proxy


@dataclass(frozen=True)
class LaunchedMainDecode:
    """A Main-Decode launched by ``launch_main_decode``, still starting: ``ready()`` waits for
    it and puts its WAN proxies in front of it."""

    group: ServerGroup
    server: ServerProcess
    control_port: int
    events_port: int | None
    wan: WanLinkConfig

    @property
    def names(self) -> tuple[str, ...]:
        """Every process name it has or will have in its group (for ``stop_named``)."""
        tag = self.server.name
        proxies = ("http", "control") + (("kv-events",) if self.events_port else ())
        return (self.server.name, *(f"wan-{kind}-{tag}" for kind in proxies))

    def ready(self, timeout: float = 300.0) -> MainDecodeSite:
        self.group.wait_ready(self.server, timeout)
        return _site(
            self.group,
            self.server,
            f"-{self.server.name}",
            self.control_port,
            self.events_port,
            self.wan,
        )


def add_main_decode(
    group: ServerGroup, cluster: PddCluster, name: str, **options
) -> MainDecodeSite:
    """Start one more Main-Decode in datacenter B (behind its own WAN proxies), not yet known to
    any router: pass ``mains=`` to ``start_router``. ``options`` are ``launch_main_decode``'s."""
    return launch_main_decode(group, cluster, name, **options).ready()


def launch_main_decode(
    group: ServerGroup,
    cluster: PddCluster,
    name: str,
    max_total_tokens: int | None = None,
    env: dict[str, str] | None = None,
    tp_size: int = 1,
    overlap_schedule: bool = False,
    extra_args: tuple[str, ...] = (),
) -> LaunchedMainDecode:
    """Launch one more Main-Decode in datacenter B without waiting (``.ready()`` waits and puts
    its WAN proxies in front). ``max_total_tokens`` sizes its KV pool (default: the cluster's);
    ``env`` adds environment variables (SGLang's ``SGLANG_*`` knobs); ``tp_size`` > 1 runs it
    tensor-parallel (on the CPU each rank gets its share of the datacenter's cores);
    ``overlap_schedule`` runs SGLang's overlap scheduler on it; ``extra_args`` go to its
    command line."""
    cfg = cluster.config
    control_port, events_port = free_port(), free_port()
    extra = _main_decode_args(cfg, control_port, events_port) + tuple(extra_args)
    env = dict(env or {})
    if tp_size > 1:  # a Main-Decode accepts it only when told the handoff is unverified
        extra += ("--tp-size", str(tp_size))
        env.setdefault(
            "SGLANG_CPU_OMP_THREADS_BIND", cpu_rank_binding(cfg.datacenter_cpus[1], tp_size)
        )
    server = group.launch(
        ServerSpec(
            name,
            role="decode",
            model_path=cfg.model_path,
            dtype=cfg.dtype,
            chunked_prefill_size=cfg.chunked_prefill_size,
            max_total_tokens=max_total_tokens or cfg.max_total_tokens,
            env=(("SGLANG_HOST_IP", DATACENTER_B_HOST), *env.items()),
            extra_args=extra,
            cpus=cfg.datacenter_cpus[1],
            overlap_schedule=overlap_schedule,
        )
    )
    events = events_port if cfg.kv_events else None
    return LaunchedMainDecode(group, server, control_port, events, cfg.proxy_wan)


def cpu_rank_binding(cpus: str, ranks: int) -> str:
    """SGLang's ``SGLANG_CPU_OMP_THREADS_BIND`` for ``ranks`` ranks on the cores ``cpus`` names
    (a taskset list; empty: every core this process may use): consecutive equal shares, or
    every rank on all of them when there are fewer cores than ranks."""
    import os

    if cpus:
        cores = []
        for part in cpus.split(","):
            lo, _, hi = part.partition("-")
            cores += range(int(lo), int(hi or lo) + 1)
    else:
        cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // ranks
    groups = (
        [cores] * ranks
        if share == 0
        else [cores[i * share : (i + 1) * share] for i in range(ranks)]
    )
    return "|".join(",".join(map(str, group)) for group in groups)


def _site(group, server, suffix, control_port, events_port, wan) -> MainDecodeSite:
    """``server`` as the router reaches it: its HTTP, control and (with ``events_port``)
    KV-event ports behind WAN proxies named "wan-http{suffix}" and so on."""
    http_url = start_wan_proxy(group, f"wan-http{suffix}", server.port, wan)
    control_url = start_wan_proxy(group, f"wan-control{suffix}", control_port, wan)
    events_url = (
        start_wan_proxy(group, f"wan-kv-events{suffix}", events_port, wan) if events_port else None
    )
    return MainDecodeSite(
        server,
        http_url,
        control_url.replace("http://", "tcp://"),
        events_url and events_url.replace("http://", "tcp://"),
        control_port,
    )


def start_router(
    group: ServerGroup,
    cluster: PddCluster,
    name: str = "router",
    relay_url: str | None = None,
    mains: list[MainDecodeSite] | None = None,
    relays: list[str] | None = None,
    shared_ledger: bool = False,
    **overrides,
) -> ServerProcess:
    """Start a(nother) router in front of ``cluster``; ``overrides`` replace config fields
    (``handoff_mode``, ``catchup_threshold``, ``catchup_chunk``, ``ttft_slo_s``,
    ``upstream_keepalive_s``, ``auto_relay_busy_fraction``, ``upstream_idle_timeout_s``,
    ``seeded_sampling``, ``tool_call_parser``, ``reasoning_parser``, ``tokenizer_path``,
    ``api_key``, ``admin_api_key``,
    ``handoff_retry_s``, ``migration_limit``,
    ``control_curve`` (a (secret file, MD public key file) pair),
    ``control_timeout_s``, ``handoff_gap_prior_s``, ``tail_on_relay``, ``handoff_switch``,
    ``instance_check_interval_s``, ``prefill_backlog_limit_s``, ``prefill_backlog_window_s``
    (None: the router's default)), and
    ``relay_url`` reaches Relay-Decode another way (e.g. through a slow proxy), ``relays`` lists
    several Relay-Decodes instead, ``mains`` replaces the Main-Decodes it routes to.
    ``shared_ledger``: claim transfers on P's transfer ledger, as the cluster's own router
    does (the routers that share it never send one prefix twice at once). Off for the tests'
    other routers: a test that stalls a router's MD link on purpose keeps its claims open, and
    another test's router sending the same prompt would wait for them."""
    cfg = cluster.config
    opts = router_options(cfg)
    if unknown := set(overrides) - set(opts):
        raise ValueError(
            f"start_router: unknown overrides {sorted(unknown)}; "
            f"accepted: {', '.join(sorted(opts))}"
        )
    opts.update(overrides)
    port = free_port()
    # The instances, the WAN and the listen address come from a topology file, as in a real
    # deployment (so every e2e test runs the file format); the other flags follow it.
    topology = write_topology(
        group.log_dir / f"{name}-topology.yaml",
        cluster,
        relays or [relay_url or cluster.relay.url],
        mains or cluster.mains,
        port,
        ledger=shared_ledger,
    )
    router = group.launch_command(
        name,
        _cli("router", "--topology", str(topology), *router_flags(opts)),
        port,
        # The router runs in datacenter A (as deployed, beside P and RLD): on datacenter B's
        # cores its per-token work would slow Main-Decode, which no real deployment does.
        cpus=cfg.datacenter_cpus[0],
    )
    # /get_model_info answers once the router has connected to every instance; its /health
    # would also probe them, which a deliberately slow link can push past the probe's timeout.
    group.wait_ready(router, timeout=120, path="/get_model_info", api_key=opts["api_key"])
    return router


def router_options(cfg: PddClusterConfig) -> dict:
    """The options ``start_router`` passes a router on a cluster built from ``cfg`` (what its
    ``overrides`` may replace; None: the router's own default)."""
    return {
        "handoff_mode": cfg.handoff_mode,
        "handoff_switch": cfg.handoff_switch,
        "catchup_threshold": cfg.catchup_threshold,
        "catchup_chunk": cfg.catchup_chunk,
        "ttft_slo_s": cfg.ttft_slo_s,
        "upstream_keepalive_s": 2.0,
        "auto_relay_busy_fraction": 0.8,
        "main_transfer_start": "with-prefill",
        "incremental_streaming_output": cfg.incremental_streams,
        "upstream_idle_timeout_s": 600.0,
        "seeded_sampling": cfg.seeded_sampling,
        "tool_call_parser": cfg.tool_call_parser,
        "reasoning_parser": cfg.reasoning_parser,
        # Another directory of the same checkpoint and vocabulary (a chat-template variant).
        "tokenizer_path": None,
        "api_key": None,
        "admin_api_key": None,
        "handoff_retry_s": HANDOFF_RETRY_S,
        "handoff_gap_prior_s": None,
        "tail_on_relay": True,
        "migration_limit": 2,
        "control_curve": None,
        # Tests stall control links on purpose (SIGSTOP on a proxy) for as long as they
        # need: a short control timeout would turn that into a dropped connection.
        "control_timeout_s": 600.0,
        "instance_check_interval_s": None,
        "prefill_backlog_limit_s": None,
        "prefill_backlog_window_s": None,
        # The policy weighs transfers in the bytes the links are charged: the emulated model's.
        "kv_bytes_per_token": cfg.emulation.kv_bytes_per_token() if cfg.emulation else None,
    }


def router_flags(opts: dict) -> list[str]:
    """``start_router``'s options as router flags: each key is its flag's name (``a_b`` ->
    ``--a-b``); None leaves the router's default; True is a bare switch and False omits it,
    except ``tail_on_relay`` (on by default, ``--no-tail-on-relay``); ``control_curve`` is a
    (secret file, MD public key file) pair."""
    out: list[str] = []
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if key == "tail_on_relay":
            out += [] if value else ["--no-tail-on-relay"]
        elif key == "control_curve":
            if value:
                secret, server_key = value
                out += ["--control-curve-secret", str(secret)]
                out += ["--control-curve-server", str(server_key)]
        elif isinstance(value, bool):
            out += [flag] if value else []
        elif value is not None and value != "":
            out += [flag, str(value)]
    return out


def write_topology(
    path: Path,
    cluster: PddCluster,
    relay_urls: list[str],
    mains: list[MainDecodeSite],
    port: int,
    ledger: bool = False,
) -> Path:
    """A topology file (``sglang_pdd/topology/schema.py``) for a router on ``cluster``: P and
    the Relay-Decodes at ``relay_urls`` in datacenter A, ``mains`` in B, each reached as the
    router reaches it (through the emulated WAN, a gate), checked as a router would check it."""
    from sglang_pdd.topology.schema import parse_topology

    def where(url: str) -> dict:
        parts = urlsplit(url)
        return {"host": parts.hostname, "port": parts.port, "url": url}

    cfg = cluster.config
    # Emulated chips: P and each Relay-Decode are instances of their own (chips listed apart,
    # so the router does not take RLD for a sharer of P's compute). The CPU they share is the
    # instrument's, counted as overruns. Without emulation they share the same cores.
    chips = (lambda i: {"chips": [i]}) if cfg.emulation else (lambda i: {})
    site_a = [{"name": "prefill", "role": "prefill", **where(cluster.prefill.url), **chips(0)}]
    if ledger and cluster.ledger_port is not None:
        site_a[0]["ledger_port"] = cluster.ledger_port
    site_a += [
        {"name": f"relay-{i}", "role": "relay", **where(url), **chips(i + 1)}
        for i, url in enumerate(relay_urls)
    ]
    site_b = []
    for i, site in enumerate(mains):
        main = {
            "name": f"main-{i}",
            "role": "main",
            "host": DATACENTER_B_HOST,
            "port": site.server.port,
            "url": site.http_via_wan,
            "control_port": urlsplit(site.control_via_wan).port,
            "control_url": site.control_via_wan,
        }
        if site.kv_events_via_wan:
            main["kv_events_port"] = urlsplit(site.kv_events_via_wan).port
            main["kv_events_url"] = site.kv_events_via_wan
        site_b.append(main)
    doc = {
        "model_path": cfg.model_path,
        "wan": {
            "bandwidth_mbps": cfg.proxy_wan.bandwidth_mbps,
            "rtt_ms": 2 * cfg.proxy_wan.one_way_delay_ms,
        },
        "router": {"site": "A", "host": "127.0.0.1", "port": port},
        "sites": {"A": {"instances": site_a}, "B": {"instances": site_b}},
    }
    parse_topology(doc)  # a mistake here is the testbed's, named before any router starts
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
