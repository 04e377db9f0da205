"""Give WAN-bound KV sends their own Mooncake transfer queues, so RLD's never wait behind them."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.disaggregation.mooncake.conn.MooncakeKVManager.add_transfer_request",
    hook_type="around",
    why=(
        "SGLang picks Prefill's transfer queue (one worker each) by the sum of the receivers' "
        "ports, so a slow send across the WAN to Main-Decode can share a queue with a send to "
        "Relay-Decode in the same datacenter, which then waits for the whole WAN transfer. PDD "
        "needs Relay-Decode's path never to wait for the WAN."
    ),
    how=(
        "On a Prefill with --pdd-wan-hosts and at least two transfer queues: while SGLang picks "
        "the queue for a send, self.transfer_queues shows only the second half of the queues "
        "when a receiver of the request is a WAN host, and only the first half otherwise "
        "(sglang_pdd.transfer.queue_split). The swap happens on the scheduler thread, the only "
        "caller; the workers hold their own queue objects."
    ),
    remove_when="SGLang chooses transfer queues per destination class or lets a plugin do so.",
)


def applies() -> bool:
    return True


def hook(original, self, bootstrap_room, *args, **kwargs):
    """Pick the queue half for this send, let SGLang pick within it, restore the full list."""
    from sglang_pdd import config as pdd_config
    from sglang_pdd.transfer.queue_split import is_wan_bound, queues_for

    queues = self.transfer_queues
    receivers = self.transfer_infos.get(bootstrap_room)
    wan_hosts = pdd_config.current().wan_hosts
    if not wan_hosts or not queues or len(queues) < 2 or not receivers:
        return original(self, bootstrap_room, *args, **kwargs)
    self.transfer_queues = queues_for(queues, is_wan_bound(receivers.keys(), wan_hosts))
    try:
        return original(self, bootstrap_room, *args, **kwargs)
    finally:
        self.transfer_queues = queues
