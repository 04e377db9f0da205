"""``RequestRecord``: what sglang-pdd keeps per request, on SGLang's ``Req`` as ``req._pdd``.

SGLang builds its ``Req`` objects; the plugin's few fields per request ride on each in one
typed record, not as loose attributes each read with its own default. ``request_record``
attaches the record the first time the plugin asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RequestRecord:
    """sglang-pdd's fields of one request, empty until the plugin sets them."""

    # Main-Decode: its arrival (the KV landed) was handled: parked or left to decode, once.
    arrived_on_main: bool = False
    # Main-Decode: handed-off ids whose KV is built (the ids of the last handoff extended).
    extended_ids: int = 0
    # Main-Decode: handed-off ids the request's grammar has accepted.
    grammar_ids: int = 0
    # Seeded sampling: the seed drawn once for a request without its own sampling_seed.
    seed: int | None = None


def request_record(req) -> RequestRecord:
    """``req``'s record, attached on first use."""
    try:
        return req._pdd
    except AttributeError:  # not on SGLang's Req until the plugin first asks
        record = req._pdd = RequestRecord()
        return record
