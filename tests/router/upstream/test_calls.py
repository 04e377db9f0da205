"""``stream_sse`` over a real local HTTP server: cumulative and incremental SGLang streams."""

import asyncio
import json
from itertools import pairwise

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from sglang_pdd.router.upstream.calls import error_body, stream_sse


def _serve(chunks):
    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/generate", handler)
    return app


def _meta(**fields) -> dict:
    """A ``meta_info`` with the keys SGLang always sends (``id``, ``finish_reason``)."""
    return {"id": "r", "finish_reason": None, **fields}


def _collect(chunks, incremental):
    async def run():
        runner = web.AppRunner(_serve(chunks))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{port}/generate"
                return [c.output_ids async for c in stream_sse(session, url, {}, incremental)]
        finally:
            await runner.cleanup()

    return asyncio.run(run())


def _growing(collected):
    """Each chunk's cumulative ids extend the previous chunk's (chunks that arrived in one
    read are merged, so how many there are depends on timing)."""
    return all(b[: len(a)] == a and len(b) > len(a) for a, b in pairwise(collected))


def test_incremental_chunks_become_cumulative():
    chunks = [
        {"output_ids": [1], "meta_info": _meta()},
        {"output_ids": [2, 3], "meta_info": _meta()},
        {"output_ids": [4], "meta_info": _meta(finish_reason={"type": "length"})},
    ]
    got = _collect(chunks, incremental=True)
    assert got[-1] == [1, 2, 3, 4] and _growing(got)


def test_cumulative_chunks_pass_through_and_abort_repeat_is_ignored():
    got = _collect(
        [{"output_ids": [1], "meta_info": _meta()}, {"output_ids": [1, 2], "meta_info": _meta()}],
        False,
    )
    assert got[-1] == [1, 2] and _growing(got)
    aborted = [
        {"output_ids": [5], "meta_info": _meta()},
        {"output_ids": [5], "meta_info": _meta(finish_reason={"type": "abort"})},
    ]
    assert _collect(aborted, incremental=True)[-1] == [5]


def _sse(chunks) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


@given(
    st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=4), min_size=1, max_size=12),
    st.lists(st.integers(0, 10_000), max_size=20),
    st.booleans(),
    st.booleans(),
)
def test_reads_split_anywhere_give_the_same_ids_and_last_chunk(pieces, cuts, logprobs, shared):
    """However the socket splits the stream (mid-line, mid-chunk, many chunks at once), the
    reader yields growing cumulative ids, ending with every id, the last chunk's finish reason
    and every logprob entry, then ``[DONE]``. ``shared``: the chunks carry the reader's own
    lists (``shared_ids``), read by a consumer done with each chunk before the next read."""
    from sglang_pdd.router.upstream.calls import _ChunkReader

    chunks = []
    for i, ids in enumerate(pieces):
        meta = _meta(output_token_logprobs=[[-0.5, t, None] for t in ids])
        if i == len(pieces) - 1:
            meta["finish_reason"] = {"type": "length", "length": i}
        chunks.append({"output_ids": ids, "meta_info": meta, "text": "x"})
    stream = _sse(chunks)
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    reader = _ChunkReader(incremental=True, logprobs=logprobs, shared_ids=shared)
    got, done = [], False
    for a, b in pairwise(bounds):
        latest, done = reader.feed(stream[a:b])
        if latest is not None:
            assert (latest.output_ids is reader.ids) == shared  # shared: never copied
            meta = latest.meta_info  # what the consumer sees now, before reading on
            got.append(
                {
                    "output_ids": list(latest.output_ids),
                    "finish_reason": meta.finish_reason,
                    "output_token_logprobs": list(meta.output_token_logprobs or []),
                }
            )
        if done:  # the caller reads no further: only the [DONE] line's blank line may be left
            assert not stream[b:].strip(), stream[b:]
            break
    assert done and _growing([c["output_ids"] for c in got])
    everything = [t for ids in pieces for t in ids]
    assert got[-1]["output_ids"] == everything
    assert got[-1]["finish_reason"] == {"type": "length", "length": len(pieces) - 1}
    if logprobs:
        assert [e[1] for e in got[-1]["output_token_logprobs"]] == everything


def test_an_error_chunk_raises_after_the_ids_before_it():
    from sglang_pdd.router.upstream.calls import UpstreamError, _ChunkReader

    reader = _ChunkReader(incremental=True, logprobs=False)
    chunk = {"output_ids": [1], "meta_info": _meta()}
    assert reader.feed(b"data: " + json.dumps(chunk).encode() + b"\n\n")[0].output_ids == [1]
    with pytest.raises(UpstreamError) as caught:
        reader.feed(b'data: {"error": {"message": "boom", "code": 503}}\n\n')
    assert caught.value.status == 503


def test_a_stream_that_ends_without_a_newline_still_gives_its_last_chunk():
    from sglang_pdd.router.upstream.calls import _ChunkReader

    reader = _ChunkReader(incremental=False, logprobs=False)
    line = b'data: {"output_ids": [1, 2], "meta_info": {"id": "r", "finish_reason": null}}'
    assert reader.feed(line) == (None, False)
    chunk, done = reader.feed(b"")
    assert chunk.output_ids == [1, 2] and not done


