"""Prefill: one prompt feeding two receivers (Relay-Decode and Main-Decode) without two prefills.

For P-RLD-MD the router posts the prompt to P twice, at once: room 1 (rid suffix ``.p1``, for
Relay-Decode) and room 2 (``.p2``, for Main-Decode). Sending both at once lets Main-Decode's
bootstrap and prefix match run during P's prefill, so MD's KV leaves as soon as the prefill
ends. P must not prefill the prompt twice, so it holds a ``.p2`` request while its ``.p1`` twin
is still waiting or being prefilled; once the twin's KV is in P's radix cache, ``.p2`` is a
prefix hit that computes one token (``patches/prefill_twin_hold.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from sglang_pdd.wire.rids import MAIN_PREFILL_SUFFIX, RELAY_PREFILL_SUFFIX, twin_of

__all__ = ["MAIN_PREFILL_SUFFIX", "RELAY_PREFILL_SUFFIX", "split_held", "twin_of"]


def split_held(waiting: Iterable, pending_rids: set[str]) -> tuple[list, list]:
    """Split a waiting queue into (schedulable, held): a room-2 request is held while its twin's
    rid is in ``pending_rids`` (not yet prefilled)."""
    ready, held = [], []
    for req in waiting:
        twin = twin_of(req.rid)
        (held if twin is not None and twin in pending_rids else ready).append(req)
    return ready, held
