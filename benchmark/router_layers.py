"""The router's CPU per chunk of a P-MD stream, one layer at a time, in one process, no sockets.

``benchmark/router_overhead.py`` measures the router whole, under load, against a bare relay;
this says which of its layers the difference is spent in. 64 streams (``--streams``) each get
``--chunks`` SGLang-shaped incremental chunks, one per simulated decode step (every stream's
chunk is released at once, as a decode step does), through the router's own code, cumulatively:

1. ``read``: ``upstream.stream_sse`` over a fake HTTP session (split the SSE, orjson, the ids);
2. ``+ inline stream``: ``upstream_queue.InlineStream`` (idle timer, interruptible read);
3. ``+ pipeline``: ``PddRequestRun``'s P-MD loop (prefix check, the record's figures);
4. ``+ client run``: ``ClientRun.events`` (metrics, the ids sent, the end of the request);
5. ``+ client chunk``: ``/generate``'s chunk (the streamed text, ``meta_info``, orjson, the SSE
   frame) written to a fake response.

``--ids text`` streams the ids of English text (what a real model writes); ``--ids random``
draws them uniformly from the vocabulary (half of the tiny model's 512 are single bytes, which
the streamed text holds back until a character is whole).

    bash scripts/with-env.sh python benchmark/router_layers.py
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
from pathlib import Path
from types import SimpleNamespace

import orjson
import uvloop
from stream_hop import decode_steps  # this folder's: run as a script, it is on sys.path

from sglang_pdd.router.app import _generate_chunk
from sglang_pdd.router.metrics import RouterMetrics
from sglang_pdd.router.run import ClientRun
from sglang_pdd.router.streaming import sse
from sglang_pdd.router.upstream import stream_sse
from sglang_pdd.router.upstream_queue import END, InlineStream

LAYERS = ("read", "+ inline stream", "+ pipeline", "+ client run", "+ client chunk")
_MAIN = "http://main-decode"
_TEXT = (
    "The router reads each chunk of the decode server's stream, keeps its ids for a handoff or "
    "a migration, and writes a chunk of its own to the client. "
)


def _chunks(ids: list[int]) -> list[bytes]:
    """SGLang's incremental /generate stream for ``ids``, one SSE event per id, then [DONE]."""
    out = []
    for i, token in enumerate(ids):
        last = i == len(ids) - 1
        meta = {
            "id": "sub-request",
            "finish_reason": {"type": "length", "length": len(ids)} if last else None,
            "prompt_tokens": 64,
            "weight_version": "default",
            "completion_tokens": i + 1,
            "cached_tokens": 0,
            "e2e_latency": 0.1,
        }
        chunk = {"text": "", "output_ids": [token], "meta_info": meta}
        out.append(b"data: " + orjson.dumps(chunk) + b"\n\n" + (b"data: [DONE]\n\n" * last))
    return out


class _Stream:
    """A fake upstream answer: one chunk per read, each read waiting for the decode step."""

    status = 200

    def __init__(self, chunks: list[bytes], step: list[asyncio.Event]) -> None:
        self._chunks = iter(chunks)
        self._step = step
        self.content = self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> bool:
        return False

    async def readany(self) -> bytes:
        await self._step[0].wait()
        return next(self._chunks, b"")


class _Response:
    """A fake client response: counts what was written."""

    def __init__(self) -> None:
        self.writes = 0

    async def write(self, data: bytes) -> None:
        self.writes += 1


def _router_state(tokenizer) -> SimpleNamespace:
    """What ``ClientRun`` and ``PddRequestRun`` read of the router, for a P-MD plan."""
    decision = SimpleNamespace(
        pipeline="p-md", reason="benchmark", rule="benchmark", est_main_ready_s=0.0
    )
    main = SimpleNamespace(url=_MAIN)
    site = SimpleNamespace(active=0)
    state = SimpleNamespace(
        live={},
        clients={},
        max_prompt_tokens=1 << 20,
        vocab_size=0,
        metrics=RouterMetrics({}),
        tokenizer=tokenizer,
        prefill_active={"http://prefill": 0},
        plan=lambda ids, max_new, failed=frozenset(): (
            decision,
            ("http://prefill", None, main),
            None,
        ),
        site=lambda m: site,
        note_handoff_gap=lambda s: None,
        note_main_itl=lambda url, s: None,
        note_relay_itl=lambda s: None,
        health=SimpleNamespace(mark_served=lambda url: None),
        config=SimpleNamespace(upstream_idle_timeout_s=600.0),
    )
    state.run_in_background = lambda coro: asyncio.get_running_loop().create_task(coro)
    return state