def test_an_abort_to_an_instance_that_never_answers_gives_up():
    """A partitioned instance (it takes the request and never answers) cannot hold a
    request's clean-up: the abort ends after its deadline, logged, without raising."""
    import asyncio

    import aiohttp
    from aiohttp import web

    from sglang_pdd.router.upstream.calls import abort

    async def run():
        reached, release = asyncio.Event(), asyncio.Event()

        async def silent(request):
            reached.set()
            await release.wait()  # answers only once the test is over
            return web.json_response({})

        app = web.Application()
        app.router.add_post("/abort_request", silent)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        async with aiohttp.ClientSession() as session:
            await abort(session, f"http://127.0.0.1:{port}", "r", timeout_s=0.2)
        release.set()
        await runner.cleanup()
        return reached.is_set()

    assert asyncio.run(run())


def test_a_post_with_a_deadline_answers_504_naming_the_silent_instance():
    """A real server that never answers: ``post_json`` gives up after its deadline."""
    from sglang_pdd.router.upstream.calls import UpstreamError, post_json

    async def run():
        never = asyncio.Event()

        async def silent(request):
            await never.wait()

        app = web.Application()
        app.router.add_post("/generate", silent)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{port}/generate"
                try:
                    await post_json(session, url, {}, timeout_s=0.2)
                except UpstreamError as exc:
                    return exc
        finally:
            never.set()
            await runner.cleanup()

    exc = asyncio.run(run())
    assert exc is not None and exc.status == 504
    assert exc.instance.startswith("http://127.0.0.1:") and "/generate" not in exc.instance
    assert "did not answer within 0.2 s" in exc.body["error"]["message"]


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"error": {"message": "bad", "code": 400}}', "bad"),
        ('{"error": "unexpected keyword"}', "unexpected keyword"),
        (
            '{"object": "error", "message": "Prefill transfer failed", "code": 500}',
            "Prefill transfer failed",
        ),
        ("Internal Server Error", "Internal Server Error"),
        ('["a list"]', "['a list']"),
        ('{"detail": 3}', '{"detail": 3}'),
    ],
)
def test_every_error_shape_sglang_uses_reaches_the_client_as_error_message(text, message):
    """Clients read ``error.message`` (SGLang's /generate shape) whatever an instance sent; the
    instance's own keys stay beside it (a client of SGLang's OpenAI shape reads ``message``)."""
    body = error_body(400, text)
    assert body["error"]["message"] == message
    if text.startswith('{"object"'):
        assert body["object"] == "error" and body["message"] == message


@given(
    st.integers(400, 599),
    st.text()
    | st.builds(
        json.dumps,
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=8), inner, max_size=3)
            ),
            max_leaves=8,
        ),
    ),
)
def test_any_error_answer_has_a_string_error_message(status, text):
    body = error_body(status, text)
    assert isinstance(body["error"]["message"], str)


def _abort_chunk(**reason) -> bytes:
    import orjson

    chunk = {
        "text": "",
        "output_ids": [7],
        "meta_info": {"id": "r", "finish_reason": {"type": "abort", **reason}},
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


@pytest.mark.parametrize("incremental", [False, True])
def test_an_error_abort_from_an_instance_is_its_failure_not_an_answer(incremental):
    """SGLang ends a request whose KV transfer timed out with an abort carrying status 500:
    the request failed on that instance (it may continue elsewhere), it did not finish."""
    from sglang_pdd.router.upstream.calls import UpstreamError, _ChunkReader

    reader = _ChunkReader(incremental=incremental, logprobs=False, instance="http://rld:1")
    message = "Request 1 timed out after 300.0s in KVPoll.WaitingForInput"
    with pytest.raises(UpstreamError) as caught:
        reader.feed(_abort_chunk(message=message, status_code=500, err_type=None))
    assert caught.value.status == 500 and caught.value.instance == "http://rld:1"
    assert caught.value.body["error"]["message"] == message


def test_a_bad_request_abort_is_the_requests_fault_and_names_no_instance():
    from sglang_pdd.router.upstream.calls import UpstreamError, _ChunkReader

    reader = _ChunkReader(incremental=False, logprobs=False, instance="http://md:1")
    with pytest.raises(UpstreamError) as caught:
        reader.feed(_abort_chunk(message="bad input", status_code=400))
    assert caught.value.status == 400 and caught.value.instance is None


@pytest.mark.parametrize("reason", [{}, {"message": "Abort by user"}, {"status_code": True}])
def test_a_graceful_abort_is_a_normal_end(reason):
    """``/abort_request`` (the router's own aborts of its sub-requests) carries no status."""
    from sglang_pdd.router.upstream.calls import _ChunkReader

    reader = _ChunkReader(incremental=False, logprobs=False, instance="http://md:1")
    chunk, done = reader.feed(_abort_chunk(**reason))
    assert chunk.finish_reason["type"] == "abort" and not done
