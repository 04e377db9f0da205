"""The router's CPU per chunk for moving an upstream chunk to the task that sends it, two ways.

64 streams (``--streams``) each yield ``--chunks`` chunks, one per simulated decode step, to a
consumer task per stream, in one process with no sockets: through ``upstream_queue.pump`` (a
task copies the stream into an ``asyncio.Queue``; how relayed requests read) and through
``upstream_queue.InlineStream`` (the consumer reads the stream itself; how P-MD and P-RLD
requests read). Prints process CPU per chunk for each, alternating, and their difference.

    bash scripts/with-env.sh python benchmark/stream_hop.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import uvloop

from sglang_pdd.router.upstream_queue import END, InlineStream, pump


async def _run(kind: str, streams: int, chunks: int) -> float:
    """CPU microseconds per chunk for ``streams`` streams read ``kind``'s way."""
    step = [asyncio.Event()]  # the current decode step; replaced when it is released

    async def source():
        for i in range(chunks):
            await step[0].wait()
            yield {"i": i}

    async def consume(stream) -> int:
        got = 0
        while await stream.get() is not END:
            got += 1
        return got

    readers = []
    for _ in range(streams):
        if kind == "inline":
            readers.append(InlineStream(source(), "upstream", idle_limit_s=60.0))
        else:
            queue: asyncio.Queue = asyncio.Queue()
            queue.task = asyncio.create_task(pump(source(), queue, "upstream", lambda: 60.0))
            readers.append(queue)
    consumers = [asyncio.create_task(consume(r)) for r in readers]
    spent = await decode_steps(step, consumers, hops=3)
    if sum(c.result() for c in consumers) != streams * chunks:
        raise RuntimeError(f"{kind}: chunks were lost")
    return 1e6 * spent / (streams * chunks)


async def decode_steps(step: list[asyncio.Event], tasks: list[asyncio.Task], hops: int) -> float:
    """Release decode steps until ``tasks`` are done: each step sets the event in ``step[0]``
    (every stream's next chunk at once, as a decode step yields them) and replaces it, then
    lets ``hops`` rounds of the event loop carry the chunks through. Returns the CPU seconds."""
    started = time.process_time()
    while not all(task.done() for task in tasks):
        released, step[0] = step[0], asyncio.Event()
        released.set()
        for _ in range(hops):
            await asyncio.sleep(0)
    return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=2000, help="chunks per stream")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if min(args.streams, args.chunks, args.repeats) < 1:
        ap.error("--streams, --chunks and --repeats must be positive")
    results: dict[str, list[float]] = {"queue": [], "inline": []}
    for _ in range(args.repeats):
        for kind in results:
            results[kind].append(uvloop.run(_run(kind, args.streams, args.chunks)))
    for kind, values in results.items():
        print(
            f"{kind:<7} {statistics.median(values):6.2f} us CPU per chunk (median of {len(values)})"
        )
    saved = statistics.median(results["queue"]) - statistics.median(results["inline"])
    print(f"inline saves {saved:.2f} us per chunk")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
