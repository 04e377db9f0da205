"""``PddServerConfig``: the sglang-pdd flags of one ``launch_server`` process.

The flags are added to SGLang's own parser (``patches/server_args_cli.py``); the parsed values
become this frozen dataclass, stored on ``ServerArgs`` as ``_pdd`` (underscore attributes ride
along when SGLang pickles ``ServerArgs`` to its subprocesses). ``current()`` returns the config
of the process it is called in.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass
from functools import cached_property

from sglang_pdd.options import field_default, option
from sglang_pdd.transfer.wan_engine import WAN_TRANSPORTS
from sglang_pdd.transfer.wan_link import WanLinkConfig

FLAG_PREFIX = "--pdd-"  # every field of PddServerConfig is a flag --pdd-<field name>

ROLES = ("none", "prefill", "relay", "main")
# Main-Decode's control socket binds loopback unless told otherwise: it is closed by default.
DEFAULT_CONTROL_HOST = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """True for a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


_MODE_FOR_ROLE = {"prefill": "prefill", "relay": "decode", "main": "decode"}


def _host_list(value: str) -> tuple[str, ...]:
    """``--pdd-wan-hosts``: comma-separated, spaces allowed."""
    return tuple(h.strip() for h in value.split(",") if h.strip())


@dataclass(frozen=True)
class PddServerConfig:
    """What this SGLang server is in a PDD cluster and how its WAN side behaves.

    Every field is a ``--pdd-*`` flag of ``launch_server`` (``patches/server_args_cli.py`` adds
    them from this class's metadata): its name, default and help are written here only."""

    role: str = option(
        "none",
        "PDD role of this server: prefill (with --disaggregation-mode prefill), relay or main "
        "(Relay-/Main-Decode, with --disaggregation-mode decode); none: plain SGLang",
        choices=ROLES,
    )
    # Hosts (IP addresses as they appear in Mooncake session ids) that are across the WAN.
    wan_hosts: tuple[str, ...] = option(
        (),
        "Prefill: comma-separated IPs of KV receivers across the WAN (e.g. Main-Decode's "
        "SGLANG_HOST_IP). Sends to them get their own transfer queues (Relay-Decode's never "
        "wait behind them) and cross the emulated link below when one is set",
        type=_host_list,
        metavar="IPS",
    )
    # patches/kv_wan_engine.py, sglang_pdd/transfer/wan_engine.py
    wan_transport: str = option(
        "auto",
        "Prefill: how KV to --pdd-wan-hosts leaves. tcp: through a second Mooncake engine "
        "forced to TCP (MC_FORCE_TCP at its init), while the first (RDMA where the host has an "
        "HCA) carries the rest; shared: through the one engine that carries everything (RoCE "
        "across the sites, or TCP everywhere); auto: tcp when this host lists an RDMA device "
        "and MC_FORCE_TCP is not 1, else shared",
        choices=WAN_TRANSPORTS,
    )
    wan_bandwidth_mbps: float | None = option(
        None, "emulated WAN bandwidth in Mbit/s for KV sent to --pdd-wan-hosts"
    )
    wan_delay_ms: float = option(0.0, "emulated one-way WAN delay in milliseconds")
    wan_jitter_ms: float = option(0.0, "emulated WAN delay jitter (uniform, +/- this many ms)")
    # Prefill only: a file whose content (up, stall, drop) sets the emulated WAN's state for
    # KV writes (transfer/kv_link_faults.py); empty: always up.
    wan_fault_file: str = option(
        "",
        "Prefill, with --pdd-wan-bandwidth-mbps: a file whose content (up, stall, drop) sets "
        "the emulated WAN's state before each KV write to --pdd-wan-hosts, to rehearse a link "
        "failure in the middle of a transfer; no file: up",
    )
    control_port: int = option(
        0, "Main-Decode: TCP port of the handoff control socket the router connects to"
    )
    control_host: str = option(
        DEFAULT_CONTROL_HOST,
        "Main-Decode: address the control socket binds (name the interface the router reaches "
        "it on; 0.0.0.0: every interface). A non-loopback address needs CURVE keys or "
        "--pdd-control-insecure",
    )
    control_insecure: bool = option(
        False,
        "Main-Decode: let the control socket bind a non-loopback --pdd-control-host without "
        "CURVE keys (logged as a warning at start)",
    )
    # SGLang's KV-event publisher's events carry the token ids of every cached prompt.
    kv_events_insecure: bool = option(
        False,
        "let SGLang's KV-event publisher (--kv-events-config) bind a non-loopback address: "
        "its events carry every cached prompt's token ids, unauthenticated. Without it such a "
        "config is refused; bind loopback and tunnel across sites instead",
    )
    # Main-Decode only: CURVE keys of the control socket (main_decode/control_auth.py); both
    # or neither.
    control_curve_secret: str = option(
        "",
        "Main-Decode: this server's CURVE key pair (a NAME.key_secret file from sglang-pdd "
        "control-keys). With --pdd-control-curve-clients, the control socket is encrypted and "
        "only routers whose public key is in that folder can reach it",
    )
    control_curve_clients: str = option(
        "",
        "Main-Decode: folder of the public keys (NAME.key files) of the routers allowed on the "
        "control socket (with --pdd-control-curve-secret)",
    )
    # Prefill only: prefill/ledger_service.py
    ledger_port: int = option(
        0,
        "Prefill: TCP port of the transfer ledger, where every router in front of the cluster "
        "claims the KV blocks it is about to send to a Main-Decode, so that two routers never "
        "send one prefix across the WAN at once (the routers' --transfer-ledger); 0: none",
    )
    ledger_host: str = option(
        DEFAULT_CONTROL_HOST,
        "Prefill: address the transfer ledger binds (the interface the routers reach it on). "
        "Claims carry block hashes, never tokens; a peer on this port can delay a transfer "
        "(up to --pdd-ledger-claim-ttl-s), never change one",
    )
    ledger_claim_ttl_s: float = option(
        120.0,
        "Prefill: a claim its router has not dropped for this long ends by itself (a router "
        "that died holding claims must not make the others wait for good)",
    )
    # patches/seeded_sampling.py
    seeded_sampling: bool = option(
        False,
        "sample with SGLang's seeded sampler (per-position hash of sampling_seed) on this "
        "server without --enable-deterministic-inference, so that a seeded request gives the "
        "same tokens on every instance it passes through; requests without a seed get a "
        "random one. Give it to every instance of a PDD cluster (and to the router as "
        "--seeded-sampling)",
    )
    parked_ttl_s: float = option(
        600.0,
        "Main-Decode: end a relayed request that sees no handoff, release or other control "
        "message for this long (its KV is cached, as for a release), and forget a watch for a "
        "request that never arrives as long",
    )
    log_transfers: bool = option(
        False, "log every KV transfer call (destination and bytes) of this server"
    )
    # patches/cpu_fork_subprocesses.py
    fork_subprocesses: bool = option(
        False,
        "CPU engine only: start SGLang's scheduler and detokenizer processes with fork instead "
        "of spawn, so that they inherit this process's imports (a server starts with about "
        "0.4x the CPU). Refused unless SGLANG_USE_CPU_ENGINE=1 and no CUDA device is present",
    )

    # sglang_pdd/emulation/: an emulated accelerator (patches/emulated_forward.py)
    emulate_chip: str = option(
        "",
        "emulate this accelerator: every forward runs on this host, then waits until the chip "
        "would have finished it (the simulator's step-time model). A or B (the simulator's "
        "built-in chips: B decodes at 2.1x A, prefills at 0.81x) or FILE.yaml:NAME (a chips "
        "file as sglang-pdd sim reads). Also charges KV writes at the emulated model's size "
        "on the emulated links. Empty: no emulation",
        metavar="CHIP",
    )
    emulate_model: str = option(
        "",
        "with --pdd-emulate-chip: a simulator config file whose model: and engine: sections "
        "describe the emulated model (default: the simulator's, 50 KB of KV per token)",
        metavar="FILE",
    )
    emulate_chips: int = option(
        8, "with --pdd-emulate-chip: chips serving this instance (one model replica)"
    )
    token_scale: int = option(
        1,
        "with --pdd-emulate-chip: model tokens one token of this server stands for, in compute "
        "and in KV bytes (run long contexts on a small CPU model)",
    )
    time_dilation: float = option(
        1.0,
        "with --pdd-emulate-chip: multiply every emulated duration (forwards, the emulated "
        "links' serialization and delay) by this; a testbed reports times divided by it",
    )

    @property
    def wan(self) -> WanLinkConfig | None:
        """The emulated WAN link for KV sent to ``wan_hosts`` (None: a real WAN, no emulation)."""
        if self.wan_bandwidth_mbps is None:
            return None
        d = self.time_dilation if self.emulate_chip else 1.0
        return WanLinkConfig(
            bandwidth_mbps=self.wan_bandwidth_mbps / d,
            one_way_delay_ms=self.wan_delay_ms * d,
            jitter_ms=self.wan_jitter_ms * d,
        )

    @cached_property
    def emulation(self):
        """The emulated accelerator (an ``EmulationConfig``), or None without one."""
        if not self.emulate_chip:
            return None
        from sglang_pdd.emulation.config import EmulationConfig, resolve_chip, resolve_model

        model, engine = resolve_model(self.emulate_model)
        return EmulationConfig(
            chip=resolve_chip(self.emulate_chip),
            model=model,
            engine=engine,
            chips=self.emulate_chips,
            token_scale=self.token_scale,
            time_dilation=self.time_dilation,
        )

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"--pdd-role={self.role!r}: accepted values are {', '.join(ROLES)}")
        self._check_wan()
        self._check_emulation()
        self._check_control()
        self._check_ledger()

    def _check_wan(self) -> None:
        """The emulated WAN's flags (testbed only): together, and where they apply."""
        if self.wan_bandwidth_mbps is None:
            for flag, value in (
                ("--pdd-wan-delay-ms", self.wan_delay_ms),
                ("--pdd-wan-jitter-ms", self.wan_jitter_ms),
            ):
                if value:
                    raise ValueError(f"{flag} needs --pdd-wan-bandwidth-mbps (the emulated link)")
        else:
            _ = self.wan  # WanLinkConfig refuses bad values, naming the flag
        if self.wan is not None and not self.wan_hosts:
            raise ValueError(
                "--pdd-wan-bandwidth-mbps needs --pdd-wan-hosts (the receivers the emulated link "
                "applies to)"
            )
        if self.wan_transport not in WAN_TRANSPORTS:
            raise ValueError(
                f"--pdd-wan-transport={self.wan_transport!r}: accepted values are "
                + ", ".join(WAN_TRANSPORTS)
            )
        if self.wan_transport != "auto" and (self.role != "prefill" or not self.wan_hosts):
            raise ValueError(
                f"--pdd-wan-transport {self.wan_transport} is only accepted with --pdd-role "
                "prefill and --pdd-wan-hosts (the receivers whose KV it carries)"
            )
        if self.wan_fault_file and (self.role != "prefill" or self.wan is None):
            raise ValueError(
                "--pdd-wan-fault-file is only accepted with --pdd-role prefill and "
                "--pdd-wan-bandwidth-mbps (the emulated link it cuts)"
            )

    def _check_emulation(self) -> None:
        """The emulated chip's flags: together, and valid (``EmulationConfig`` names them)."""
        if not self.emulate_chip:
            for name in ("emulate_model", "emulate_chips", "token_scale", "time_dilation"):
                if getattr(self, name) != _default(name):
                    flag = FLAG_PREFIX + name.replace("_", "-")
                    raise ValueError(f"{flag} needs --pdd-emulate-chip (the emulated accelerator)")
            return
        _ = self.emulation  # refuses unknown chips, unreadable files and bad scales

    def _check_ledger(self) -> None:
        """The transfer ledger's flags: only on Prefill."""
        if self.ledger_port and not 0 < self.ledger_port < 65536:
            raise ValueError(f"--pdd-ledger-port must be in 1..65535, got {self.ledger_port}")
        if not self.ledger_claim_ttl_s > 0:
            raise ValueError(
                f"--pdd-ledger-claim-ttl-s must be > 0 seconds, got {self.ledger_claim_ttl_s}"
            )
        if self.role == "prefill":
            return
        for flag, value, default in (
            ("--pdd-ledger-port", self.ledger_port, 0),
            ("--pdd-ledger-host", self.ledger_host, DEFAULT_CONTROL_HOST),
            ("--pdd-ledger-claim-ttl-s", self.ledger_claim_ttl_s, _default("ledger_claim_ttl_s")),
        ):
            if value != default:
                raise ValueError(f"{flag} is only accepted with --pdd-role prefill")

    def _check_control(self) -> None:
        """Main-Decode's control socket flags: only on MD, and authenticated off loopback."""
        if self.role == "main" and not 0 < self.control_port < 65536:
            raise ValueError("--pdd-role main needs --pdd-control-port in 1..65535")
        if self.role != "main" and self.control_port:
            raise ValueError("--pdd-control-port is only accepted with --pdd-role main")
        if not self.parked_ttl_s > 0:
            raise ValueError(f"--pdd-parked-ttl-s must be > 0 seconds, got {self.parked_ttl_s}")
        if self.role != "main" and self.parked_ttl_s != _default("parked_ttl_s"):
            raise ValueError("--pdd-parked-ttl-s is only accepted with --pdd-role main")
        if self.role != "main" and self.control_host != DEFAULT_CONTROL_HOST:
            raise ValueError("--pdd-control-host is only accepted with --pdd-role main")
        if self.role != "main" and self.control_insecure:
            raise ValueError("--pdd-control-insecure is only accepted with --pdd-role main")
        curve = (self.control_curve_secret, self.control_curve_clients)
        if any(curve) and self.role != "main":
            raise ValueError(
                "--pdd-control-curve-secret and --pdd-control-curve-clients are "
                "only accepted with --pdd-role main"
            )
        if any(curve) and not all(curve):
            raise ValueError(
                "--pdd-control-curve-secret and --pdd-control-curve-clients go "
                "together: MD's key pair and the routers' public keys"
            )
        if all(curve):
            self.control_curve()  # unreadable keys are refused at start, naming the flag
        if not self.control_host or any(c.isspace() or c in "/:" for c in self.control_host):
            raise ValueError(
                f"--pdd-control-host takes an IPv4 address or host name, got {self.control_host!r}"
            )
        if (
            self.role == "main"
            and not all(curve)
            and not self.control_insecure
            and not is_loopback(self.control_host)
        ):
            raise ValueError(
                f"--pdd-control-host {self.control_host} is not a loopback address: anyone who "
                "reaches it could hand off or release requests. Give the control socket CURVE "
                "keys (--pdd-control-curve-secret and --pdd-control-curve-clients), or pass "
                "--pdd-control-insecure to bind it without authentication"
            )

    def control_curve(self):
        """The control socket's CURVE keys (a ``CurveServer``), or None when not set."""
        if not self.control_curve_secret:
            return None
        from sglang_pdd.main_decode.control_auth import CurveServer

        return CurveServer(self.control_curve_secret, self.control_curve_clients)

    def check_against(self, disaggregation_mode: str, decode_radix_cache: bool) -> None:
        """Refuse combinations with SGLang's own flags that cannot work."""
        if self.role == "none":
            return
        wanted = _MODE_FOR_ROLE[self.role]
        if disaggregation_mode != wanted:
            raise ValueError(
                f"--pdd-role {self.role} needs --disaggregation-mode {wanted} "
                f"(got --disaggregation-mode {disaggregation_mode})"
            )
        if self.role == "main" and not decode_radix_cache:
            raise ValueError(
                "--pdd-role main needs --disaggregation-decode-enable-radix-cache: Main-Decode "
                "receives only the KV its decode-side radix cache lacks"
            )


