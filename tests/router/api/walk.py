"""The router's files one OpenAI chat request walks through, recorded from the running code:
``python -m tests.router.api.walk`` (``--route p-rld|p-md|p-rld-md``, ``--whole`` for an answer
that is not streamed, ``--n 2`` for two choices) prints them, in the order they are entered.

The request goes in-process through the router's aiohttp app (``build_app``) to fake instances:
one aiohttp server in the same loop answers P's ``/generate`` with JSON and streams Relay-Decode's
and Main-Decode's as SGLang does (``data: {"output_ids", "meta_info"}`` chunks, then ``[DONE]``;
16 ids, enough for the router to note a pace), and a ZeroMQ ROUTER socket is Main-Decode's
control socket, answering as ``main_decode/parked.py`` does: ``Ready`` to the watching router
when the KV "landed", ``Extended`` for a final ``Handoff``. The route is forced through the
pipeline policy's options: P-RLD by the anomaly filter on every request, P-MD with relaying off
(``--no-relay``), P-RLD-MD by a 0 s TTFT objective (One-Shot, the default handoff mode: RLD
streams a few ids, MD reports ready, the router hands off every id and follows MD's stream).
The router's tokenizer and chat template are a tiny model's (``testbed/tiny_model.py``). A first
request warms the router up (SGLang's serving-chat code, imports); the second is traced.

How the trace reads the code (``sys.setprofile``; Python frames of ``sglang_pdd/router/`` only:
every other frame, the standard library's, aiohttp's, SGLang's or the libraries the router
shares with the simulator and the instances, ``policy/``, ``cache/``, ``transfer/``, ``wire/``,
is looked through):

* a **step** is control passing into file B from a step in another file A (None: from
  aiohttp): calls and resumptions of generators and coroutines, from any of A's frames within
  that step, and every repetition (a loop, a stream read item by item) are one step. Control
  back into A from within B is a step of its own (A entered twice). A frame that runs in a
  task of its own (or a callback) was entered from the frame that made its coroutine
  (``cr_origin``) or, for ``anext(...)`` and other awaitables, that made the task (a callback:
  that registered it).
* a step is a **helper** when B passes control to no other file before returning to A (a
  leaf: ``StreamingText.add``, ``PddRecord.as_dict``) and no other step enters B: a helper of a
  file on the walk counts as entering it again. Helpers are listed apart, not counted.
* the **walk** is the files the other steps enter, in order, starting with the file aiohttp
  calls. A file entered by two steps is entered twice.
* the router's own loops, running before the request came (the control socket's event reader,
  which puts Main-Decode's events on the queue the request's watch returned), are not the
  request's walk: listed apart, not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import sglang_pdd

PACKAGE = Path(sglang_pdd.__file__).resolve().parent
ROUTER = PACKAGE / "router"


@dataclass(eq=False)
class _Step:
    """File ``callee`` entered from the step ``caller`` (None: from aiohttp) at ``functions``;
    ``leaf``: it passed control to no other file."""

    caller: _Step | None
    callee: str
    functions: list[str]  # those it entered B at, in order
    leaf: bool = True
    router_wide: bool = False  # in one of the router's own loops, not the request's


@dataclass
class Walk:
    """What ``trace`` recorded: every step in the order first taken."""

    steps: list[_Step] = field(default_factory=list)

    def counted(self) -> list[_Step]:
        """The steps of the walk: all but the helpers (leaf steps into files no other step
        enters)."""
        steps = [s for s in self.steps if not s.router_wide]
        walked = {s.callee for s in steps if not s.leaf or s.caller is None}
        return [s for s in steps if s.callee in walked]

    def files(self) -> list[str]:
        """The files entered, in order (a file twice: entered by two steps)."""
        return [s.callee for s in self.counted()]

    def twice(self) -> list[str]:
        files = self.files()
        return sorted({f for f in files if files.count(f) > 1})

    def render(self) -> str:
        counted = self.counted()
        lines = []
        for number, step in enumerate(counted, 1):
            depth, outer = 0, step.caller
            while outer is not None:
                depth, outer = depth + 1, outer.caller
            frm = f"from {step.caller.callee}" if step.caller else "from aiohttp"
            names = ", ".join(step.functions)
            lines.append(f"{number}. {'  ' * depth}{step.callee} ({frm}): {names}")
        twice = ", ".join(self.twice()) or "none"
        lines.append(f"{len(counted)} files entered; entered twice: {twice}")
        helpers = sorted(
            {
                f"{s.callee} {f}"
                for s in self.steps
                if s not in counted and not s.router_wide
                for f in s.functions
            }
        )
        lines.append("helpers (leaf steps, not counted): " + "; ".join(helpers))
        loops = [f"{s.callee} {', '.join(s.functions)}" for s in self.steps if s.router_wide]
        if loops:
            lines.append("the router's own loops (not counted): " + "; ".join(loops))
        return "\n".join(lines)


class _Tracer:
    def __init__(self, loops=()) -> None:
        """``loops``: the router's own tasks, running before the request came."""
        self.walk = Walk()
        self._loops = set(loops)
        self._files: dict[str, str | None] = {}
        self._steps: dict[tuple, _Step] = {}
        self._frame_step: dict = {}  # frame -> the step it runs in (None: a root)
        self._spawner: dict = {}  # task -> the frame that called its coroutine or made it
        self._given: list = []  # the frames that registered the callbacks running now

    def _file(self, filename: str) -> str | None:
        if filename not in self._files:
            path = Path(filename)
            inside = path.is_absolute() and path.resolve().is_relative_to(ROUTER)
            self._files[filename] = str(path.resolve().relative_to(PACKAGE)) if inside else None
        return self._files[filename]

    def _nearest(self, frame):
        while frame is not None and self._file(frame.f_code.co_filename) is None:
            frame = frame.f_back
        return frame

    def profile(self, frame, event, arg) -> None:
        if event != "call":
            return
        callee = self._file(frame.f_code.co_filename)
        if callee is None:
            return
        caller = self._nearest(frame.f_back)
        if caller is None:
            caller = self._given[-1] if self._given else self._task_spawner()
        outer = None if caller is None else self._frame_step.get(caller)
        if outer is not None and outer.callee == callee:
            self._frame_step[frame] = outer
            return
        router_wide = outer.router_wide if outer is not None else self._in_loop()
        key = (outer, callee, router_wide)
        if (step := self._steps.get(key)) is None:
            step = _Step(outer, callee, [], router_wide=router_wide)
            self._steps[key] = step
            self.walk.steps.append(step)
        if frame.f_code.co_qualname not in step.functions:
            step.functions.append(frame.f_code.co_qualname)
        if outer is not None:
            outer.leaf = False
        self._frame_step[frame] = step

    def _in_loop(self) -> bool:
        try:
            return asyncio.current_task() in self._loops
        except RuntimeError:
            return False

    def _task_spawner(self):
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return None
        return self._spawner.get(task)

    # -- attributing tasks and callbacks -------------------------------------------------------
    def task_factory(self, loop, coro, context=None):
        tracer = self

        class _Task(asyncio.Task):
            def add_done_callback(self, fn, *, context=None):
                super().add_done_callback(tracer.given(fn), context=context)

        task = _Task(coro, loop=loop, context=context)
        spawner = None
        here = sys._getframe(1)
        for filename, _line, name in getattr(coro, "cr_origin", None) or ():
            frame = here
            while frame is not None and not (
                frame.f_code.co_filename == filename and frame.f_code.co_name == name
            ):
                frame = frame.f_back
            if frame is not None and self._file(filename) is not None:
                spawner = frame
                break
        self._spawner[task] = spawner or self._nearest(here)
        return task

    def given(self, fn):
        """``fn`` as a callback: run as called by the frame registering it (when it is ours)."""
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        registrar = self._nearest(sys._getframe(2))
        if code is None or self._file(code.co_filename) is None or registrar is None:
            return fn

        def run(*args):
            self._given.append(registrar)
            try:
                return fn(*args)
            finally:
                self._given.pop()

        return run

    def attach(self, loop) -> None:
        loop.set_task_factory(self.task_factory)
        loop.call_soon = self._schedule(loop.call_soon, 0)
        loop.call_later = self._schedule(loop.call_later, 1)
        loop.call_at = self._schedule(loop.call_at, 1)

    def _schedule(self, original, position: int):
        def schedule(*args, **kwargs):
            args = list(args)
            args[position] = self.given(args[position])
            return original(*args, **kwargs)

        return schedule


