"""``RouterState``: what the router shares across requests (sessions, policies, instances)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging

import aiohttp

from sglang_pdd.cache.prefix_blocks import BlockPrefixCache, block_hashes
from sglang_pdd.policy import (
    PIPELINE_P_RLD,
    HandoffPolicy,
    LinkEstimate,
    PipelinePolicy,
    RequestFacts,
)
from sglang_pdd.router.config import MainEndpoint, RouterConfig
from sglang_pdd.router.main_control import MainControlClient

logger = logging.getLogger("sglang_pdd.router")


class RouterState:
    """Instances, policies, and the router's mirror of Main-Decode's radix cache."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.pipeline_policy = PipelinePolicy(config.pipeline)
        self.handoff_policy = HandoffPolicy(config.handoff)
        self.link = LinkEstimate(config.wan_bandwidth_mbps * 1e6 / 8, config.wan_rtt_ms / 1000)
        self.main_cache = BlockPrefixCache(config.cache_capacity_blocks)
        self.session: aiohttp.ClientSession | None = None
        self.bootstrap: dict[str, tuple[str, int]] = {}
        self.controls: dict[str, MainControlClient] = {}
        self.model_info: dict = {}
        self.server_info: dict = {}
        self.tokenizer = None
        self.kv_bytes_per_token = 0
        # Relay-Decode's live load per URL, polled from SGLang's /v1/loads.
        self.relay_loads: dict[str, float] = {}
        self._load_poller: asyncio.Task | None = None
        self.background: set = set()  # sub-requests outliving their client request
        self._rr = {role: itertools.count() for role in ("prefill", "relay", "main")}

    async def start(self) -> None:
        """Open the HTTP session, learn bootstrap ports and the model, connect control sockets."""
        keepalive = self.config.upstream_keepalive_s
        connector = aiohttp.TCPConnector(
            limit=0,  # streams stay open for a whole request; never queue behind them
            force_close=keepalive == 0,
            keepalive_timeout=keepalive if keepalive > 0 else None,
        )
        self.session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None)
        )
        for url in self.config.prefill:
            info = await self._get(f"{url}/get_server_info")
            host = url.split("://", 1)[1].rsplit(":", 1)[0]
            self.bootstrap[url] = (host, int(info["disaggregation_bootstrap_port"]))
        main0 = self.config.main[0].url
        self.model_info = await self._get(f"{main0}/get_model_info")
        self.server_info = await self._get(f"{main0}/get_server_info")
        for endpoint in self.config.main:
            client = MainControlClient(endpoint.control)
            client.start()
            self.controls[endpoint.url] = client
        from transformers import AutoTokenizer

        path = self.config.tokenizer_path or self.server_info.get("tokenizer_path") or (
            self.model_info["model_path"])  # fmt: skip
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.kv_bytes_per_token = await self._kv_bytes_per_token()
        if self.config.relay:
            self._load_poller = asyncio.get_running_loop().create_task(self._poll_relay_loads())

    async def _poll_relay_loads(self, interval_s: float = 0.5) -> None:
        """Keep ``relay_loads`` current: the busier of KV-token usage and running-request use."""
        while True:
            for url in self.config.relay:
                try:
                    data = await self._get(f"{url}/v1/loads")
                    load = data["loads"][0]
                    running = load["num_running_reqs"] / max(load["max_running_requests"], 1)
                    self.relay_loads[url] = max(float(load["token_usage"]), running)
                except (aiohttp.ClientError, KeyError, IndexError, TypeError, ValueError) as exc:
                    logger.debug("sglang-pdd router: no load from %s: %s", url, exc)
            await asyncio.sleep(interval_s)

    async def _get(self, url: str) -> dict:
        async with self.session.get(url) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)

    async def _kv_bytes_per_token(self) -> int:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(self.model_info["model_path"])
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = str(self.server_info.get("kv_cache_dtype", "auto"))
        if dtype == "auto":
            dtype = str(self.server_info.get("dtype", "bfloat16"))
        width = 4 if "32" in dtype else 1 if "8" in dtype else 2
        return 2 * cfg.num_hidden_layers * heads * head_dim * width

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
        if self._load_poller is not None:
            self._load_poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._load_poller
        for client in self.controls.values():
            await client.close()
        if self.session is not None:
            await self.session.close()

    # -- choices ----------------------------------------------------------------------------
    def _pick(self, role: str, items):
        return items[next(self._rr[role]) % len(items)]

    def control_for(self, main: MainEndpoint) -> MainControlClient:
        return self.controls[main.url]

    def relay_load(self, url: str | None = None) -> float:
        """Relay-Decode's live load (0..1) from its /v1/loads, for ``url`` or the least busy."""
        if url is not None:
            return self.relay_loads.get(url, 0.0)
        return min((self.relay_loads.get(u, 0.0) for u in self.config.relay), default=0.0)

    def plan(self, input_ids: list[int], max_new_tokens: int):
        """Pick the pipeline and the instances for a request (and update the cache mirror)."""
        hashes = block_hashes(input_ids, self.config.cache_block_tokens)
        cached = self.main_cache.match(hashes) * self.config.cache_block_tokens
        facts = RequestFacts(
            input_tokens=len(input_ids),
            main_cached_tokens=min(cached, len(input_ids)),
            max_output_tokens=max_new_tokens,
            kv_bytes_per_token=self.kv_bytes_per_token,
        )
        decision = self.pipeline_policy.decide(facts, self.link, self.relay_load())
        if decision.pipeline != PIPELINE_P_RLD:
            self.main_cache.insert(hashes)  # MD ends up holding this prompt's KV
        prefill = self._pick("prefill", self.config.prefill)
        relay = None
        if self.config.relay:  # the least busy Relay-Decode, round-robin among equals
            start = next(self._rr["relay"]) % len(self.config.relay)
            rotated = self.config.relay[start:] + self.config.relay[:start]
            relay = min(rotated, key=self.relay_load)
        main = self._pick("main", self.config.main)
        return decision, (prefill, relay, main)
