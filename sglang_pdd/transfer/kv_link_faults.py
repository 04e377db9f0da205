"""Faults on the emulated WAN that KV crosses inside Prefill: stall and drop, set from outside.

KV does not cross a ``wan-link`` proxy: Prefill paces its own WAN-bound Mooncake writes
(``transfer/ledger.py``). With ``--pdd-wan-fault-file PATH`` each of those writes first reads
the link's state from PATH, so a test, the soak benchmark or an operator rehearsing a failure can
cut the link in the middle of a transfer:

* ``up`` (or no file): writes go through;
* ``stall``: a write waits until the state changes (the transfer hangs, as on a silent link),
  also one already crossing the paced link, whose arrival moves back by the stall's length;
* ``drop``: a write, also one already crossing, fails as Mooncake reports a broken connection,
  and SGLang then fails the request's transfer and blacklists the receiver's session until its
  own probe succeeds.

``set_link_state`` writes the file atomically.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

logger = logging.getLogger("sglang_pdd")

STATES = ("up", "stall", "drop")


def set_link_state(path: str | os.PathLike, state: str) -> None:
    """Put the emulated KV link at ``path`` into ``state`` (one of ``STATES``)."""
    if state not in STATES:
        raise ValueError(f"link state {state!r}: accepted values are {', '.join(STATES)}")
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(state + "\n")
    os.replace(tmp, target)  # readers never see a half-written state


class KvLinkFaults:
    """Reads the link state from a file before each WAN-bound write."""

    def __init__(self, path: str, poll_s: float = 0.05) -> None:
        self.path, self.poll_s = Path(path), poll_s
        self._bad: str | None = None  # last unreadable content, logged once

    def state(self) -> str:
        """The state in the file; ``up`` when there is none. Unknown content counts as ``up``
        and is logged (once per distinct content), so a typo cannot pass unnoticed."""
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return "up"
        if text in STATES:
            return text
        if text != self._bad:
            self._bad = text
            logger.error(
                "sglang-pdd: %s holds %r, not one of %s: the link stays up",
                self.path,
                text,
                ", ".join(STATES),
            )
        return "up"

    def admit(self) -> bool:
        """Wait while the link is stalled; False when it is dropped (the write must fail)."""
        stalled_since = None
        while (state := self.state()) == "stall":
            if stalled_since is None:
                stalled_since = time.monotonic()
                logger.warning("sglang-pdd: emulated WAN stalled (%s): KV writes wait", self.path)
            time.sleep(self.poll_s)
        if stalled_since is not None:
            logger.warning(
                "sglang-pdd: emulated WAN %s after a %.1f s stall",
                state,
                time.monotonic() - stalled_since,
            )
        return state != "drop"

    def wait_until(self, arrival: float) -> bool:
        """Sleep until monotonic time ``arrival`` (a paced write reaching the far end). A stall
        meanwhile holds the write and pushes its arrival back by the stall's length; False as
        soon as the link is dropped (the write fails midway)."""
        while True:
            state = self.state()
            if state == "drop":
                return False
            if state == "stall":
                since = time.monotonic()
                if not self.admit():
                    return False
                arrival += time.monotonic() - since
                continue
            left = arrival - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, self.poll_s))
