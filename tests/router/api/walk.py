"""The router's files one OpenAI chat request walks through, recorded from the running code:
``python -m tests.router.api.walk`` (``--whole`` for an answer that is not streamed, ``--n 2``
for two choices) prints them, in the order they are entered.

The request goes in-process through the router's aiohttp app (``build_app``) to fake instances:
one aiohttp server in the same loop answers P's ``/generate`` with JSON and streams
Relay-Decode's as SGLang does (``data: {"output_ids", "meta_info"}`` chunks, then ``[DONE]``; 16
ids, enough for the router to note RLD's pace). The route is P-RLD (the anomaly filter on every
request: no Main-Decode control socket is needed), the router's tokenizer and chat template a
tiny model's (``testbed/tiny_model.py``). A first request warms the router up (SGLang's
serving-chat code, imports); the second is traced.

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
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
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


@dataclass
class Walk:
    """What ``trace`` recorded: every step in the order first taken."""

    steps: list[_Step] = field(default_factory=list)

    def counted(self) -> list[_Step]:
        """The steps of the walk: all but the helpers (leaf steps into files no other step
        enters)."""
        walked = {s.callee for s in self.steps if not s.leaf or s.caller is None}
        return [s for s in self.steps if s.callee in walked]

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
            {f"{s.callee} {f}" for s in self.steps if s not in counted for f in s.functions}
        )
        lines.append("helpers (leaf steps, not counted): " + "; ".join(helpers))
        return "\n".join(lines)


class _Tracer:
    def __init__(self) -> None:
        self.walk = Walk()
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
        key = (outer, callee)
        if (step := self._steps.get(key)) is None:
            step = _Step(outer, callee, [])
            self._steps[key] = step
            self.walk.steps.append(step)
        if frame.f_code.co_qualname not in step.functions:
            step.functions.append(frame.f_code.co_qualname)
        if outer is not None:
            outer.leaf = False
        self._frame_step[frame] = step

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


def _upstream_app(output_ids: list[int]):
    """P and Relay-Decode under one fake server (``/p``, ``/r``; ``/m`` only aborts)."""
    import json

    from aiohttp import web

    async def prefill(request):
        await request.json()
        return web.json_response({"text": "", "meta_info": {"id": "p", "finish_reason": None}})

    async def relay(request):
        body = await request.json()
        prompt = len(body["input_ids"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n in range(1, len(output_ids) + 1):
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

    async def aborted(request):
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/p/generate", prefill)
    app.router.add_post("/r/generate", relay)
    for where in ("p", "r", "m"):
        app.router.add_post(f"/{where}/abort_request", aborted)
    return app


def _state(base: str, model_path: str):
    from sglang_pdd.policy import PipelinePolicyConfig
    from sglang_pdd.router.config import MainEndpoint, RouterConfig
    from sglang_pdd.router.model_files import load_tokenizer, model_vocab_size
    from sglang_pdd.router.state import RouterState

    pipeline = PipelinePolicyConfig(
        ttft_slo_s=0, enable_anomaly_filter=True, anomaly_min_input_tokens=1
    )
    config = RouterConfig(
        prefill=(f"{base}/p",),
        relay=(f"{base}/r",),
        main=(MainEndpoint(f"{base}/m", "tcp://127.0.0.1:1"),),
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


async def _walk(model_path: str, stream: bool, n: int) -> tuple[Walk, list[bytes]]:
    import aiohttp
    from aiohttp.test_utils import TestServer

    from sglang_pdd.router.api.app import build_app

    upstream = TestServer(_upstream_app(list(range(40, 56))))
    await upstream.start_server()
    state = _state(str(upstream.make_url("")).rstrip("/"), model_path)
    state.session = aiohttp.ClientSession()
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
    tracer = _Tracer()
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
    await state.session.close()
    await upstream.close()
    return tracer.walk, answers


def walk(model_path: str, stream: bool = True, n: int = 1) -> tuple[Walk, list[bytes]]:
    """The traced walk of one chat request, and the two answers (the warm-up's, the traced)."""
    return asyncio.run(_walk(model_path, stream, n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--whole", action="store_true", help="a chat that is not streamed")
    parser.add_argument("--n", type=int, default=1, help="choices")
    parser.add_argument("--model", help="a model directory (default: a tiny model, written)")
    args = parser.parse_args()
    model = args.model
    if model is None:
        from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

        model = str(write_tiny_model(Path(tempfile.mkdtemp()), TinyModelConfig(seed=0)))
    traced, _ = walk(model, stream=not args.whole, n=args.n)
    print(traced.render())


if __name__ == "__main__":
    main()
