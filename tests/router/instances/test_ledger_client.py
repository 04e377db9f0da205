"""Two routers' ledger clients against a real ledger socket: claim, wait, drop; and a ledger
that never answers holds nothing up."""

from __future__ import annotations

import asyncio

from sglang_pdd.prefill.ledger_service import LedgerService
from sglang_pdd.router.config import MainEndpoint
from sglang_pdd.router.instances import ledger_client, main_site
from sglang_pdd.router.instances.ledger_client import LedgerClient
from sglang_pdd.router.instances.main_site import MainSite
from sglang_pdd.router.metrics import RouterMetrics
from sglang_pdd.testbed.ports import free_port
from sglang_pdd.transfer.link_model import LinkModelConfig

LINK = LinkModelConfig(1e6, 0.01)


def _site(ledger: LedgerClient) -> MainSite:
    endpoint = MainEndpoint("http://127.0.0.2:1", "tcp://127.0.0.2:2")
    return MainSite(endpoint, LINK, block_tokens=4, capacity_blocks=64, ledger=ledger)


def test_a_second_router_waits_for_the_first_routers_transfer():
    port = free_port()
    service = LedgerService("127.0.0.1", port, ttl_s=60, sending=lambda: 0.0)
    service.start()

    async def run():
        a, b = LedgerClient(f"tcp://127.0.0.1:{port}"), LedgerClient(f"tcp://127.0.0.1:{port}")
        a.start(), b.start()
        site_a, site_b = _site(a), _site(b)
        try:
            ta = site_a.transfers.start("a1", [11, 12, 13], 0, 300.0)
            assert await site_a.claim_shared(ta) is None and ta.shared
            tb = site_b.transfers.start("b1", [11, 12, 14], 0, 300.0)
            assert await site_b.claim_shared(tb) == "a1"
            assert site_b.transfers.hashes_of("b1") == []  # dropped: it waits instead
            # B's link model now counts A's bytes as queued ahead.
            assert site_b.transfers.link.queued_bytes == 300.0
            waiter = asyncio.ensure_future(b.wait_ended("a1"))
            await asyncio.sleep(0)
            assert not waiter.done()
            site_a.transfers.landed("a1", cached_tokens=0, kv_bytes=300)  # drops the claim
            await asyncio.wait_for(waiter, 1.0)  # woken by Ended, not by its recheck timeout
            tb = site_b.transfers.start("b1", [11, 12, 14], 2, 100.0)
            assert await site_b.claim_shared(tb) is None
            assert (a.stats["granted"], b.stats["granted"], b.stats["busy"]) == (1, 1, 1)
            text = RouterMetrics({}, ledger=b).render().decode()
            assert 'sglang_pdd:ledger_claims_total{result="busy"} 1.0' in text
            assert b.stats["measured"] == 2 and "sglang_pdd:ledger_wan_sending_bytes 0.0" in text
            # Prefill's measurement is a floor under the queue: a large one shows through.
            b.sending = (5e6, b.sending[1])
            assert b.sending_bytes() == 5e6 and site_b.transfers.link.queued_bytes == 5e6
            b.sending = (5e6, b.sending[1] - ledger_client.SHARED_BYTES_FRESH_S)
            assert b.sending_bytes() is None  # stale: the routers' accounting alone
        finally:
            await a.close()
            await b.close()

    try:
        asyncio.run(run())
    finally:
        service.close()
    assert len(service.table) == 1  # b1's claim, still open: its KV never landed here


def test_a_ledger_that_never_answers_lets_the_transfer_go(monkeypatch):
    monkeypatch.setattr(ledger_client, "CLAIM_TIMEOUT_S", 0.05)

    async def run():
        silent = LedgerClient(f"tcp://127.0.0.1:{free_port()}")  # nothing listens there
        silent.start()
        try:
            site = _site(silent)
            t = site.transfers.start("r1", [1, 2], 0, 10.0)
            assert await silent.claim("http://md", "r1", [1, 2], 10.0) is None

            # Taken as down for a while: the next claim does not ask (and wait) again.
            async def must_not_ask(*_args):
                raise AssertionError("asked a ledger taken as down")

            silent._ask = must_not_ask
            assert await site.claim_shared(t) is None
            assert silent.stats["unanswered"] == 2
        finally:
            await silent.close()

    asyncio.run(run())


def test_a_claim_held_past_the_wait_limit_is_sent_unclaimed():
    """A router that died holding a claim delays the others by ``SHARED_WAIT_LIMIT_S``, not by
    the ledger's TTL: a request that has waited that long sends its KV without claiming."""
    port = free_port()
    service = LedgerService("127.0.0.1", port, ttl_s=600)
    service.start()

    async def run():
        dead, live = (
            LedgerClient(f"tcp://127.0.0.1:{port}"),
            LedgerClient(f"tcp://127.0.0.1:{port}"),
        )
        dead.start(), live.start()
        site_dead, site_live = _site(dead), _site(live)
        try:
            held = site_dead.transfers.start("d1", [21, 22], 0, 200.0)
            assert await site_dead.claim_shared(held) is None  # never dropped: its router died
            t = site_live.transfers.start("l1", [21, 22], 0, 200.0)
            assert await site_live.claim_shared(t, waited_s=1.0) == "d1"
            limit = main_site.SHARED_WAIT_LIMIT_S
            t = site_live.transfers.start("l1", [21, 22], 0, 200.0)
            assert await site_live.claim_shared(t, waited_s=limit) is None
            assert not t.shared  # unclaimed: its drop does not reach the ledger
            assert site_live.transfers.hashes_of("l1") == [21, 22]  # it goes
            assert (live.stats["busy"], live.stats["overdue"]) == (1, 1)
            text = RouterMetrics({}, ledger=live).render().decode()
            assert 'sglang_pdd:ledger_claims_total{result="overdue"} 1.0' in text
        finally:
            await dead.close()
            await live.close()

    try:
        asyncio.run(run())
    finally:
        service.close()