ROUTES = ("p-rld", "p-md", "p-rld-md")
RELAY_IDS_BEFORE_READY = 4  # P-RLD-MD: RLD's ids before MD reports the KV landed
RELAY_ITL_S = 0.05  # ... and RLD's pace: the 12 ids left take longer than a handoff


class _FakeMain:
    """Main-Decode's control socket as the real one answers (``main_decode/parked.py``): a
    ZeroMQ ROUTER taking ``Watch``, ``Handoff`` and ``Release``, and sending the watching
    router ``Ready`` when a request's KV "landed" (its ``/generate`` came, and for a relayed
    request RLD has streamed a few ids), ``Extended`` once a final handoff was taken."""

    def __init__(self) -> None:
        import zmq
        import zmq.asyncio

        self.socket = zmq.asyncio.Context.instance().socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.watchers: dict[str, bytes] = {}
        self.handoffs: dict[str, asyncio.Future] = {}
        self.reader: asyncio.Task | None = None

    def start(self) -> None:
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        from sglang_pdd.wire import codec
        from sglang_pdd.wire.messages import Handoff, Watch

        while True:
            identity, payload = await self.socket.recv_multipart()
            message = codec.decode_control(payload)
            if isinstance(message, Watch):
                self.watchers[message.rid] = identity
            elif isinstance(message, Handoff) and message.final:
                self.handoff(message.rid).set_result(message.token_ids)

    def handoff(self, rid: str) -> asyncio.Future:
        return self.handoffs.setdefault(rid, asyncio.get_running_loop().create_future())

    async def send(self, event) -> None:
        from sglang_pdd.wire import codec

        async with asyncio.timeout(10):  # the router's watch may still be on its way
            while event.rid not in self.watchers:
                await asyncio.sleep(0.001)
        await self.socket.send_multipart([self.watchers[event.rid], codec.encode(event)])

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        self.socket.close()


