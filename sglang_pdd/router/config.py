"""``RouterConfig``: what ``sglang-pdd router`` was told on its command line."""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_pdd.options import option
from sglang_pdd.policy import HANDOFF_RETRY_S, HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.router.instances.breaker import BreakerConfig

# The tool-call and reasoning parsers SGLang 0.5.23 ships (FunctionCallParser.ToolCallParserEnum,
# ReasoningParser.DetectorMap; tests/test_sglang_surface.py fails when SGLang's lists change):
# --tool-call-parser, --reasoning-parser. The router parses chat answers with SGLang's own
# serving code and parser classes (router/api/openai_chat.py); what a parser needs that the router
# does not carry to the instances is refused per request with a 400 naming it.
TOOL_CALL_PARSERS = (
    "apertus2509", "beam", "cohere_command4", "deepseekv3", "deepseekv31", "deepseekv32",
    "deepseekv4", "deepseekv41", "dots", "gemma4", "gigachat3", "gigachat35", "glm", "glm45",
    "glm47", "gpt-oss", "hermes", "hunyuan", "inkling", "interns1", "iquest_q1", "k2_horizon",
    "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3", "mimo", "minicpm5", "minimax-m2",
    "minimax-m3", "mistral", "muse", "nanbeige", "poolside_v1", "pythonic", "qwen", "qwen25",
    "qwen3_coder", "response_template", "spark25", "step3", "step3p5", "trinity",
)  # fmt: skip
REASONING_PARSERS = (
    "apertus2509", "beam", "cohere_command4", "deepseek-r1", "deepseek-v3", "deepseek-v4",
    "deepseek-v41", "dots", "gemma4", "gigachat35", "glm45", "gpt-oss",
    "granite_thinking_parser", "hunyuan", "inkling", "interns1", "iquest_q1", "k2_horizon",
    "kimi", "kimi_k2", "kimi_k3", "ling3", "mimo", "minimax", "minimax-append-think",
    "minimax-m3", "mistral", "muse", "nanbeige", "nemotron_3", "poolside_v1", "qwen3",
    "qwen3-thinking", "response_template", "step3", "step3p5",
)  # fmt: skip

MAIN_TRANSFER_STARTS = ("with-prefill", "after-relay")
HANDOFF_SWITCHES = ("overlap", "hold")


@dataclass(frozen=True)
class MainEndpoint:
    """A Main-Decode server: its HTTP URL and its handoff control socket (ZeroMQ)."""

    url: str
    control: str  # tcp://host:port
    kv_events: str | None = None  # tcp://host:port of its KV event publisher, if it has one