async def _one_stream(layer: int, state, chunks: list[bytes], step) -> int:
    """Stream ``chunks`` through the first ``layer`` + 1 layers; the chunks that came out."""
    session = SimpleNamespace(post=lambda url, json: _Stream(chunks, step))
    # Its chunks share the reader's id list, as PddRequestRun._stream_inline's do.
    upstream = stream_sse(
        session, f"{_MAIN}/generate", {"input_ids": [1]}, incremental=True, shared_ids=True
    )
    if layer == 0:
        return sum([1 async for _ in upstream])
    stream = InlineStream(upstream, _MAIN, idle_limit_s=600.0)
    if layer == 1:
        got = 0
        while await stream.get() is not END:
            got += 1
        return got
    run = ClientRun(state, [1] * 64, {"max_new_tokens": len(chunks)}, {})
    pipeline = run.run
    pipeline.close = pipeline.abort_everywhere = _nothing  # no instance to tell
    pipeline.events = lambda: pipeline._follow_main(stream, asyncio.Queue(), already_sent=0)
    pipeline._main_ended = lambda output_ids=(): None  # no radix cache mirror to update
    if layer == 2:
        got = sum([1 async for _ in pipeline.events()])
        del state.live[run.rid], state.clients[run.rid]  # ClientRun.events, not run, unlists it
        return got
    events = run.events()
    if layer == 3:
        return sum([1 async for _ in events])
    resp = _Response()  # as /generate streams: the first event, then the rest
    await sse(resp, _generate_chunk(run, await anext(events), incremental=True))
    async for event in events:
        await sse(resp, _generate_chunk(run, event, incremental=True))
    await sse(resp, "[DONE]")
    return resp.writes - 1


async def _nothing() -> None:
    return None


async def _measure(layer: int, state, chunks: list[bytes], streams: int) -> float:
    """CPU microseconds per chunk for ``streams`` streams through ``layer``."""
    step = [asyncio.Event()]
    tasks = [asyncio.create_task(_one_stream(layer, state, chunks, step)) for _ in range(streams)]
    spent = await decode_steps(step, tasks, hops=4)  # each chunk through every layer
    # A chunk per id; from the pipeline on, one more: the request's end.
    expected = streams * (len(chunks) + (layer >= 2))
    if (got := sum(t.result() for t in tasks)) != expected:
        raise RuntimeError(f"layer {LAYERS[layer]!r}: {got} chunks came out, not {expected}")
    return 1e6 * spent / (streams * len(chunks))


def measure(tokenizer, streams: int, chunks: int, repeats: int, ids: str) -> dict[str, float]:
    """Median CPU microseconds per chunk, cumulatively, for each of ``LAYERS``."""
    if ids == "text":
        text_ids = tokenizer.encode(_TEXT * (1 + chunks // 20), add_special_tokens=False)
        stream_ids = text_ids[:chunks]
    else:
        rng = random.Random(0)
        stream_ids = [rng.randrange(len(tokenizer)) for _ in range(chunks)]
    data = _chunks(stream_ids)
    state = _router_state(tokenizer)
    results: dict[str, list[float]] = {name: [] for name in LAYERS}
    for _ in range(repeats):
        for layer, name in enumerate(LAYERS):
            results[name].append(uvloop.run(_measure(layer, state, data, streams)))
    if state.live:
        raise RuntimeError(f"{len(state.live)} requests were left listed")
    return {name: statistics.median(values) for name, values in results.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model-path", default=None, help="default: a generated 2-layer model")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=256, help="chunks (ids) per stream")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--ids",
        choices=("text", "random"),
        default="text",
        help="the streamed ids: English text's, or uniform over the vocabulary",
    )
    args = ap.parse_args(argv)
    if min(args.streams, args.chunks, args.repeats) < 1:
        ap.error("--streams, --chunks and --repeats must be positive")
    from transformers import AutoTokenizer

    model = args.model_path
    if model is None:
        from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

        model = str(write_tiny_model(Path(tempfile.mkdtemp()) / "tiny-model", TinyModelConfig()))
    tokenizer = AutoTokenizer.from_pretrained(model)
    per_layer = measure(tokenizer, args.streams, args.chunks, args.repeats, args.ids)
    print(
        f"{args.streams} streams x {args.chunks} chunks ({args.ids} ids), CPU per chunk, "
        f"median of {args.repeats}:"
    )
    before = 0.0
    for name, value in per_layer.items():
        print(f"  {name:<16} {value:6.2f} us  (this layer {value - before:+6.2f} us)")
        before = value
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