def _default(name: str):
    """A ``PddServerConfig`` field's default (written once, in the field)."""
    return field_default(next(f for f in dataclasses.fields(PddServerConfig) if f.name == name))


def check_kv_events(kv_events_config: str | None, insecure: bool) -> None:
    """Refuse a ``--kv-events-config`` whose publisher binds a non-loopback address, unless
    ``insecure`` (``--pdd-kv-events-insecure``): SGLang's publisher has no authentication or
    encryption, and its events carry the token ids of every cached prompt. Across sites, bind
    it to loopback and carry it through an encrypted tunnel (docs/faults.md)."""
    if not kv_events_config or insecure:
        return
    from sglang.srt.disaggregation.kv_events import KVEventsConfig

    cfg = KVEventsConfig.from_cli(kv_events_config)
    if cfg.publisher != "zmq":
        return
    for name, endpoint, binds in (
        ("endpoint", cfg.endpoint, cfg.bind),
        ("replay_endpoint", cfg.replay_endpoint, True),  # always bound (a ROUTER)
    ):
        if not endpoint or not endpoint.startswith("tcp://"):
            continue
        host = endpoint[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
        wildcard = host in ("*", "0.0.0.0", "::")
        if binds is None:  # SGLang's heuristic: a wildcard binds, an address connects
            binds = wildcard
        if binds and (wildcard or not is_loopback(host)):
            raise ValueError(
                f"--kv-events-config {name} {endpoint} binds a non-loopback address: anyone "
                "who reaches it reads the token ids of every cached prompt. Bind it to "
                '127.0.0.1 ("bind": true) and carry it across sites through an encrypted '
                "tunnel, or pass --pdd-kv-events-insecure"
            )


def check_main_decode_modes(
    *,
    pp_size: int,
    dp_size: int,
    speculative: str | None,
    page_size: int = 1,
    dp_attention: bool = False,
) -> None:
    """Refuse SGLang server modes a Main-Decode does not serve (yet), naming the flag to change.
    (Tensor parallelism is served: tests/e2e/test_tensor_parallel.py.)

    * PP/DP > 1, DP attention: across pipeline stages or data-parallel groups nothing carries
      the control messages yet.
    * Speculative decoding: the draft model would not have seen the handed-off ids.
    * Page size > 1: the handoff's KV budget rounds to pages, but no test covers it.
    """
    problems = []
    for flag, value in (("--pp-size", pp_size), ("--dp-size", dp_size), ("--page-size", page_size)):
        if value != 1:
            problems.append(f"{flag} {value} (use {flag} 1)")
    if dp_attention:
        problems.append("--enable-dp-attention (leave it off)")
    if speculative:
        problems.append(f"--speculative-algorithm {speculative} (leave it unset)")
    if problems:
        raise ValueError("--pdd-role main does not support " + "; ".join(problems))


_current = PddServerConfig()


def current() -> PddServerConfig:
    """The config of this process (the default, role ``none``, until a server sets one)."""
    return _current


def attached_config(server_args) -> PddServerConfig:
    """The config the ``--pdd-*`` flags attached to ``server_args`` (as ``_pdd``), or the
    default (role ``none``) for a ``ServerArgs`` built without our parser (``Engine()``)."""
    try:
        return server_args._pdd
    except AttributeError:  # ours: patches/server_args_from_cli.py attaches it
        return PddServerConfig()


def set_current(config: PddServerConfig) -> None:
    """Install ``config`` as this process's config (done when the scheduler starts)."""
    global _current
    _current = config
