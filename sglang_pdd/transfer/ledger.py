"""``TransferLedger``: KV bytes sent per destination by this process, with WAN pacing."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

from sglang_pdd import config as pdd_config
from sglang_pdd.transfer.kv_link_faults import KvLinkFaults
from sglang_pdd.transfer.wan_link import WanLink, WanLinkConfig

logger = logging.getLogger("sglang_pdd")


def session_host(session_id: str) -> str:
    """The host part of a Mooncake session id (``host:port``, IPv6 in brackets)."""
    host = session_id.rsplit(":", 1)[0] if ":" in session_id else session_id
    return host.strip("[]")


class TransferLedger:
    """Bytes per destination session; routes WAN-bound transfers through one ``WanLink``;
    measures the WAN-bound bytes in hand (``wan_sending_bytes``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes_by_session: dict[str, int] = defaultdict(int)
        # WAN-bound bytes between before_transfer and after_transfer: waiting for the link or
        # on it, as charged (the emulated model's with an emulated chip). What the routers'
        # shared ledger reports as the WAN's queue (prefill/), in the routers' own units.
        self._wan_in_hand = 0
        self._link: WanLink | None = None
        self._link_config = None
        self._faults: KvLinkFaults | None = None
        # An emulated chip (--pdd-emulate-chip): links are charged the emulated model's KV
        # (real bytes x kv_scale), and writes within the datacenter cross a local link.
        self.kv_scale = 1.0
        self._local: WanLink | None = None
        self.model_bytes_by_session: dict[str, int] = defaultdict(int)

    def set_emulation(self, *, kv_scale: float, local_bytes_per_s: float) -> None:
        """Charge every write ``kv_scale`` times its bytes (the emulated model's KV), and pace
        writes to receivers not across the WAN on an intra-datacenter link of this speed."""
        with self._lock:
            self.kv_scale = kv_scale
            self._local = WanLink(
                WanLinkConfig(bandwidth_mbps=local_bytes_per_s * 8 / 1e6, one_way_delay_ms=0.0)
            )

    def _wan_link(self) -> WanLink | None:
        cfg = pdd_config.current()
        if cfg.wan is None:
            return None
        with self._lock:
            if self._link is None or self._link_config != cfg.wan:
                self._link, self._link_config = WanLink(cfg.wan), cfg.wan
            return self._link

    def _link_faults(self, path: str) -> KvLinkFaults:
        with self._lock:
            if self._faults is None or str(self._faults.path) != path:
                self._faults = KvLinkFaults(path)
            return self._faults

    def wan_sending_bytes(self) -> int:
        """Bytes of WAN-bound writes (to ``--pdd-wan-hosts``) this process has in hand now:
        entered ``before_transfer``, not yet through ``after_transfer``; with an emulated chip,
        the emulated model's bytes (``kv_scale`` times the real ones)."""
        with self._lock:
            return self._wan_in_hand

    def _is_wan(self, session_id: str) -> bool:
        return session_host(session_id) in pdd_config.current().wan_hosts

    def after_transfer(self, session_id: str, nbytes: int) -> None:
        """The write that ``before_transfer`` let through has returned (done or failed)."""
        if self._is_wan(session_id):
            with self._lock:
                self._wan_in_hand -= round(nbytes * self.kv_scale)

    def before_transfer(self, session_id: str, nbytes: int) -> bool:
        """Record ``nbytes`` to ``session_id``; block for the WAN if it is WAN-bound. False:
        the emulated WAN is dropped (``--pdd-wan-fault-file``) and the write must fail. A
        True answer must be followed by ``after_transfer`` once the write returns."""
        cfg = pdd_config.current()
        wan = self._is_wan(session_id)
        charged = round(nbytes * self.kv_scale)
        with self._lock:
            self.bytes_by_session[session_id] += nbytes
            self.model_bytes_by_session[session_id] += charged
            total = self.bytes_by_session[session_id]
            if wan:
                self._wan_in_hand += charged
        try:
            ok, waited = self._pace(cfg, wan, charged)
        except BaseException:
            self.after_transfer(session_id, nbytes)
            raise
        if not ok:
            self.after_transfer(session_id, nbytes)
            logger.warning(
                "sglang-pdd: kv-transfer to=%s bytes=%d failed after %.1f s: the "
                "emulated WAN is dropped (%s)",
                session_id,
                nbytes,
                waited,
                cfg.wan_fault_file,
            )
            return False
        if cfg.log_transfers:
            logger.info(
                "sglang-pdd: kv-transfer to=%s bytes=%d total=%d model_bytes=%d wan=%s "
                "waited_s=%.3f",
                session_id,
                nbytes,
                total,
                charged,
                wan,
                waited,
            )
        return True

    def _pace(self, cfg, wan: bool, nbytes: int) -> tuple[bool, float]:
        """Wait for the emulated WAN or, for an emulated chip's local writes, the local link:
        (may the write go, seconds waited)."""
        faults = self._link_faults(cfg.wan_fault_file) if wan and cfg.wan_fault_file else None
        link = (self._wan_link() if wan else self._local) if nbytes else None
        start = time.monotonic()
        if link is not None and faults is None:
            link.transmit(nbytes)
            ok = True
        elif link is not None:
            ok = faults.wait_until(link.reserve(nbytes))
        else:
            ok = faults is None or faults.admit()
        return ok, time.monotonic() - start


_ledger = TransferLedger()


def ledger() -> TransferLedger:
    """This process's ledger."""
    return _ledger