@dataclass(frozen=True)
class RouterConfig:
    """Instances behind the router and the policies it applies."""

    prefill: tuple[str, ...] = option(help="prefill server URL (repeat)", repeat=True)
    relay: tuple[str, ...] = option(help="Relay-Decode URL (repeat)", repeat=True)
    # Set by --main, --main-control and --main-kv-events together (router/cli.py).
    main: tuple[MainEndpoint, ...]
    host: str = option("127.0.0.1", "address the router listens on")
    port: int = option(8000, "port the router listens on")
    pipeline: PipelinePolicyConfig = field(default_factory=PipelinePolicyConfig)
    handoff: HandoffPolicyConfig = field(default_factory=HandoffPolicyConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    # What the router assumes of the WAN when it estimates MD's readiness for the policy.
    wan_bandwidth_mbps: float = option(100.0, "WAN bandwidth the pipeline policy assumes")
    wan_rtt_ms: float = option(40.0, "WAN RTT the policy assumes")
    # The policy's WAN bytes per uncached prompt token. The model's config.json describes
    # plain multi-head and grouped-query caches only; MLA, quantized caches and an emulated
    # model (the testbed's --pdd-emulate-model) put other sizes on the link.
    kv_bytes_per_token: int = option(
        0,
        "KV bytes one prompt token puts on the WAN, for the pipeline policy's transfer "
        "estimates (0: from the model's config.json and the servers' KV dtype)",
    )
    # Block size of the router's mirror of Main-Decode's radix cache.
    cache_block_tokens: int = 16
    cache_capacity_blocks: int = 1 << 16
    tokenizer_path: str | None = option(None, "tokenizer to use (default: the servers' model path)")
    # SGLang's servers close idle connections after SGLANG_TIMEOUT_KEEP_ALIVE (5 s); a request
    # sent on one the server is closing fails, and over a WAN that window widens by the RTT.
    upstream_keepalive_s: float = option(
        2.0,
        "reuse an idle connection to an instance for at most this long; keep it below "
        "SGLang's 5 s keep-alive minus the link's RTT (0: a new connection per request)",
    )
    # Connecting to an instance, and a decoding instance's stream going silent, are bounded:
    # past these the request ends with a 502/504 naming the instance (and is aborted
    # everywhere). A Main-Decode stream parked before the handoff is silent by design: its idle
    # clock starts at the final handoff.
    upstream_connect_timeout_s: float = option(
        10.0, "give up connecting to an instance after this long (the request gets a 502)"
    )
    upstream_idle_timeout_s: float = option(
        600.0,
        "end a request whose decoding instance sends nothing for this long (504, aborted "
        "everywhere); a Main-Decode parked before the handoff is exempt until the handoff",
    )
    health_timeout_s: float = option(
        20.0,
        "/health waits this long for each instance's /health, /health_generate this long for "
        "its 2-token generation, before answering 503 (SGLang's HEALTH_CHECK_TIMEOUT)",
    )
    handoff_retry_s: float = option(
        HANDOFF_RETRY_S,
        "a final handoff Main-Decode defers for lack of KV room is made again this long "
        "after (with the ids Relay-Decode streamed meanwhile; RLD serves until MD takes one)",
    )
    # Until the router has measured a final handoff's cost (the final handoff sent to MD's
    # first id back), then the measurements' moving average. MD's cache is still warmed.
    handoff_gap_prior_s: float | None = option(
        None,
        "the client-visible cost of a final handoff (RTT + extend + one MD step) assumed "
        "until one is measured (then their moving average); a relayed request whose remaining "
        "ids RLD makes sooner finishes on RLD (default: --wan-rtt-ms)",
    )
    # The rule above.
    tail_on_relay: bool = option(
        True,
        "hand every relayed request off once MD is ready, even one RLD finishes sooner",
        flag="--no-tail-on-relay",
    )
    # handoff/core.py: "overlap" applies to deterministic requests only (greedy, or seeded with
    # --seeded-sampling); any other request switches by holding RLD's ids.
    # "hold" by default: on the testbed's CPU MD makes ids no faster than RLD, and RLD's ids
    # streamed while MD answers are ones MD must make again before the client gets a new one,
    # so overlapping made the gap larger (docs/testbed.md).
    handoff_switch: str = option(
        "hold",
        "how the client moves from RLD's ids to MD's at the final handoff: 'overlap' keeps "
        "RLD streaming until MD's ids (checked against RLD's) are ahead, for greedy and "
        "seeded requests; 'hold' holds RLD's ids back until MD answers (one RTT + extend)",
        choices=HANDOFF_SWITCHES,
    )
    control_timeout_s: float = option(
        5.0,
        "a Main-Decode control connection silent this long (ZeroMQ heartbeats) is dropped "
        "and redialed, the router watching its requests again; a control message that cannot "
        "be sent this long fails (the request stays on Relay-Decode or migrates)",
    )
    instance_check_interval_s: float = option(
        2.0,
        "ask each decoding instance for /ready this often; one answering 503 (SGLang's "
        "graceful shutdown after SIGTERM, or paused) is drained: its requests move elsewhere "
        "and it gets no new ones until /ready answers 200 again (0: never ask)",
    )
    # Greedy requests only (router/pipeline/migration.py).
    migration_limit: int = option(
        2,
        "times one greedy request may continue on other instances, from its prompt plus "
        "the ids already sent, after the instance serving it failed or went silent (0: never)",
    )
    # What one client request may ask for: samples (n), prompts in a batch, body size (MiB).
    max_n: int = option(
        64, "the most samples (sampling_params.n, OpenAI n) one request may ask for (400 above)"
    )
    max_batch_size: int = option(
        256, "the most prompts one batched /generate may carry (400 above)"
    )
    max_live_requests: int = option(
        4096,
        "the most client requests (each prompt and sample of one counting) in flight at "
        "once; more are answered 503 at once, as SGLang's full request queue",
    )
    max_body_mb: float = option(64.0, "the largest request body accepted, in MiB (413 above)")
    max_prompt_tokens: int = option(
        0,
        "prompts of this many tokens or more are answered 400 before any instance sees them "
        "(0: the prefill servers' own bound, the smallest max_req_input_len their "
        "/server_info reports, which SGLang refuses at)",
    )
    api_key: str | None = option(
        None,
        "clients must send 'Authorization: Bearer KEY' (as sglang.launch_server "
        "--api-key); /health*, /ready*, /metrics stay open",
    )
    admin_api_key: str | None = option(
        None,
        "the operator's endpoints (/pdd/drain, /pdd/undrain, /pdd/requests) need "
        "'Authorization: Bearer KEY' (as sglang.launch_server --admin-api-key; without it "
        "they take --api-key); the admin key opens nothing else",
    )
    instance_api_key: str | None = option(
        None, "key the router presents to every instance (P, RLD, MD) started with --api-key"
    )
    # "with-prefill": MD's KV leaves P when the prefill ends; "after-relay": the earlier
    # behaviour, for comparison and for prefill servers without sglang-pdd's hold hook.
    main_transfer_start: str = option(
        "with-prefill",
        "P-RLD-MD: request Main-Decode's KV from P together with Relay-Decode's (P holds "
        "it until the prefill ends; needs sglang-pdd on P) or only after P answered RLD's",
        choices=MAIN_TRANSFER_STARTS,
    )
    incremental_streaming_output: bool = option(
        False,
        "/generate streams send only the new output ids and text in each chunk, as "
        "SGLang's flag of the same name (default: cumulative, as SGLang's default)",
    )
    # The router answers chats with SGLang's own serving code and parsers
    # (router/api/openai_chat.py).
    tool_call_parser: str | None = option(
        None,
        "parse OpenAI tool calls from chat answers with this SGLang parser (SGLang's flag of the "
        "same name; give the co-located servers' value: without it, tool_choice required or "
        "named gets SGLang's JSON-array grammar and the answer stays text, as in SGLang)",
        choices=TOOL_CALL_PARSERS,
    )
    reasoning_parser: str | None = option(
        None,
        "separate chat answers' reasoning into reasoning_content with this SGLang parser "
        "(SGLang's flag of the same name; give the co-located servers' value)",
        choices=REASONING_PARSERS,
    )
    # A seeded request with temperature > 0 then draws the same tokens on each instance.
    seeded_sampling: bool = option(
        False,
        "every instance runs with --pdd-seeded-sampling: accept sampling_seed (OpenAI "
        "seed) with temperature > 0 (refused otherwise: each instance would draw differently)",
    )
    # router/instances/ledger_client.py: with it, routers sharing one cluster never send a prefix
    # twice.
    transfer_ledger: str = option(
        "",
        "a Prefill's transfer ledger (tcp://HOST:PORT, that Prefill's --pdd-ledger-port): "
        "claim each transfer's KV blocks there before it leaves, so that two or more routers "
        "in front of one cluster never send one prefix to a Main-Decode at once; empty: this "
        "router is the only one",
    )
    # CURVE keys for every Main-Decode control connection (main_decode/control_auth.py): both
    # or neither.
    control_curve_secret: str = option(
        "",
        "this router's CURVE key pair (a NAME.key_secret file from sglang-pdd "
        "control-keys), for Main-Decodes started with --pdd-control-curve-secret; their "
        "--pdd-control-curve-clients folder must hold this router's NAME.key",
    )
    control_curve_server: str = option(
        "", "Main-Decode's CURVE public key (the NAME.key of its --pdd-control-curve-secret)"
    )

    def __post_init__(self) -> None:
        self._check_instances()
        self._check_limits()
        self._check_keys()

    def _check_instances(self) -> None:
        """The instances' URLs and control endpoints, and what the pipeline needs of them."""
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
        if self.transfer_ledger and not self.transfer_ledger.startswith("tcp://"):
            raise ValueError(
                f"--transfer-ledger must look like tcp://HOST:PORT, got {self.transfer_ledger!r}"
            )

    def _check_limits(self) -> None:
        """Ports, timeouts, sizes and modes: each value in its accepted range."""
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
            ("--health-timeout-s", self.health_timeout_s),
            ("--control-timeout-s", self.control_timeout_s),
        ):
            if not value > 0:
                raise ValueError(f"{flag} must be > 0 seconds, got {value}")
        self._check_sizes()
        self._check_modes()

    def _check_sizes(self) -> None:
        """Counts and sizes: integers in their accepted ranges."""
        for flag, value in (
            ("--max-n", self.max_n),
            ("--max-batch-size", self.max_batch_size),
            ("--max-live-requests", self.max_live_requests),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{flag} must be an integer >= 1, got {value!r}")
        if (
            isinstance(self.max_prompt_tokens, bool)
            or not isinstance(self.max_prompt_tokens, int)
            or self.max_prompt_tokens < 0
        ):
            raise ValueError(
                "--max-prompt-tokens must be an integer >= 0 (0: the prefill servers' bound), "
                f"got {self.max_prompt_tokens!r}"
            )
        if (
            isinstance(self.kv_bytes_per_token, bool)
            or not isinstance(self.kv_bytes_per_token, int)
            or self.kv_bytes_per_token < 0
        ):
            raise ValueError(
                "--kv-bytes-per-token must be an integer >= 0 (0: from the model's config), "
                f"got {self.kv_bytes_per_token!r}"
            )
        if not self.max_body_mb > 0:
            raise ValueError(f"--max-body-mb must be > 0, got {self.max_body_mb}")
        if self.cache_block_tokens < 1:
            raise ValueError("--cache-block-tokens must be >= 1")

    def _check_modes(self) -> None:
        """The handoff's and the health checks' modes and intervals."""
        if self.handoff_gap_prior_s is not None and not self.handoff_gap_prior_s >= 0:
            raise ValueError(
                f"--handoff-gap-prior-s must be >= 0 seconds, got {self.handoff_gap_prior_s}"
            )
        if self.handoff_switch not in HANDOFF_SWITCHES:
            raise ValueError(
                f"--handoff-switch must be one of {', '.join(HANDOFF_SWITCHES)}, got "
                f"{self.handoff_switch!r}"
            )
        if self.main_transfer_start not in MAIN_TRANSFER_STARTS:
            raise ValueError(
                f"--main-transfer-start must be one of "
                f"{', '.join(MAIN_TRANSFER_STARTS)}, got "
                f"{self.main_transfer_start!r}"
            )
        if self.instance_check_interval_s < 0:
            raise ValueError(
                f"--instance-check-interval-s must be >= 0 (0: off), got "
                f"{self.instance_check_interval_s}"
            )
        if self.migration_limit < 0:
            raise ValueError(
                f"--migration-limit must be >= 0 (0: never), got {self.migration_limit}"
            )

    def _check_keys(self) -> None:
        """API keys and the CURVE key pair (unreadable keys refused at start)."""
        for flag, value in (
            ("--api-key", self.api_key),
            ("--admin-api-key", self.admin_api_key),
            ("--instance-api-key", self.instance_api_key),
        ):
            if value is not None and (not value or any(c.isspace() for c in value)):
                raise ValueError(f"{flag} must be a non-empty key without spaces")
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
