"""``MainTransfers``: the KV transfers to one Main-Decode, tracked per prefix.

Three rules keep the WAN from carrying a prefix twice at once and keep serving traffic ahead of
cache warming:

* every transfer the router starts is registered with the prompt blocks MD lacks, until MD
  reports its KV landed (the ``ready`` event);
* a request whose prompt extends a prefix that is still on the link waits for that transfer
  (``dependency``), then lets MD ask for what is still missing;
* a *warming* transfer (the KV of a request already answered by Relay-Decode, sent so that MD's
  cache keeps up with P's) is deferred while any serving transfer is on this link; a request
  that needs a deferred warm's prompt either carries it itself (the warm's prompt is a prefix of
  its own: the warm is dropped) or promotes it.

Blocks are the router's chained hashes (``block_hashes``), so a block id names its whole prefix.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang_pdd.cache.prefix_blocks import common_prefix_blocks
from sglang_pdd.transfer.link_model import LinkObservation, LiveLinkModel

DEFERRED, SENDING, LANDED, DROPPED = "deferred", "sending", "landed", "dropped"
# Deferred warms kept per Main-Decode. A link busy with serving transfers for good would
# otherwise queue one per relayed request without end; past this the oldest is dropped (MD's
# cache only misses that warm: a later turn of its session sends what it lacks).
MAX_DEFERRED_WARMS = 1024


@dataclass(eq=False)
class MainTransfer:
    """One prompt's KV on its way to Main-Decode."""

    rid: str  # Main-Decode's rid for it
    hashes: list[int]  # the prompt's full blocks
    first_block: int  # first block MD is expected to lack
    nbytes: float
    warming: bool
    learn: bool = True  # its dispatch-to-landing time measures the link alone
    prompt_tokens: int = 0  # the prompt's length, and the router's KV bytes per token: what
    token_bytes: float = 0.0  # crossed, in the router's units, once MD says what it had
    shared: bool = False  # claimed on the shared transfer ledger (dropped there when forgotten)
    state: str = SENDING
    off_link: asyncio.Event = field(default_factory=asyncio.Event)  # landed, dropped or failed
    dispatch: asyncio.Event = field(default_factory=asyncio.Event)  # a deferred warm may go
    seq: int = 0

    @property
    def blocks(self) -> list[int]:
        return self.hashes[self.first_block :]


@dataclass
class TransferStats:
    """Counters the router exports (``/metrics``, ``/get_server_info``)."""

    started: int = 0
    landed: int = 0
    waited: int = 0  # requests that waited for a prefix already on the link
    warms_deferred: int = 0
    warms_dropped: int = 0  # deferred warms carried by a later request, or past the cap
    duplicate_transfers: int = 0  # transfers that carried blocks another one was carrying
    duplicate_blocks: int = 0
    last_error_s: float = 0.0
    observations: list[LinkObservation] = field(default_factory=list)