def _upstream_app(output_ids: list[int], main: _FakeMain, relayed_md: bool):
    """P, Relay-Decode and Main-Decode under one fake server (``/p``, ``/r``, ``/m``);
    ``relayed_md``: P-RLD-MD (RLD paced, until the handoff)."""
    import json

    from aiohttp import web

    from sglang_pdd.wire.messages import Extended, Ready
    from sglang_pdd.wire.rids import is_relayed

    relayed: dict[str, asyncio.Event] = {}  # router rid -> RLD has streamed a few ids
    aborted: dict[str, asyncio.Event] = {}  # rid -> the router aborted it

    def base(rid: str) -> str:
        return rid.rsplit(".", 1)[0]

    async def prefill(request):
        await request.json()
        return web.json_response({"text": "", "meta_info": {"id": "p", "finish_reason": None}})

    async def stream(request, body, first: int, wait=None):
        """SGLang's SSE answer: ``output_ids`` up to each n from ``first`` (``wait(n)`` before
        each chunk), then ``[DONE]``."""
        prompt = len(body["input_ids"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n in range(first, len(output_ids) + 1):
            if wait is not None and not await wait(n):
                return resp
            last = n == len(output_ids)
            meta = {
                "id": body["rid"],
                "finish_reason": {"type": "length", "length": n} if last else None,
                "prompt_tokens": prompt,
                "completion_tokens": n,
                "cached_tokens": 0,
            }
            chunk = {"output_ids": output_ids[:n], "meta_info": meta}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def relay(request):
        body = await request.json()
        rid = body["rid"]
        handed_off = relayed.setdefault(base(rid), asyncio.Event())
        stop = aborted.setdefault(rid, asyncio.Event())

        async def paced(n: int) -> bool:
            """P-RLD-MD: an id each ``RELAY_ITL_S`` (a tail worth handing off), MD's KV
            landing after the first few, until the router aborts RLD at the handoff."""
            if n > RELAY_IDS_BEFORE_READY:
                handed_off.set()
            if n > 1:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RELAY_ITL_S)
            return not stop.is_set()

        return await stream(request, body, 1, paced if relayed_md else None)

    async def decode_main(request):
        body = await request.json()
        rid = body["rid"]
        prompt = len(body["input_ids"])
        landed = Ready(rid=rid, t=time.time(), prompt_tokens=prompt, received_tokens=prompt)
        if not is_relayed(rid):  # P-MD: the KV landed, MD decodes on
            await main.send(landed)
            return await stream(request, body, 1)
        # P-RLD-MD: parked once its KV lands (after RLD's first ids), silent until the final
        # handoff, then extended over the handed-off ids and decoding past them.
        await relayed.setdefault(base(rid), asyncio.Event()).wait()
        await main.send(landed)
        handed = await asyncio.wait_for(main.handoff(rid), 10)
        await main.send(Extended(rid=rid, tokens=len(handed), final=True, t=time.time()))
        return await stream(request, body, len(handed) + 1)

    async def abort(request):
        rid = (await request.json())["rid"]
        aborted.setdefault(rid, asyncio.Event()).set()
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/p/generate", prefill)
    app.router.add_post("/r/generate", relay)
    app.router.add_post("/m/generate", decode_main)
    for where in ("p", "r", "m"):
        app.router.add_post(f"/{where}/abort_request", abort)
    return app


def _state(base: str, model_path: str, route: str, control: str):
    from sglang_pdd.policy import PipelinePolicyConfig
    from sglang_pdd.router.config import MainEndpoint, RouterConfig
    from sglang_pdd.router.model_files import load_tokenizer, model_vocab_size
    from sglang_pdd.router.state import RouterState

    pipeline = {
        # The anomaly filter takes every prompt (one token is "long"; 16 ids are "short").
        "p-rld": PipelinePolicyConfig(
            ttft_slo_s=0, enable_anomaly_filter=True, anomaly_min_input_tokens=1
        ),
        "p-md": PipelinePolicyConfig(enable_relay=False),  # plain cross-datacenter PD
        # Relay every request (a 0 s TTFT objective), One-Shot (the default handoff mode).
        "p-rld-md": PipelinePolicyConfig(ttft_slo_s=0, enable_anomaly_filter=False),
    }[route]
    config = RouterConfig(
        prefill=(f"{base}/p",),
        relay=(f"{base}/r",),
        main=(MainEndpoint(f"{base}/m", control),),
        pipeline=pipeline,
        kv_bytes_per_token=256,
    )
    state = RouterState(config)
    state.bootstrap = {f"{base}/p": ("127.0.0.1", 1)}
    state.model_info = {"model_path": model_path}
    state.tokenizer = load_tokenizer(model_path)
    state.vocab_size = model_vocab_size(model_path, state.tokenizer)
    state.max_prompt_tokens = 1 << 20
    state.kv_bytes_per_token = 256
    return state


async def _walk(model_path: str, stream: bool, n: int, route: str) -> tuple[Walk, list[bytes]]:
    import aiohttp
    from aiohttp.test_utils import TestServer

    from sglang_pdd.router.api.app import build_app

    main = _FakeMain()
    main.start()
    upstream = TestServer(_upstream_app(list(range(40, 56)), main, route == "p-rld-md"))
    await upstream.start_server()
    state = _state(str(upstream.make_url("")).rstrip("/"), model_path, route, main.address)
    state.session = aiohttp.ClientSession()
    for site in state.mains.values():
        site.start()  # its control socket's event reader (RouterState.start's part here)
    app = build_app(state)
    app.on_startup.clear()
    app.on_cleanup.clear()
    router = TestServer(app)
    await router.start_server()
    body = {
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 16,
        "stream": stream,
        "n": n,
    }
    answers = []
    # The control socket's reader and re-watcher: Main-Decode's events reach the request on the
    # queue its watch returned.
    loops = [
        t for site in state.mains.values() for t in (site.control._reader, site.control._rewatcher)
    ]
    tracer = _Tracer(loops)
    async with aiohttp.ClientSession() as client:
        for traced in (False, True):
            if traced:
                tracer.attach(asyncio.get_running_loop())
                sys.set_coroutine_origin_tracking_depth(8)
                sys.setprofile(tracer.profile)
            try:
                async with client.post(router.make_url("/v1/chat/completions"), json=body) as r:
                    answers.append(await r.read())
                    assert r.status == 200, answers[-1]
                await asyncio.sleep(0.05)  # the requests' clean-up tasks end
            finally:
                sys.setprofile(None)
                sys.set_coroutine_origin_tracking_depth(0)
    await router.close()
    for site in state.mains.values():
        await site.close()
    await state.session.close()
    await upstream.close()
    await main.close()
    return tracer.walk, answers


def walk(
    model_path: str, stream: bool = True, n: int = 1, route: str = "p-rld"
) -> tuple[Walk, list[bytes]]:
    """The traced walk of one chat request on ``route`` (one of ``ROUTES``), and the two
    answers (the warm-up's, the traced)."""
    return asyncio.run(_walk(model_path, stream, n, route))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--whole", action="store_true", help="a chat that is not streamed")
    parser.add_argument("--n", type=int, default=1, help="choices")
    parser.add_argument("--route", choices=ROUTES, default="p-rld", help="the pipeline forced")
    parser.add_argument("--model", help="a model directory (default: a tiny model, written)")
    args = parser.parse_args()
    model = args.model
    if model is None:
        from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

        model = str(write_tiny_model(Path(tempfile.mkdtemp()), TinyModelConfig(seed=0)))
    traced, _ = walk(model, stream=not args.whole, n=args.n, route=args.route)
    print(traced.render())


if __name__ == "__main__":
    main()
