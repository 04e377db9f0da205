"""Keep Prefill's KV sends across the WAN out of the transfer queues that serve its datacenter.

SGLang's Mooncake sender has a few transfer queues, one worker each, and picks a queue by the
sum of the receivers' ports. A send to Main-Decode across the WAN holds its worker for the whole
transfer, so a send to Relay-Decode that lands on the same queue waits behind it. PDD needs
RLD's path never to wait for the WAN: WAN-bound sends get the second half of the queues and all
others the first half; within each half SGLang's own choice stands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sglang_pdd.transfer.ledger import session_host


def is_wan_bound(receiver_sessions: Iterable[str], wan_hosts: Iterable[str]) -> bool:
    """Whether any receiver (Mooncake session ``host:port``) is one of ``wan_hosts``."""
    hosts = set(wan_hosts)
    return any(session_host(session) in hosts for session in receiver_sessions)


def queues_for(queues: Sequence, wan: bool) -> list:
    """The queues a send may use: the second half when ``wan``, else the first half.

    With fewer than two queues there is nothing to split and every queue is returned.
    """
    if len(queues) < 2:
        return list(queues)
    half = len(queues) // 2
    return list(queues[half:] if wan else queues[:half])