class MainTransfers:
    """Transfers in flight (and deferred warms) to one Main-Decode, over one ``LiveLinkModel``."""

    def __init__(self, link: LiveLinkModel, block_tokens: int) -> None:
        self.link = link
        self.block_tokens = block_tokens
        self._by_rid: dict[str, MainTransfer] = {}
        self._holders: dict[int, set[MainTransfer]] = {}  # block -> transfers carrying it
        self._warm_queue: list[MainTransfer] = []
        self._seq = itertools.count()
        self.stats = TransferStats()
        # Called with each transfer as it is forgotten (landed, dropped, failed).
        self.on_forget: Callable[[MainTransfer], None] | None = None

    # -- queries --------------------------------------------------------------------------
    def dependency(self, hashes: list[int], cached_blocks: int) -> MainTransfer | None:
        """The transfer on (or queued for) the link carrying the deepest block of ``hashes``
        beyond what MD holds, if any."""
        for k in range(len(hashes) - 1, cached_blocks - 1, -1):
            holders = self._holders.get(hashes[k])
            if holders:
                return min(holders, key=lambda t: t.seq)
        return None

    def plan(
        self, hashes: list[int], cached: int, prompt_tokens: int
    ) -> tuple[int, MainTransfer | None, bool, float]:
        """How a prompt of ``hashes`` (``cached`` tokens of it in MD's cache) would depend on
        the transfers here: ``(covered, dependency, carries_dependency, extra_backlog)``, the
        fields of ``state.MainPlan`` of the same names."""
        dep = self.dependency(hashes, cached // self.block_tokens)
        covered, extra_backlog, carries = cached, 0.0, False
        if dep is not None:
            common = common_prefix_blocks(dep.hashes, hashes)
            if dep.state == DEFERRED and common == len(dep.hashes):
                carries = True  # this request's transfer carries the warm's prompt itself
            else:
                covered = max(cached, min(common * self.block_tokens, prompt_tokens))
                if dep.state == DEFERRED:
                    extra_backlog = dep.nbytes  # promoted ahead of this request's own KV
        return covered, dep, carries, extra_backlog

    def hashes_of(self, rid: str) -> list[int]:
        """The prompt blocks of ``rid``'s registered transfer (empty when none)."""
        t = self._by_rid.get(rid)
        return t.hashes if t is not None else []

    def serving_on_link(self) -> int:
        return sum(1 for t in self._by_rid.values() if t.state == SENDING and not t.warming)

    @property
    def queued_warms(self) -> int:
        return len(self._warm_queue)

    # -- lifecycle ------------------------------------------------------------------------
    def _index(self, t: MainTransfer, add: bool) -> None:
        for block in t.blocks:
            holders = self._holders.setdefault(block, set())
            if add:
                holders.add(t)
            else:
                holders.discard(t)
                if not holders:
                    del self._holders[block]

    def start(
        self,
        rid: str,
        hashes: list[int],
        cached_blocks: int,
        nbytes: float,
        *,
        warming: bool = False,
        learn: bool = True,
        now: float | None = None,
        prompt_tokens: int = 0,
        token_bytes: float = 0.0,
    ) -> MainTransfer:
        """Register a transfer dispatched now (or, for ``warming``, queued until the link has
        no serving transfer). ``learn``: see ``LiveLinkModel.finish``. ``prompt_tokens`` and
        ``token_bytes`` (the router's KV bytes per token): what crossed is then counted in the
        router's units when it lands, whatever unit MD reports its bytes in."""
        if rid in self._by_rid:
            raise ValueError(f"transfer for {rid} already registered")
        t = MainTransfer(
            rid,
            list(hashes),
            min(cached_blocks, len(hashes)),
            float(nbytes),
            warming,
            learn,
            prompt_tokens=prompt_tokens,
            token_bytes=token_bytes,
            seq=next(self._seq),
        )
        self._by_rid[rid] = t
        self._index(t, add=True)
        if warming:
            if len(self._warm_queue) >= MAX_DEFERRED_WARMS:
                self.drop(self._warm_queue[0])
            t.state = DEFERRED
            self._warm_queue.append(t)
            self.stats.warms_deferred += 1
            self.pump(now)
        else:
            self._on_link(t, now)
        return t

    def _on_link(self, t: MainTransfer, now: float | None) -> None:
        t.state = SENDING
        t.dispatch.set()
        self.stats.started += 1
        self.link.start(t.rid, t.nbytes, time.monotonic() if now is None else now)

    def pump(self, now: float | None = None) -> None:
        """Let the oldest deferred warm onto the link when no serving transfer is on it."""
        while self._warm_queue and self.serving_on_link() == 0:
            if any(t.state == SENDING and t.warming for t in self._by_rid.values()):
                return  # one warm at a time: a serving request may arrive behind it
            self._on_link(self._warm_queue.pop(0), now)

    def promote(self, t: MainTransfer, now: float | None = None) -> None:
        """A serving request needs this deferred warm: send it now."""
        if t.state == DEFERRED:
            self._warm_queue.remove(t)
            t.warming = False
            self._on_link(t, now)

    def drop(self, t: MainTransfer) -> None:
        """Forget a transfer that will not happen (superseded warm) or failed."""
        if self._by_rid.get(t.rid) is not t:
            return
        if t.state == DEFERRED:
            self._warm_queue.remove(t)
            self.stats.warms_dropped += 1
        elif t.state == SENDING:
            self.link.cancel(t.rid)
        self._forget(t, DROPPED)
        self.pump()

    def restart_clock(self, rid: str, now: float | None = None) -> None:
        """What delayed ``rid``'s transfer after dispatch (P's prefill) is over: learn from now."""
        if (t := self._by_rid.get(rid)) is not None and t.state == SENDING:
            t.learn = True
            self.link.restart(rid, time.monotonic() if now is None else now)

    def mark_warming(self, rid: str) -> None:
        """The transfer's request was answered by Relay-Decode: it now only warms MD's cache."""
        if (t := self._by_rid.get(rid)) is not None:
            t.warming = True

    def _forget(self, t: MainTransfer, state: str, indexed: bool = True) -> None:
        del self._by_rid[t.rid]
        if indexed:
            self._index(t, add=False)
        t.state = state
        t.dispatch.set()
        t.off_link.set()
        if self.on_forget is not None:
            self.on_forget(t)

    def landed(
        self, rid: str, cached_tokens: int | None, kv_bytes: int | None, now: float | None = None
    ) -> LinkObservation | None:
        """MD reported ``rid``'s KV in place (its ``ready`` event)."""
        t = self._by_rid.get(rid)
        if t is None or t.state != SENDING:
            return None
        now = time.monotonic() if now is None else now
        self._index(t, add=False)
        if cached_tokens is not None:
            t.first_block = min(int(cached_tokens) // self.block_tokens, len(t.hashes))
        overlap = sum(
            1 for block in t.blocks if any(o.state == SENDING for o in self._holders.get(block, ()))
        )
        if overlap:
            self.stats.duplicate_transfers += 1
            self.stats.duplicate_blocks += overlap
        # The link model learns in the router's units (--kv-bytes-per-token): MD's own count
        # is in its pool's bytes, which differ for an emulated model or another KV layout.
        crossed = kv_bytes
        if cached_tokens is not None and t.token_bytes:
            crossed = max(t.prompt_tokens - int(cached_tokens), 0) * t.token_bytes
        obs = self.link.finish(rid, now, crossed, learn=t.learn)
        self._forget(t, LANDED, indexed=False)
        self.stats.landed += 1
        if obs is not None and t.learn:
            self.stats.last_error_s = obs.error_s
            self.stats.observations.append(obs)
            del self.stats.observations[:-256]
        self.pump(now)
        return obs
