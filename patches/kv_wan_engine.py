"""Give a Prefill a second Mooncake engine, forced to TCP, for the KV it sends across the WAN."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target=(
        "sglang.srt.distributed.device_communicators.mooncake_transfer_engine."
        "MooncakeTransferEngine.__init__"
    ),
    hook_type="after",
    why=(
        "SGLang makes one Mooncake engine per process, and Mooncake installs RDMA in it whenever "
        "the host has an HCA (MOONCAKE_PROTOCOL=tcp does not change that, MC_FORCE_TCP=1 at init "
        "does, for the whole engine). A Prefill on an RDMA host must reach Relay-Decode over "
        "RDMA and Main-Decode, across a routed WAN, over TCP: two transports, which one engine "
        "cannot give and the Python binding cannot add (no installTransport)."
    ),
    how=(
        "On a --pdd-role prefill process, after SGLang built and initialized its engine, "
        "replace its .engine by a RoutedTransferEngine (sglang_pdd.transfer.wan_engine): with "
        "--pdd-wan-transport tcp (auto: when the host lists an RDMA device and MC_FORCE_TCP is "
        "not 1) it also holds a second engine initialized with MC_FORCE_TCP=1 set only around "
        "its init; writes and probes to a --pdd-wan-hosts host go through it, the rest through "
        "SGLang's; memory (de)registrations go to both. It counts the bytes per engine and peer "
        "(sglang_pdd:kv_engine_bytes_total on /metrics). Decode servers are left alone."
    ),
    remove_when=(
        "SGLang (or Mooncake's Python binding) can run several transports in one engine and "
        "choose one per destination."
    ),
)


def applies() -> bool:
    return True


def hook(result, self, *args, **kwargs):
    """Route this Prefill's engine: a TCP engine for WAN hosts where wanted, counters always."""
    from sglang_pdd import config as pdd_config
    from sglang_pdd.transfer import wan_engine

    cfg = pdd_config.current()
    if cfg.role == "prefill":
        wan_engine.install(self, self.hostname, cfg.wan_hosts, cfg.wan_transport)
    return result
