"""``stream_sse`` over a real local HTTP server: cumulative and incremental SGLang streams."""

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from sglang_pdd.router.upstream import error_body, stream_sse


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
                return [c["output_ids"] async for c in stream_sse(session, url, {}, incremental)]
        finally:
            await runner.cleanup()

    return asyncio.run(run())


def test_incremental_chunks_become_cumulative():
    chunks = [
        {"output_ids": [1], "meta_info": {}},
        {"output_ids": [2, 3], "meta_info": {}},
        {"output_ids": [4], "meta_info": {"finish_reason": {"type": "length"}}},
    ]
    assert _collect(chunks, incremental=True) == [[1], [1, 2, 3], [1, 2, 3, 4]]


def test_cumulative_chunks_pass_through_and_abort_repeat_is_ignored():
    assert _collect([{"output_ids": [1]}, {"output_ids": [1, 2]}], False) == [[1], [1, 2]]
    aborted = [
        {"output_ids": [5], "meta_info": {}},
        {"output_ids": [5], "meta_info": {"finish_reason": {"type": "abort"}}},
    ]
    assert _collect(aborted, incremental=True) == [[5], [5]]


def test_an_abort_to_an_instance_that_never_answers_gives_up():
    """A partitioned instance (it takes the request and never answers) cannot hold a
    request's clean-up: the abort ends after its deadline, logged, without raising."""
    import asyncio

    import aiohttp
    from aiohttp import web

    from sglang_pdd.router.upstream import abort

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
    from sglang_pdd.router.upstream import UpstreamError, post_json

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
