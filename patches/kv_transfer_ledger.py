"""Count the KV bytes each Mooncake transfer moves, and pace WAN-bound ones on the link."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target=(
        "sglang.srt.distributed.device_communicators.mooncake_transfer_engine."
        "MooncakeTransferEngine.batch_transfer_sync"
    ),
    hook_type="around",
    why=(
        "Every Mooncake write of KV, state and aux data goes through this one method (the "
        "whole-page path via MooncakeKVManager._transfer_data, and the head-sliced path to a "
        "decode server of another TP size, send_kvcache_slice, directly); PDD needs the bytes "
        "that really crossed to each receiver, and the emulated WAN must delay those bound for "
        "Main-Decode's datacenter."
    ),
    how=(
        "Sum the block lengths into the process's TransferLedger; when the destination host is "
        "one of --pdd-wan-hosts, wait on the shared WanLink (serialization + one-way delay) "
        "before the real transfer; with --pdd-wan-fault-file, wait while the emulated link is "
        "stalled and return -1 (a failed write) while it is dropped. The WAN-bound bytes between "
        "entry and return are the bytes in hand that P's transfer ledger reports to routers."
    ),
    remove_when="SGLang exposes per-destination transfer metrics and a link-shaping hook.",
)


def applies() -> bool:
    return True


def hook(original, self, session_id, buffers, peer_buffer_addresses, lengths, *args, **kwargs):
    """Account, pace if WAN-bound, then transfer."""
    from sglang_pdd.transfer.ledger import ledger

    nbytes = sum(lengths) if lengths else 0
    if not ledger().before_transfer(session_id, nbytes):
        return -1  # what batch_transfer_sync returns for a failed write
    try:
        return original(self, session_id, buffers, peer_buffer_addresses, lengths, *args, **kwargs)
    finally:
        ledger().after_transfer(session_id, nbytes)  # the WAN's bytes in hand, as P measures
