"""``PddCluster``: a local PDD cluster (P, RLD, MD, WAN links, router) on one machine.

Datacenter A is 127.0.0.1 (Prefill, Relay-Decode, router); datacenter B is 127.0.0.2
(Main-Decode's Mooncake endpoint). KV that Prefill sends to B is paced by Prefill's emulated WAN
(``--pdd-wan-*``); the router's HTTP and control traffic to Main-Decode crosses ``sglang-pdd
wan-link`` proxies with the same bandwidth and delay.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

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
    catchup_threshold: int = 64
    catchup_chunk: int = 64
    relay_threshold_s: float = 0.0  # 0: every request goes P-RLD-MD
    chunked_prefill_size: int = 512
    max_total_tokens: int = 65536
    log_transfers: bool = True


@dataclass
class PddCluster:
    """Started servers and URLs of one local PDD cluster."""

    config: PddClusterConfig
    prefill: ServerProcess
    relay: ServerProcess
    main: ServerProcess
    main_via_wan: str  # Main-Decode's HTTP as seen from datacenter A
    control_via_wan: str  # Main-Decode's control socket as seen from datacenter A
    router: ServerProcess | None = None

    @property
    def router_url(self) -> str:
        return self.router.url


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sglang_pdd.cli", *args]


def start_cluster(group: ServerGroup, cfg: PddClusterConfig, timeout: float = 600) -> PddCluster:
    """Launch the cluster's processes in ``group`` and wait until the router is healthy."""
    common = dict(model_path=cfg.model_path, dtype=cfg.dtype,
                  chunked_prefill_size=cfg.chunked_prefill_size,
                  max_total_tokens=cfg.max_total_tokens)  # fmt: skip
    wan = ("--pdd-wan-bandwidth-mbps", str(cfg.wan.bandwidth_mbps),
           "--pdd-wan-delay-ms", str(cfg.wan.one_way_delay_ms),
           "--pdd-wan-jitter-ms", str(cfg.wan.jitter_ms))  # fmt: skip
    control_port = free_port()
    prefill_args = ("--pdd-role", "prefill", "--pdd-wan-hosts", DATACENTER_B_HOST, *wan)
    if cfg.log_transfers:
        prefill_args += ("--pdd-log-transfers",)
    prefill, relay, main = group.start(
        ServerSpec("prefill", role="prefill", extra_args=prefill_args, **common),
        ServerSpec("relay", role="decode", extra_args=("--pdd-role", "relay"), **common),
        ServerSpec("main", role="decode", env=(("SGLANG_HOST_IP", DATACENTER_B_HOST),),
                   extra_args=("--pdd-role", "main", "--pdd-control-port", str(control_port),
                               "--disaggregation-decode-enable-radix-cache"), **common),
        timeout=timeout,
    )  # fmt: skip
    http_url = start_wan_proxy(group, "wan-http", main.port, cfg.wan)
    control_url = start_wan_proxy(group, "wan-control", control_port, cfg.wan)
    cluster = PddCluster(cfg, prefill, relay, main, http_url,
                         control_url.replace("http://", "tcp://"))  # fmt: skip
    cluster.router = start_router(group, cluster)
    return cluster


def start_wan_proxy(group: ServerGroup, name: str, target_port: int, link: WanLinkConfig) -> str:
    """Start a ``sglang-pdd wan-link`` proxy to ``127.0.0.1:target_port``; return its URL."""
    port = free_port()
    proxy = group.launch_command(name, _cli(
        "wan-link", "--listen", f"127.0.0.1:{port}", "--target", f"127.0.0.1:{target_port}",
        "--bandwidth-mbps", str(link.bandwidth_mbps), "--delay-ms", str(link.one_way_delay_ms),
        "--jitter-ms", str(link.jitter_ms)), port)  # fmt: skip
    group.wait_ready(proxy, timeout=60, path=None)
    return f"http://127.0.0.1:{port}"


def start_router(group: ServerGroup, cluster: PddCluster, name: str = "router",
                 relay_url: str | None = None, **overrides) -> ServerProcess:  # fmt: skip
    """Start a(nother) router in front of ``cluster``; ``overrides`` replace config fields
    (``handoff_mode``, ``catchup_threshold``, ``catchup_chunk``, ``relay_threshold_s``,
    ``upstream_keepalive_s``, ``auto_relay_busy_fraction``), and
    ``relay_url`` reaches Relay-Decode another way (e.g. through a slow proxy)."""
    cfg = cluster.config
    opts = {"handoff_mode": cfg.handoff_mode, "catchup_threshold": cfg.catchup_threshold,
            "catchup_chunk": cfg.catchup_chunk, "relay_threshold_s": cfg.relay_threshold_s,
            "upstream_keepalive_s": 2.0, "auto_relay_busy_fraction": 0.8,
            **overrides}  # fmt: skip
    port = free_port()
    router = group.launch_command(name, _cli(
        "router", "--prefill", cluster.prefill.url, "--relay", relay_url or cluster.relay.url,
        "--main", cluster.main_via_wan, "--main-control", cluster.control_via_wan,
        "--port", str(port), "--handoff-mode", opts["handoff_mode"],
        "--catchup-threshold", str(opts["catchup_threshold"]),
        "--catchup-chunk", str(opts["catchup_chunk"]),
        "--relay-threshold-s", str(opts["relay_threshold_s"]),
        "--upstream-keepalive-s", str(opts["upstream_keepalive_s"]),
        "--auto-relay-busy-fraction", str(opts["auto_relay_busy_fraction"]),
        "--wan-bandwidth-mbps", str(cfg.wan.bandwidth_mbps),
        "--wan-rtt-ms", str(2 * cfg.wan.one_way_delay_ms)), port)  # fmt: skip
    # /get_model_info answers once the router has connected to every instance; its /health
    # would also probe them, which a deliberately slow link can push past the probe's timeout.
    group.wait_ready(router, timeout=120, path="/get_model_info")
    return router
