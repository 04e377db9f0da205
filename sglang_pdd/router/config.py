"""``RouterConfig``: what ``sglang-pdd router`` was told on its command line."""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig

MAIN_TRANSFER_STARTS = ("with-prefill", "after-relay")


@dataclass(frozen=True)
class MainEndpoint:
    """A Main-Decode server: its HTTP URL and its handoff control socket (ZeroMQ)."""

    url: str
    control: str  # tcp://host:port
    kv_events: str | None = None  # tcp://host:port of its KV event publisher, if it has one


@dataclass(frozen=True)
class RouterConfig:
    """Instances behind the router and the policies it applies."""

    prefill: tuple[str, ...]
    relay: tuple[str, ...]
    main: tuple[MainEndpoint, ...]
    host: str = "127.0.0.1"
    port: int = 8000
    pipeline: PipelinePolicyConfig = field(default_factory=PipelinePolicyConfig)
    handoff: HandoffPolicyConfig = field(default_factory=HandoffPolicyConfig)
    # What the router assumes of the WAN when it estimates MD's readiness for the policy.
    wan_bandwidth_mbps: float = 100.0
    wan_rtt_ms: float = 40.0
    # Block size of the router's mirror of Main-Decode's radix cache.
    cache_block_tokens: int = 16
    cache_capacity_blocks: int = 1 << 16
    tokenizer_path: str | None = None
    # How long an idle upstream connection may be reused. SGLang's servers close idle
    # connections after SGLANG_TIMEOUT_KEEP_ALIVE (5 s); a request sent on one the server is
    # closing fails, and over a WAN that window widens by the RTT. 0: a new connection each time.
    upstream_keepalive_s: float = 2.0
    # Connecting to an instance, and a decoding instance's stream going silent, are bounded:
    # past these the request ends with a 502/504 naming the instance (and is aborted
    # everywhere). A Main-Decode stream parked before the handoff is silent by design: its idle
    # clock starts at the final handoff.
    upstream_connect_timeout_s: float = 10.0
    upstream_idle_timeout_s: float = 600.0
    # A final handoff Main-Decode defers (no KV room now) is made again this long after, with
    # the ids Relay-Decode streamed meanwhile (RLD keeps serving until MD takes one).
    handoff_retry_s: float = 0.5
    # What a final handoff is assumed to cost the client (the final handoff sent to MD's first
    # id back: an RTT, the extend, one of MD's steps) until the router has measured one; then
    # the measurements' moving average. A relayed request whose remaining ids RLD makes sooner
    # finishes on RLD (MD's cache is still warmed). None: the WAN RTT (--wan-rtt-ms).
    handoff_gap_prior_s: float | None = None
    # The rule above (False: every relayed request is handed off once MD is ready).
    tail_on_relay: bool = True
    # Each Main-Decode control connection: one silent this long is dropped and redialed (the
    # router then watches its requests again), and a message that cannot be sent this long
    # fails (the request stays on Relay-Decode, or migrates).
    control_timeout_s: float = 5.0
    # Each decoding instance in rotation is asked for /ready this often; one answering 503
    # (SGLang's graceful shutdown after SIGTERM, or paused) is drained until it answers 200.
    # 0: never asked.
    instance_check_interval_s: float = 2.0
    # How many times one request may continue on other instances after the one serving it
    # failed or went silent (greedy requests only; router/migration.py). 0: never.
    migration_limit: int = 2
    # What one client request may ask for: samples (n), prompts in a batch, body size (MiB).
    max_n: int = 64
    max_batch_size: int = 256
    max_body_mb: float = 64.0
    # Clients must send "Authorization: Bearer <api_key>" (as to sglang.launch_server --api-key).
    api_key: str | None = None
    # Sent to every instance as "Authorization: Bearer <key>" (instances started with --api-key).
    instance_api_key: str | None = None
    # P-RLD-MD: when Main-Decode's copy of the KV is requested from P. "with-prefill": at once,
    # beside Relay-Decode's (P holds it until the prefill ends; MD's KV leaves when it does);
    # "after-relay": once P answered Relay-Decode's request (the earlier behaviour, for
    # comparison and for prefill servers without sglang-pdd's hold hook).
    main_transfer_start: str = "with-prefill"
    # /generate streams carry only new ids and text per chunk (SGLang's flag of the same name).
    incremental_streaming_output: bool = False
    # Every instance runs --pdd-seeded-sampling: a seeded request with temperature > 0 draws
    # the same tokens on each, so the router accepts it (else it refuses sampling_seed).
    seeded_sampling: bool = False
    # CURVE keys for every Main-Decode control connection (main_decode/control_auth.py): this
    # router's key pair and the public key MD's were made with; both or neither.
    control_curve_secret: str = ""
    control_curve_server: str = ""

    def __post_init__(self) -> None:
        if not self.prefill:
            raise ValueError("--prefill is required (at least one prefill server URL)")
        if not self.main:
            raise ValueError("--main is required (at least one Main-Decode server URL)")
        for name, urls in (("--prefill", self.prefill), ("--relay", self.relay)):
            for url in urls:
                _check_url(url, name)
        for endpoint in self.main:
            _check_url(endpoint.url, "--main")
            if not endpoint.control.startswith("tcp://"):
                raise ValueError(
                    f"--main-control must look like tcp://HOST:PORT, got {endpoint.control!r}"
                )
            if endpoint.kv_events is not None and not endpoint.kv_events.startswith("tcp://"):
                raise ValueError(
                    f"--main-kv-events must look like tcp://HOST:PORT, got {endpoint.kv_events!r}"
                )
        if self.pipeline.enable_relay and not self.relay:
            raise ValueError("--relay is required unless --no-relay is given")
        if not 0 < self.port < 65536:
            raise ValueError(f"--port must be in 1..65535, got {self.port}")
        if self.wan_bandwidth_mbps <= 0 or self.wan_rtt_ms < 0:
            raise ValueError("--wan-bandwidth-mbps must be > 0 and --wan-rtt-ms >= 0")
        if self.upstream_keepalive_s < 0:
            raise ValueError(
                f"--upstream-keepalive-s must be >= 0 (0: no reuse), got "
                f"{self.upstream_keepalive_s}"
            )
        for flag, value in (
            ("--upstream-connect-timeout-s", self.upstream_connect_timeout_s),
            ("--upstream-idle-timeout-s", self.upstream_idle_timeout_s),
            ("--handoff-retry-s", self.handoff_retry_s),
            ("--control-timeout-s", self.control_timeout_s),
        ):
            if not value > 0:
                raise ValueError(f"{flag} must be > 0 seconds, got {value}")
        for flag, value in (("--max-n", self.max_n), ("--max-batch-size", self.max_batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{flag} must be an integer >= 1, got {value!r}")
        if not self.max_body_mb > 0:
            raise ValueError(f"--max-body-mb must be > 0, got {self.max_body_mb}")
        if self.handoff_gap_prior_s is not None and not self.handoff_gap_prior_s >= 0:
            raise ValueError(
                f"--handoff-gap-prior-s must be >= 0 seconds, got {self.handoff_gap_prior_s}"
            )
        if self.main_transfer_start not in MAIN_TRANSFER_STARTS:
            raise ValueError(
                f"--main-transfer-start must be one of "
                f"{', '.join(MAIN_TRANSFER_STARTS)}, got "
                f"{self.main_transfer_start!r}"
            )
        for flag, value in (
            ("--api-key", self.api_key),
            ("--instance-api-key", self.instance_api_key),
        ):
            if value is not None and (not value or any(c.isspace() for c in value)):
                raise ValueError(f"{flag} must be a non-empty key without spaces")
        if self.instance_check_interval_s < 0:
            raise ValueError(
                f"--instance-check-interval-s must be >= 0 (0: off), got "
                f"{self.instance_check_interval_s}"
            )
        if self.migration_limit < 0:
            raise ValueError(
                f"--migration-limit must be >= 0 (0: never), got {self.migration_limit}"
            )
        if self.cache_block_tokens < 1:
            raise ValueError("--cache-block-tokens must be >= 1")
        curve = (self.control_curve_secret, self.control_curve_server)
        if any(curve) and not all(curve):
            raise ValueError(
                "--control-curve-secret and --control-curve-server go together: "
                "the router's key pair and Main-Decode's public key"
            )
        self.control_curve()  # unreadable keys are refused at start, naming the flag

    def control_curve(self):
        """The control connections' CURVE keys (a ``CurveClient``), or None when not set."""
        if not self.control_curve_secret:
            return None
        from sglang_pdd.main_decode.control_auth import CurveClient

        return CurveClient(self.control_curve_secret, self.control_curve_server)


def _check_url(url: str, flag: str) -> None:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{flag} takes http(s)://HOST:PORT URLs, got {url!r}")
