"""Calls from the router to SGLang servers: plain JSON posts and SSE streams."""

from __future__ import annotations

import json
import logging

import aiohttp
import msgspec
import orjson

from sglang_pdd.router.upstream.chunks import (
    DECODER,
    GenerateChunk,
    PrefillAnswer,
)

logger = logging.getLogger("sglang_pdd.router")


class UpstreamError(Exception):
    """An SGLang server answered with an error; carries its status and body for the client.
    ``instance``: the URL of an instance that failed or went silent (the request may continue
    elsewhere), None when the answer is about the request itself."""

    def __init__(
        self, status: int, body: dict, instance: str | None = None, headers: dict | None = None
    ) -> None:
        super().__init__(f"upstream answered {status}: {body}")
        self.status = status
        self.body = body
        self.instance = instance
        self.headers = headers  # for the client's answer (Retry-After on a 503 at capacity)


async def _error_body(resp: aiohttp.ClientResponse) -> dict:
    return error_body(resp.status, await resp.text())


def error_body(status: int, text: str) -> dict:
    """An instance's error answer in the router's shape, ``{"error": {"message", "code"}}``,
    whatever shape SGLang used (``{"error": {...}}``, ``{"error": "..."}``, its OpenAI-style
    ``{"object": "error", "message": ...}``, plain text); SGLang's own keys are kept beside it."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        body = text
    if not isinstance(body, dict):
        return {"error": {"message": str(body), "code": status}}
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return body
    if isinstance(error, str):
        message = error
    elif isinstance(body.get("message"), str):
        message = body["message"]
    else:
        message = text
    return {**body, "error": {"message": message, "code": status}}


async def post_json(
    session: aiohttp.ClientSession, url: str, body: dict, timeout_s: float | None = None
) -> dict:
    """POST and return the JSON answer; raise ``UpstreamError`` on a non-200 answer, a 502
    naming the instance when it cannot be reached or breaks the connection, and a 504 naming it
    when ``timeout_s`` (None: the session's limits only) passed without an answer."""
    instance = url.rsplit("/", 1)[0]
    timeout = (
        aiohttp.ClientTimeout(total=timeout_s, sock_connect=session.timeout.sock_connect)
        if timeout_s is not None
        else None
    )
    try:
        async with session.post(url, json=body, timeout=timeout) as resp:
            if resp.status != 200:
                raise UpstreamError(resp.status, await _error_body(resp))
            return await resp.json(content_type=None)
    except TimeoutError as exc:
        why = f"{instance} did not answer within {timeout_s:g} s"
        raise UpstreamError(504, {"error": {"message": why, "code": 504}}, instance) from exc
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
        raise UpstreamError(
            502,
            {"error": {"message": f"{instance}: {type(exc).__name__}: {exc}", "code": 502}},
            instance,
        ) from exc


async def post_prefill(session: aiohttp.ClientSession, url: str, body: dict) -> PrefillAnswer:
    """A PD prefill sub-request (``post_json``), its answer decoded; a 502 naming the
    instance when the answer is not SGLang's."""
    answer = await post_json(session, url, body)
    try:
        return msgspec.convert(answer, PrefillAnswer)
    except msgspec.ValidationError as exc:
        instance = url.rsplit("/", 1)[0]
        why = f"{instance}: its /generate answer is not SGLang's: {exc}"
        raise UpstreamError(502, {"error": {"message": why, "code": 502}}, instance) from exc


async def stream_sse(
    session: aiohttp.ClientSession,
    url: str,
    body: dict,
    incremental: bool = False,
    shared_ids: bool = False,
):
    """POST with ``stream: true`` and yield ``GenerateChunk``s until ``[DONE]``.

    Chunks always carry the cumulative ``output_ids`` (SGLang's default). ``incremental``: the
    server runs with ``--incremental-streaming-output`` (each chunk carries only its new ids,
    which keeps a long stream across a WAN linear in size); the ids (and, with
    ``return_logprob``, the output logprob entries) are accumulated here.

    One chunk is yielded per read of the socket: the chunks that arrived together are merged
    (every id, the last one's ``meta_info``). Under load, when a decode step's chunks for many
    streams wait while the router serves others, the router's per-chunk work (queue, detokenize,
    write to the client) is then paid once per read instead of once per token.

    ``shared_ids`` (incremental only): each chunk's ``output_ids`` (and logprob entries) are the
    reader's own running list, not a copy of it, which would cost O(answer) per chunk; only
    for a consumer done with each chunk before it reads the next (an ``InlineStream``'s), as
    the list grows with every later read."""
    chunks = _ChunkReader(
        incremental, bool(body.get("return_logprob")), url.rsplit("/", 1)[0], shared_ids
    )
    async with session.post(url, json={**body, "stream": True}) as resp:
        if resp.status != 200:
            raise UpstreamError(resp.status, await _error_body(resp))
        while True:
            data = await resp.content.readany()
            latest, done = chunks.feed(data)
            if latest is not None:
                yield latest
            if done or not data:
                return


class _ChunkReader:
    """An SSE byte stream to cumulative ``GenerateChunk``s. ``feed(data)`` takes what one read
    returned (``b""``: the stream ended) and returns the latest whole chunk in it (None if none
    ended in it) and whether ``[DONE]`` came; an error chunk raises ``UpstreamError``, and so
    does a chunk that ends the request with SGLang's error abort (``instance``: the server's
    URL) and one that is not a ``/generate`` chunk (a 502: SGLang's format changed)."""

    def __init__(
        self,
        incremental: bool,
        logprobs: bool,
        instance: str | None = None,
        shared_ids: bool = False,
    ) -> None:
        self.instance = instance
        self.shared_ids = shared_ids  # see stream_sse
        self.incremental = incremental
        self.logprobs = logprobs
        self.ids: list[int] = []
        self.token_logprobs: list = []  # output_token_logprobs so far (incremental)
        self.top_logprobs: list = []  # output_top_logprobs so far (incremental)
        self.pending = bytearray()  # the start of a line the next read completes

    def feed(self, data: bytes) -> tuple[GenerateChunk | None, bool]:
        if not self.pending and data.endswith(b"\n"):
            lines = data.split(b"\n")  # whole events only, as most reads hold
        else:
            self.pending += data
            # Whole lines only (a chunk may be split across reads); at the end, what is left.
            end = self.pending.rfind(b"\n") if data else len(self.pending)
            if end < 0:
                return None, False
            lines = bytes(self.pending[:end]).split(b"\n")
            del self.pending[: end + 1]
        latest = None
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return self._out(latest), True
            latest = self._chunk(payload)
        return self._out(latest), False

    def _chunk(self, payload: bytes) -> GenerateChunk:
        try:
            chunk = DECODER.decode(payload)  # every chunk of every stream: msgspec, typed once
        except msgspec.DecodeError as exc:
            raise _not_a_chunk(payload, exc) from exc
        meta = chunk.meta_info
        reason = meta.finish_reason
        aborted = reason is not None and reason.get("type") == "abort"
        if aborted and (failure := error_abort(reason, self.instance)) is not None:
            raise failure
        # SGLang's final chunk of an aborted incremental stream repeats the last id.
        if self.incremental and not aborted:
            self.ids.extend(chunk.output_ids)
            # New entries only, like the ids.
            self.token_logprobs.extend(meta.output_token_logprobs or [])
            self.top_logprobs.extend(meta.output_top_logprobs or [])
        return chunk

    def _out(self, chunk: GenerateChunk | None) -> GenerateChunk | None:
        """``chunk`` with the ids (and logprob entries) so far: what every chunk before it in
        the same read carried is in it."""
        if chunk is None or not self.incremental:
            return chunk
        meta = chunk.meta_info
        if self.shared_ids:
            chunk.output_ids = self.ids
            if self.logprobs:
                meta.output_token_logprobs = self.token_logprobs
                meta.output_top_logprobs = self.top_logprobs
            return chunk
        chunk.output_ids = list(self.ids)
        if self.logprobs:
            meta.output_token_logprobs = list(self.token_logprobs)
            meta.output_top_logprobs = list(self.top_logprobs)
        return chunk


def _not_a_chunk(payload: bytes, exc: msgspec.DecodeError) -> UpstreamError:
    """What a line that is no ``GenerateChunk`` stands for: SGLang's error chunk (``{"error":
    ...}``: its status and body), else a chunk in a shape the router does not know (a 502 for
    the request, naming no instance: every instance of this SGLang would answer the same)."""
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and "error" in body and "output_ids" not in body:
        error = body["error"]
        return UpstreamError(error.get("code", 500) if isinstance(error, dict) else 500, body)
    message = f"SGLang sent a /generate chunk the router cannot read: {exc}"
    return UpstreamError(502, {"error": {"message": message, "code": 502}})


def error_abort(reason: dict, instance: str | None) -> UpstreamError | None:
    """The error an ``abort`` finish reason (a chunk's ``meta_info.finish_reason``) stands
    for when it is SGLang's error abort, else None.

    SGLang ends a request it cannot serve (its KV transfer failed or timed out, it ran out of
    memory, the input is invalid) with finish reason ``abort`` and an HTTP ``status_code``; its
    own non-streamed answer is then that status, not a 200 (``TokenizerManager.
    _handle_abort_finish_reason``). An abort without one (``/abort_request``: the router's own
    aborts of its sub-requests) is a normal end. A 4xx is the request's fault; a 5xx names
    ``instance``, so that the request can continue elsewhere."""
    if reason.get("type") != "abort":
        return None
    status = reason.get("status_code")
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status < 600:
        return None
    message = str(reason.get("message") or "the request was aborted")
    body = {"error": {"message": message, "code": status}}
    return UpstreamError(status, body, instance if status >= 500 else None)


# An abort is best effort: a partitioned instance must not hold a request's clean-up (or its
# migration) for as long as the partition lasts.
ABORT_TIMEOUT_S = 10.0


async def abort(
    session: aiohttp.ClientSession, base_url: str, rid: str, timeout_s: float = ABORT_TIMEOUT_S
) -> None:
    """Ask a server to abort the request ``rid`` (exact; best effort, logged, at most
    ``timeout_s``)."""
    try:
        async with session.post(
            f"{base_url}/abort_request",
            json={"rid": rid},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        logger.warning("sglang-pdd router: abort of %s on %s failed: %s", rid, base_url, repr(exc))
