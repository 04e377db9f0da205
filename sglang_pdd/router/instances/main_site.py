"""``MainSite``: everything the router knows about one Main-Decode.

Its control socket, its cache as Main-Decode itself reports it, the transfers on its link and
the live model of that link, and how many of the router's requests it is serving.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence

from sglang_pdd.cache.kv_event_view import KvEventCacheView
from sglang_pdd.cache.prefix_blocks import BlockPrefixCache, block_hashes, common_prefix_blocks
from sglang_pdd.router.config import MainEndpoint
from sglang_pdd.router.instances.kv_events import KvEventSubscriber
from sglang_pdd.router.instances.ledger_client import LedgerClient
from sglang_pdd.router.instances.main_control import MainControlClient
from sglang_pdd.router.instances.transfers import SENDING, MainTransfer, MainTransfers
from sglang_pdd.transfer.link_model import LinkModelConfig, LiveLinkModel
from sglang_pdd.wire.ledger import Busy
from sglang_pdd.wire.messages import Event, Ready

logger = logging.getLogger("sglang_pdd.router")
RECENT_S = 30.0  # how long MD's own reports stand in for KV events not yet received
RECENT_MAX = 4096
# How long a request waits on other routers' transfers before sending its KV unclaimed (the
# same bound as a wait on this router's own transfers, ``transfer_claims.DEPENDENCY_TIMEOUT_S``).
SHARED_WAIT_LIMIT_S = 60.0


class LandedPrefixMirror:
    """Main-Decode's cache as the prompts it confirmed holding (for MDs without KV events).

    A prompt enters only when Main-Decode's request for it ended after its KV landed (SGLang
    then inserts it into the radix tree); eviction is modelled by LRU at MD's capacity.
    """

    def __init__(self, block_tokens: int, capacity_blocks: int) -> None:
        self.block_tokens = block_tokens
        self._cache = BlockPrefixCache(capacity_blocks)

    def confirm(self, token_ids: Sequence[int]) -> None:
        self._cache.insert(block_hashes(token_ids, self.block_tokens))

    def match(self, token_ids: Sequence[int]) -> int:
        hashes = block_hashes(token_ids, self.block_tokens)
        return self._cache.match(hashes) * self.block_tokens


class MainSite:
    """One Main-Decode as the router sees it."""

    def __init__(
        self,
        endpoint: MainEndpoint,
        link: LinkModelConfig,
        block_tokens: int,
        capacity_blocks: int,
        control_timeout_s: float = 5.0,
        curve=None,
        ledger: LedgerClient | None = None,
    ) -> None:
        """``ledger``: the transfer ledger shared with other routers (``--transfer-ledger``)."""
        self.endpoint = endpoint
        self.url = endpoint.url
        self.control = MainControlClient(
            endpoint.control, endpoint.url, int(control_timeout_s * 1000), curve=curve
        )
        self.transfers = MainTransfers(LiveLinkModel(link), block_tokens)
        self.ledger = ledger
        if ledger is not None:
            self.transfers.on_forget = self._drop_shared
            self.transfers.link.others_bytes = lambda: ledger.others_bytes(endpoint.url)
            self.transfers.link.measured_bytes = ledger.sending_bytes
        self.subscriber: KvEventSubscriber | None = None
        if endpoint.kv_events:
            self.subscriber = KvEventSubscriber(endpoint.kv_events, KvEventCacheView())
            self.mirror = None
        else:
            self.mirror = LandedPrefixMirror(block_tokens, capacity_blocks)
        self.active = 0  # router requests currently decoding (or parked) here
        self.block_tokens = block_tokens
        # Prompts MD just reported in its tree (its "ready" event: MD inserts a landed prompt at
        # once) or just ended with: the KV events saying so cross the WAN on another connection
        # and may come after the client's next turn. Held for RECENT_S, then the events rule.
        self._recent: deque[tuple[float, list[int]]] = deque()
        self._clears_seen = 0
        self.control.listeners.append(self._on_event)

    def start(self, counting_failures_of=None) -> None:
        """Start the control reader and KV-event subscriber; ``counting_failures_of(task)``
        gives each supervised loop its ``on_failure`` (the router's metrics)."""
        self.control.start(counting_failures_of)
        if self.subscriber is not None:
            self.subscriber.start(counting_failures_of)

    # -- the transfer ledger shared with other routers --------------------------------------
    async def claim_shared(self, transfer: MainTransfer, waited_s: float = 0.0) -> str | None:
        """Claim ``transfer``'s blocks on the shared ledger before its KV leaves: None (go
        ahead), or the rid of another router's transfer carrying part of them (``transfer``
        is then dropped here: wait with the ledger's ``wait_ended`` and plan again).

        ``waited_s``: how long this request has already waited on other routers' transfers.
        Past ``SHARED_WAIT_LIMIT_S`` it goes unclaimed: a router that died holding a claim
        delays others by that bound, not by the ledger's claim TTL."""
        if self.ledger is None or transfer.state != SENDING or transfer.shared:
            return None
        if not transfer.blocks and not transfer.nbytes:
            return None  # nothing crosses: MD holds the whole prompt
        if waited_s >= SHARED_WAIT_LIMIT_S:
            self.ledger.stats["overdue"] += 1
            logger.warning(
                "sglang-pdd router: %s waited %.0f s on other routers' transfers to %s; "
                "sending it unclaimed",
                transfer.rid,
                waited_s,
                self.url,
            )
            return None
        transfer.shared = True  # from here its drop reaches the ledger, after the claim
        answer = await self.ledger.claim(self.url, transfer.rid, transfer.blocks, transfer.nbytes)
        if not isinstance(answer, Busy):
            return None
        self.transfers.drop(transfer)
        return answer.holder

    def _drop_shared(self, transfer: MainTransfer) -> None:
        if transfer.shared:
            self.ledger.drop(transfer.rid)

    async def close(self) -> None:
        await self.control.close()
        if self.subscriber is not None:
            await self.subscriber.close()

    def cached_tokens(self, token_ids: Sequence[int], hashes: list[int] | None = None) -> int:
        """Leading prompt tokens whose KV Main-Decode holds in its radix cache."""
        if self.subscriber is not None:
            view = self.subscriber.view
            if view.clears != self._clears_seen:  # MD flushed: what it reported is gone too
                self._clears_seen = view.clears
                self._recent.clear()
            held = view.match(token_ids)
        else:
            held = self.mirror.match(token_ids)
        if self._recent:
            if hashes is None:
                hashes = block_hashes(token_ids, self.block_tokens)
            held = max(held, self._recent_blocks(hashes) * self.block_tokens)
        return min(held, len(token_ids))

    def _recent_blocks(self, hashes: list[int]) -> int:
        cutoff = time.monotonic() - RECENT_S
        while self._recent and self._recent[0][0] < cutoff:
            self._recent.popleft()
        return max((common_prefix_blocks(known, hashes) for _, known in self._recent), default=0)

    def _note_recent(self, hashes: list[int]) -> None:
        if hashes:
            self._recent.append((time.monotonic(), hashes))
            if len(self._recent) > RECENT_MAX:
                self._recent.popleft()

    def confirm_cached(self, token_ids: Sequence[int]) -> None:
        """Main-Decode's request for ``token_ids`` ended with its KV in place (inserted)."""
        if self.mirror is not None:
            self.mirror.confirm(token_ids)
        self._note_recent(block_hashes(token_ids, self.block_tokens))

    def _on_event(self, event: Event) -> None:
        if not isinstance(event, Ready):
            return
        # MD stamps the event when the KV was in place; the router learns it one trip later.
        now = time.monotonic()
        if event.t is not None:
            now -= max(time.time() - event.t, 0.0)
        self._note_recent(self.transfers.hashes_of(event.rid))
        self.transfers.landed(event.rid, event.cached_tokens, event.kv_bytes, now)

    def view_tokens(self) -> int | None:
        """Tokens in the KV-event view of MD's cache (None without KV events)."""
        if self.subscriber is None:
            return None
        return self.subscriber.view.pages * (self.subscriber.view.page_size or 1)

    def describe(self) -> dict:
        """Live state for ``/get_server_info``."""
        t, link = self.transfers, self.transfers.link
        return {
            "active": self.active,
            "cache_view": "kv-events" if self.subscriber else "landed",
            "link_queued_bytes": link.queued_bytes,
            "link_in_flight": link.in_flight,
            "link_throughput_bytes_per_s": round(link.throughput_bytes_per_s, 1),
            "link_overhead_s": round(link.overhead_s, 4),
            "deferred_warms": t.queued_warms,
            "duplicate_transfers": t.stats.duplicate_transfers,
            "transfer_waits": t.stats.waited,
            "warms_dropped": t.stats.warms_dropped,
            "transfers_landed": t.stats.landed,
            "kv_event_batches": self.subscriber.batches if self.subscriber else None,
            "cache_view_tokens": self.view_tokens(),
        }
