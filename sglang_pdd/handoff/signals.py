"""Inputs to ``HandoffCore`` and the actions it returns (no I/O: the router's loop does it).

Inputs are what the router saw: a chunk of RLD's stream, its end, MD's first chunk after the
final handoff, one of MD's control events (``wire.messages``: ``Ready``, ``Extended``,
``Deferred``, ``Error``), MD becoming unusable, and a ``Tick`` after each batch of inputs with
the time and RLD's live load. Actions are what the loop must do, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sglang_pdd.wire.messages import Ready

if TYPE_CHECKING:  # the router's typed /generate chunks; the core only reads their ids
    from sglang_pdd.router.upstream.chunks import ChunkMeta, GenerateChunk


# -- inputs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RelayChunk:
    """One chunk of RLD's stream: every id it generated so far (SGLang's cumulative
    ``output_ids``), its ``meta_info``, and SGLang's finish reason once it finished."""

    output_ids: list[int]
    meta: ChunkMeta | None = None
    finish_reason: dict | None = None


@dataclass(frozen=True)
class RelayEnded:
    """RLD's stream failed or ended without a finish reason. ``prefill_error``: P's own error
    when P's sub-request failed (P validates the prompt, so the client must see that one)."""

    error: Exception
    prefill_error: BaseException | None = None


@dataclass(frozen=True)
class MainChunk:
    """A chunk of MD's stream after the final handoff (hold: its answer, maybe before its
    ``Extended`` event; overlap: every one until the client switches)."""

    chunk: GenerateChunk


@dataclass(frozen=True)
class MainLost:
    """MD cannot take the request: its stream failed before it answered the final handoff,
    its control socket took nothing, or it is draining."""

    reason: str


@dataclass(frozen=True)
class Tick:
    """A batch of inputs was fed: decide what to send MD (``now``: monotonic seconds).

    ``relay_itl_s``: RLD's seconds per id for this request so far; ``handoff_gap_s``: what a
    final handoff costs the client (the router's estimate). With both, a request whose
    remaining ids RLD makes sooner than that gap finishes on RLD. ``main_itl_s``: MD's seconds
    per id as the router has seen them (None: not yet), its pace before this request's own
    can be measured."""

    now: float
    relay_load: float
    relay_itl_s: float | None = None
    handoff_gap_s: float | None = None
    main_itl_s: float | None = None


# -- actions --------------------------------------------------------------------------------
@dataclass(frozen=True)
class EmitRelayIds:
    """Send the client RLD's ``token_ids`` (new since the last emit); ``first``: RLD's first."""

    token_ids: list[int]
    meta: ChunkMeta | None
    first: bool


@dataclass(frozen=True)
class NoteReady:
    """MD reported the prompt's KV in place (record it; the first one counts)."""

    event: Ready


@dataclass(frozen=True)
class SendToMain:
    """Send MD a ``Handoff`` of ``token_ids`` (``final``: RLD stops once MD took it)."""

    token_ids: list[int]
    final: bool
    mode: str | None  # the mode in force at the first step ("auto" resolved)
    chunks: int  # handoff messages sent so far, this one included


@dataclass(frozen=True)
class RetryLater:
    """MD deferred the final handoff (no KV room): the held ids went to the client; the
    handoff is made again later. ``deferrals``: how many so far."""

    message: str
    deferrals: int


@dataclass(frozen=True)
class ResendLostHandoff:
    """A final handoff was lost in a control reconnect: it will be made again."""


@dataclass(frozen=True)
class StayOnRelay:
    """MD will not take the request: RLD, still serving it, finishes it."""

    reason: str


@dataclass(frozen=True)
class KeepOnRelay:
    """RLD finishes the request sooner than a handoff would let MD: no handoff is made."""

    reason: str


@dataclass(frozen=True)
class TakeOverFromLostRelay:
    """RLD failed while MD holds the KV: MD takes every id the client has at once."""

    error: Exception


@dataclass(frozen=True)
class FinishOnRelay:
    """RLD finished the request first: release it on MD (abort it there when
    ``main_running``: MD took an overlapped final handoff) and end the client's stream."""

    finish_reason: dict
    main_running: bool = False


@dataclass(frozen=True)
class AbandonMain:
    """Overlap: MD, which took the final handoff, cannot serve the client (its ids differ from
    RLD's, it failed or it erred): abort it there; RLD, still streaming, finishes."""

    reason: str


@dataclass(frozen=True)
class FollowMain:
    """MD took the final handoff: abort RLD and stream MD's ids past ``relay_ids``.
    ``early``: MD's chunks already read; ``dropped_ids``: RLD ids held back, never sent."""

    relay_ids: list[int]
    early: list[GenerateChunk]
    dropped_ids: int


@dataclass(frozen=True)
class Fail:
    """The request cannot go on here: raise ``error`` (the router migrates or answers it)."""

    error: BaseException


Input = RelayChunk | RelayEnded | MainChunk | MainLost | Tick
Action = (
    EmitRelayIds
    | NoteReady
    | SendToMain
    | RetryLater
    | ResendLostHandoff
    | StayOnRelay
    | KeepOnRelay
    | TakeOverFromLostRelay
    | FinishOnRelay
    | AbandonMain
    | FollowMain
    | Fail
)
