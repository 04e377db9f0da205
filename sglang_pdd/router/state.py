"""``RouterState``: what the router shares across requests (sessions, policies, instances)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass, replace
from functools import partial

import aiohttp
from aiohttp import web

from sglang_pdd.cache.kv_size import dtype_bytes, kv_bytes_per_token
from sglang_pdd.cache.prefix_blocks import BlockPrefixCache, block_hashes
from sglang_pdd.policy import (
    PIPELINE_P_RLD,
    HandoffPolicy,
    LinkEstimate,
    PipelineDecision,
    PipelinePolicy,
    placement,
)
from sglang_pdd.policy.placement import (
    PREFILL_PRIOR_S,
    ClusterSnapshot,
    MainCandidate,
    MovingAverage,
    PrefillCandidate,
    RelayCandidate,
)
from sglang_pdd.router.api.auth import upstream_headers
from sglang_pdd.router.api.request_model import RequestLimits
from sglang_pdd.router.config import MainEndpoint, RouterConfig
from sglang_pdd.router.instances.health import InstanceHealth
from sglang_pdd.router.instances.ledger_client import LedgerClient
from sglang_pdd.router.instances.loads import PrefillBacklog, decode_busy_fraction
from sglang_pdd.router.instances.main_control import MainControlClient
from sglang_pdd.router.instances.main_site import MainSite
from sglang_pdd.router.instances.transfers import MainTransfer
from sglang_pdd.router.model_files import load_tokenizer, model_config, model_vocab_size
from sglang_pdd.router.upstream.supervised import supervise
from sglang_pdd.transfer.link_model import LinkModelConfig

logger = logging.getLogger("sglang_pdd.router")


def _main_site(config: RouterConfig, main, link: LinkModelConfig, ledger) -> MainSite:
    return MainSite(
        main,
        link,
        config.cache_block_tokens,
        config.cache_capacity_blocks,
        config.control_timeout_s,
        config.control_curve(),
        ledger,
    )


class RouterState:
    """Instances, policies, and the router's mirror of Main-Decode's radix cache."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.pipeline_policy = PipelinePolicy(config.pipeline)
        self.handoff_policy = HandoffPolicy(config.handoff)
        self.limits = RequestLimits(config.max_n, config.max_batch_size)
        link = LinkModelConfig(config.wan_bandwidth_mbps * 1e6 / 8, config.wan_rtt_ms / 1000)
        # Shared with the other routers in front of this cluster (--transfer-ledger).
        self.ledger = LedgerClient(config.transfer_ledger) if config.transfer_ledger else None
        self.mains = {m.url: _main_site(config, m, link, self.ledger) for m in config.main}
        # What each prefill server holds: every prompt it prefilled, LRU (P keeps its radix cache).
        self.prefill_cache = {
            u: BlockPrefixCache(config.cache_capacity_blocks) for u in config.prefill
        }
        self.prefill_active = {u: 0 for u in config.prefill}
        # Seconds from a request's arrival to P's KV at Relay-Decode (P's queue and prefill),
        # learned from relayed requests' first tokens.
        self.prefill_estimate = MovingAverage(PREFILL_PRIOR_S)
        prior = config.handoff_gap_prior_s
        self.handoff_gap_estimate = MovingAverage(
            config.wan_rtt_ms / 1000 if prior is None else prior
        )
        # Each Main-Decode's seconds per id at the router, learned from finished requests (the
        # overlapped switch reads it before MD's own pace for a request can be measured).
        self.main_itl_estimates = {m.url: MovingAverage() for m in config.main}
        # Relay-Decode's seconds per id at the router (all RLDs), learned the same way: with
        # MD's, it values RLD's head start in MD's time when a request is planned.
        self.relay_itl_estimate = MovingAverage()
        from sglang_pdd.router.metrics import RouterMetrics

        self.health = InstanceHealth(config.breaker)
        roles = {u: "prefill" for u in config.prefill} | {u: "relay" for u in config.relay}
        roles |= {m.url: "main" for m in config.main}
        self.metrics = RouterMetrics(self.mains, roles, self.health, self.ledger)
        self.session: aiohttp.ClientSession | None = None
        self.bootstrap: dict[str, tuple[str, int]] = {}
        self.model_info: dict = {}
        self.server_info: dict = {}
        self.tokenizer = None
        self.vocab_size = 0  # ids at or above it are refused (SGLang's scheduler dies on them)
        self.max_prompt_tokens = 0  # prompts this long or longer are refused (start() sets it)
        self.kv_bytes_per_token = 0
        # Relay-Decode's live load per URL, polled from SGLang's /v1/loads.
        self.relay_loads: dict[str, float] = {}
        # Each Prefill's queued prefill (polled too when RLD shares P's hardware).
        self.prefill_backlogs = {u: PrefillBacklog() for u in config.prefill}
        self._load_poller: asyncio.Task | None = None
        self._health_probe: asyncio.Task | None = None
        self._ready_watch: asyncio.Task | None = None
        self.background: set = set()  # sub-requests outliving their client request
        self.live: dict = {}  # rid -> PddRecord of every request in flight (GET /pdd/requests)
        self.clients: dict = {}  # rid -> ClientRun of every request in flight (drain moves them)
        self.incremental_streams: dict[str, bool] = {}
        self._turns = itertools.count()  # one per route: round-robin among equal instances

    async def start(self) -> None:
        """Open the HTTP session, learn bootstrap ports and the model, connect control sockets."""
        self.session = self._open_session()
        prefill_bounds = []
        for url in self.config.prefill:
            info = await self._get(f"{url}/get_server_info")
            host = url.split("://", 1)[1].rsplit(":", 1)[0]
            self.bootstrap[url] = (host, int(info["disaggregation_bootstrap_port"]))
            # SGLang's scheduler refuses prompts this long (context and pool bound): refusing
            # them here spares tokenizing, planning and three sub-requests for a sure error.
            prefill_bounds.append(int(info["max_req_input_len"]))
        self.max_prompt_tokens = self.config.max_prompt_tokens or min(prefill_bounds)
        main0 = self.config.main[0].url
        self.model_info = await self._get(f"{main0}/get_model_info")
        self.server_info = await self._get(f"{main0}/get_server_info")
        for site in self.mains.values():
            site.start(self.metrics.counting_failures_of)
        if self.ledger is not None:
            self.ledger.start(self.metrics.counting_failures_of("transfer ledger"))
        # Decode servers that stream only new ids (--incremental-streaming-output).
        for url in [*self.config.relay, *self.mains]:
            info = await self._get(f"{url}/get_server_info")
            self.incremental_streams[url] = bool(info.get("incremental_streaming_output"))
        path = (
            self.config.tokenizer_path
            or self.server_info.get("tokenizer_path")
            or (self.model_info["model_path"])
        )
        self.tokenizer = load_tokenizer(path)
        self.vocab_size = model_vocab_size(self.model_info.get("model_path"), self.tokenizer)
        self.kv_bytes_per_token = self.config.kv_bytes_per_token or await self._kv_bytes_per_token()
        self._start_background_tasks()

    def _open_session(self) -> aiohttp.ClientSession:
        """The HTTP session to every instance (keep-alive per --upstream-keepalive-s)."""
        keepalive = self.config.upstream_keepalive_s
        connector = aiohttp.TCPConnector(
            limit=0,  # streams stay open for a whole request; never queue behind them
            force_close=keepalive == 0,
            keepalive_timeout=keepalive if keepalive > 0 else None,
        )
        return aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=self.config.upstream_connect_timeout_s
            ),
            headers=upstream_headers(self.config.instance_api_key),
        )

    def _start_background_tasks(self) -> None:
        """RLD's load poller, the health probe and the /ready watch, each supervised."""
        loop = asyncio.get_running_loop()
        if self.config.relay:
            self._load_poller = loop.create_task(
                self._supervised("instance load poller", self._poll_loads)
            )
        self._health_probe = loop.create_task(
            self._supervised("instance health probe", lambda: self.health.probe(self.session))
        )
        if self.config.instance_check_interval_s > 0:
            decoding = [*self.config.relay, *self.mains]
            self._ready_watch = loop.create_task(
                self._supervised(
                    "instance /ready watch",
                    lambda: self.health.watch_ready(
                        self.session,
                        decoding,
                        self.config.instance_check_interval_s,
                        self.move_requests_off,
                    ),
                )
            )

    def _supervised(self, name: str, loop):
        return supervise(name, loop, on_failure=self.metrics.counting_failures_of(name))

    async def _poll_loads(self, interval_s: float = 0.5) -> None:
        """Keep ``relay_loads`` current (the busier of KV-token usage and running-request use)
        and, when RLD shares P's hardware, ``prefill_backlogs``."""
        polled = [(url, self.relay_loads, decode_busy_fraction) for url in self.config.relay]
        if self.config.pipeline.relay_shares_prefill:
            polled += [(url, None, partial(self._note_backlog, url)) for url in self.config.prefill]
        while True:
            for url, into, read in polled:
                try:
                    data = await self._get(f"{url}/v1/loads")
                    value = read(data)
                    if into is not None:
                        into[url] = value
                except (
                    aiohttp.ClientError,
                    TimeoutError,
                    KeyError,
                    IndexError,
                    TypeError,
                    ValueError,
                ) as exc:
                    logger.debug("sglang-pdd router: no load from %s: %s", url, exc)
            await asyncio.sleep(interval_s)

    def _note_backlog(self, url: str, loads: dict) -> None:
        self.prefill_backlogs[url].note(loads, time.monotonic())

    async def _get(self, url: str) -> dict:
        cfg = self.config
        timeout = aiohttp.ClientTimeout(
            total=cfg.upstream_idle_timeout_s, sock_connect=cfg.upstream_connect_timeout_s
        )
        async with self.session.get(url, timeout=timeout) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)

    async def _kv_bytes_per_token(self) -> int:
        # A config file, not an SGLang object: absent keys take transformers' defaults.
        cfg = model_config(self.model_info["model_path"])
        heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        dtype = str(self.server_info.get("kv_cache_dtype", "auto"))
        if dtype == "auto":
            dtype = str(self.server_info.get("dtype", "bfloat16"))
        if dtype == "auto":  # SGLang's --dtype auto: the checkpoint's own dtype
            dtype = str(cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16")
        return kv_bytes_per_token(cfg["num_hidden_layers"], heads, head_dim, dtype_bytes(dtype))

    def keep_in_background(self, task: asyncio.Task) -> None:
        """Hold a sub-request task that outlives its client request until it ends."""
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def run_in_background(self, coro) -> asyncio.Task:
        """Run ``coro`` as a task held by ``keep_in_background``."""
        task = asyncio.get_running_loop().create_task(coro)
        self.keep_in_background(task)
        return task

    async def close(self) -> None:
        for task in (self._load_poller, self._health_probe, self._ready_watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for site in self.mains.values():
            await site.close()
        if self.ledger is not None:
            await self.ledger.close()
        if self.session is not None:
            await self.session.close()

    # -- choices ----------------------------------------------------------------------------
    def control_for(self, main: MainEndpoint | MainSite) -> MainControlClient:
        return self.mains[main.url].control

    def site(self, main: MainEndpoint | MainSite) -> MainSite:
        return self.mains[main.url]

    def move_requests_off(self, url: str) -> tuple[int, int]:
        """Move every in-flight request on ``url`` elsewhere (it is draining): (moved,
        finishing where it is)."""
        moved = finishing = 0
        for client in list(self.clients.values()):
            verdict = client.evict(url)
            moved += verdict is True
            finishing += verdict is False
        return moved, finishing

    def relay_load(self, url: str | None = None) -> float:
        """Relay-Decode's live load (0..1) from its /v1/loads, for ``url`` or the least busy."""
        if url is not None:
            return self.relay_loads.get(url, 0.0)
        return min((self.relay_loads.get(u, 0.0) for u in self.config.relay), default=0.0)

    @property
    def prefill_estimate_s(self) -> float:
        """Expected seconds from arrival to P's KV at Relay-Decode."""
        return self.prefill_estimate.value

    @property
    def handoff_gap_estimate_s(self) -> float:
        """Expected client-visible cost of a final handoff."""
        return self.handoff_gap_estimate.value

    def main_itl_estimate_s(self, url: str) -> float | None:
        """Main-Decode ``url``'s mean seconds per id at the router (None: none measured)."""
        return self.main_itl_estimates[url].value

    def note_handoff_gap(self, seconds: float) -> None:
        """A final handoff's cost to the client: sent to MD, to MD's first id back."""
        self.handoff_gap_estimate.note(seconds)

    def note_main_itl(self, url: str, seconds: float) -> None:
        """A request's mean gap between Main-Decode ``url``'s chunks at the router."""
        self.main_itl_estimates[url].note(seconds)

    def note_relay_itl(self, seconds: float) -> None:
        """A request's mean gap between Relay-Decode's chunks at the router."""
        self.relay_itl_estimate.note(seconds)

    def pace_ratio(self, main_urls) -> float:
        """Main-Decode's seconds per id (the mean over ``main_urls`` measured) over
        Relay-Decode's, as placement takes it (``placement.pace_ratio``)."""
        known = [v for u in main_urls if (v := self.main_itl_estimates[u].value) is not None]
        main = sum(known) / len(known) if known else None
        return placement.pace_ratio(main, self.relay_itl_estimate.value)

    def note_prefill_time(self, seconds: float) -> None:
        """A relayed request's first token came ``seconds`` after it arrived."""
        self.prefill_estimate.note(seconds)

    def main_plan(self, site: MainSite, input_ids: list[int], hashes: list[int]) -> MainPlan:
        """What sending ``input_ids`` to ``site`` now would involve."""
        cached = site.cached_tokens(input_ids, hashes)
        return MainPlan(site, hashes, cached, *site.transfers.plan(hashes, cached, len(input_ids)))

    def route(
        self, input_ids: list[int], max_new_tokens: int, avoid: frozenset[str] = frozenset()
    ) -> RoutedRequest:
        """``_route`` without the instances out of rotation (``health``), unless that leaves no
        prefill or decoding instance: then they are tried all the same."""
        down = self.health.out_of_rotation()
        if down - avoid:
            try:
                return self._route(input_ids, max_new_tokens, avoid | down)
            except ValueError:
                pass
        return self._route(input_ids, max_new_tokens, avoid)

    def _route(
        self, input_ids: list[int], max_new_tokens: int, avoid: frozenset[str]
    ) -> RoutedRequest:
        """Pick the pipeline and the instances for a request (``policy.placement.place`` on a
        snapshot of the instances not in ``avoid``).

        ``avoid``: instance URLs not to use (they failed this request); with every Main-Decode
        avoided the request goes P-RLD; ValueError when no prefill or decoding instance is left.
        """
        hashes = block_hashes(input_ids, self.config.cache_block_tokens)
        sites = [site for site in self.mains.values() if site.url not in avoid]
        main_plans = {site.url: self.main_plan(site, input_ids, hashes) for site in sites}
        backlog_window_s, now = self.config.pipeline.prefill_backlog_window_s, time.monotonic()
        snapshot = ClusterSnapshot(
            prefills=tuple(
                PrefillCandidate(
                    u,
                    self.prefill_cache[u].match(hashes) * self.config.cache_block_tokens,
                    self.prefill_active[u],
                    self.prefill_backlogs[u].standing_seconds(backlog_window_s, now),
                )
                for u in self.config.prefill
                if u not in avoid
            ),
            relays=tuple(
                RelayCandidate(u, self.relay_load(u)) for u in self.config.relay if u not in avoid
            ),
            mains=tuple(
                MainCandidate(
                    site.url,
                    main_plans[site.url].covered_tokens,
                    self._link(site, main_plans[site.url]),
                    site.active,
                )
                for site in sites
            ),
            prefill_s=self.prefill_estimate_s,
            handoff_gap_s=self.handoff_gap_estimate_s,
            kv_bytes_per_token=self.kv_bytes_per_token,
            turn=next(self._turns),
            pace_ratio=self.pace_ratio([site.url for site in sites]),
        )
        try:
            chosen = placement.place(snapshot, len(input_ids), max_new_tokens, self.pipeline_policy)
        except ValueError:
            raise ValueError(
                f"no instance left to serve the request (failed: {sorted(avoid)})"
            ) from None
        self.prefill_cache[chosen.prefill].insert(hashes)
        if chosen.main is None:  # every Main-Decode failed this request: RLD finishes it
            main = next(iter(self.mains.values()))
            return RoutedRequest(chosen.decision, chosen.prefill, chosen.relay, main)
        mp = main_plans[chosen.main]
        if chosen.decision.pipeline == PIPELINE_P_RLD:
            return RoutedRequest(chosen.decision, chosen.prefill, chosen.relay, mp.site)
        return RoutedRequest(chosen.decision, chosen.prefill, chosen.relay, mp.site, mp)

    @staticmethod
    def _link(site: MainSite, mp: MainPlan) -> LinkEstimate:
        """The link to ``site`` as ``mp``'s transfer would see it (a promoted warm ahead)."""
        link = site.transfers.link.estimate()
        if mp.extra_backlog:
            link = replace(link, backlog_bytes=link.backlog_bytes + mp.extra_backlog)
        return link


@dataclass(frozen=True)
class MainPlan:
    """How a request's KV would reach one Main-Decode.

    cached_tokens: what MD's radix cache holds now; covered_tokens: what it will hold once the
    transfer this prompt depends on has landed; dependency: that transfer (on the link, or a
    deferred warm); carries_dependency: the dependency is a deferred warm whose prompt is a
    prefix of this one, so this request's own transfer carries it and the warm is dropped.
    """

    site: MainSite
    hashes: list[int]
    cached_tokens: int
    covered_tokens: int
    dependency: MainTransfer | None
    carries_dependency: bool
    extra_backlog: float


# The aiohttp application key under which the router's handlers find the RouterState.
STATE = web.AppKey("state", RouterState)


@dataclass(frozen=True)
class RoutedRequest:
    """Where ``RouterState.route`` sends one request: its pipeline and its instances.

    prefill, relay: P's and RLD's URLs (relay None when no Relay-Decode is left); main: the
    Main-Decode site the request is counted on (with P-RLD, the one placement chose, or the first
    when every Main-Decode failed it); main_plan: how its KV reaches that site (None with P-RLD).
    """

    decision: PipelineDecision
    prefill: str
    relay: str | None
    main: MainSite
    main_plan: MainPlan | None = None
