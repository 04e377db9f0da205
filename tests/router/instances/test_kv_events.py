"""The KV-event subscriber survives whatever a peer publishes (property test and a real
ZeroMQ publisher): bad frames, bad batches and bad events are skipped, good ones applied."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
import zmq
import zmq.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_pdd.cache.kv_event_view import KvEventCacheView
from sglang_pdd.router.instances.kv_events import KvEventSubscriber, apply_events

# What msgpack can carry, with the view's own keys made likely.
_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_values = st.recursive(
    _scalars | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
_keys = st.sampled_from(
    ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id"]
)
_types = st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared", "Other"])
_events = st.dictionaries(_keys | st.text(max_size=6), _values, max_size=6).flatmap(
    lambda d: _types.map(lambda t: {**d, "type": t}) | st.just(d)
)


def _stored(hashes, parent, tokens):
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": 1,
    }


@settings(max_examples=300, deadline=None)
@given(st.lists(_events, max_size=8))
def test_any_events_leave_the_view_usable(events):
    view = KvEventCacheView()
    bad = apply_events(view, events, "fuzz")
    assert 0 <= bad <= len(events)
    # The view still takes and answers good events afterwards.
    view.apply({"type": "AllBlocksCleared"})
    assert apply_events(view, [_stored([1, 2], None, [5, 6])], "good") == 0
    assert view.match([5, 6, 7]) == 2


@contextlib.asynccontextmanager
async def _publisher_and_subscriber():
    """A real ZeroMQ PUB socket and a started KvEventSubscriber on it, both closed after."""
    pub = zmq.asyncio.Context.instance().socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = KvEventSubscriber(f"tcp://127.0.0.1:{port}")
    try:
        yield pub, sub
    finally:
        await sub.close()
        pub.close()


def test_a_subscriber_skips_bad_frames_batches_and_events_and_keeps_applying():
    async def main():
        async with _publisher_and_subscriber() as (pub, sub):
            applied = asyncio.Event()
            sub.listeners.append(lambda: sub.view.match([9, 8]) == 2 and applied.set())
            sub.start()
            encode = msgspec.msgpack.encode
            seq = 0
            while not applied.is_set():  # until the slow-joining SUB sees the good batch
                frames = [
                    [b"t", b"only two frames"],
                    [b"t", (seq := seq + 1).to_bytes(8, "big"), b"\xc1 not msgpack"],
                    [b"t", (seq := seq + 1).to_bytes(8, "big"), encode({"not": "a batch"})],
                    [
                        b"t",
                        (seq := seq + 1).to_bytes(8, "big"),
                        encode([1.0, [{"type": "BlockStored", "block_hashes": 3}]]),
                    ],
                    [
                        b"t",
                        (seq := seq + 1).to_bytes(8, "big"),
                        encode([1.0, [_stored([1, 2], None, [9, 8])]]),
                    ],
                ]
                for frame in frames:
                    await pub.send_multipart(frame)
                # A SUB socket joins late: publish again until the good batch got through.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(applied.wait(), 0.2)
            assert sub.bad_events >= 1 and sub.batches >= 2
            assert not sub._task.done()  # the subscriber lives on

    asyncio.run(asyncio.wait_for(main(), 60))


def test_after_lost_batches_the_view_starts_again_from_empty():
    """A sequence gap means lost events (a removal among them would leave the view claiming
    pages MD evicted): the view is emptied, then rebuilt from what comes next."""

    async def main():
        async with _publisher_and_subscriber() as (pub, sub):
            batches = asyncio.Queue()
            sub.listeners.append(lambda: batches.put_nowait(sub.batches))
            sub.start()
            encode = msgspec.msgpack.encode

            async def publish(seq: int, event: dict) -> None:
                await pub.send_multipart([b"t", seq.to_bytes(8, "big"), encode([1.0, [event]])])

            while sub.view.match([9, 8]) != 2:  # a SUB socket joins late: publish until seen
                await publish(1, _stored([1, 2], None, [9, 8]))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(batches.get(), 0.2)
            assert (sub.gaps, sub.resyncs) == (0, 0)
            seen = sub.batches
            await publish(2, _stored([3], 2, [7]))  # contiguous: applied on top
            while sub.batches == seen:
                await asyncio.wait_for(batches.get(), 30)
            assert sub.view.match([9, 8, 7]) == 3
            seen = sub.batches
            await publish(5, _stored([4], None, [6]))  # 3 and 4 were lost
            while sub.batches == seen:
                await asyncio.wait_for(batches.get(), 30)
            assert (sub.gaps, sub.resyncs) == (2, 1)
            assert sub.view.match([9, 8, 7]) == 0  # nothing from before the gap is trusted
            assert sub.view.match([6]) == 1  # what came after it is

    asyncio.run(asyncio.wait_for(main(), 60))
