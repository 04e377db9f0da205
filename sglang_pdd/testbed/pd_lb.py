"""``sglang-pdd pd-lb``: the minimal load balancer SGLang's own PD needs, for benchmarks.

SGLang's PD disaggregation needs a front end that posts each request to the prefill server and
to the decode server with the same bootstrap room (upstream ships one in the separate Rust
router package). This one does just that for one prefill and one decode server, so that
unmodified clients such as ``python -m sglang.bench_serving --backend sglang`` can drive SGLang's
cross- or same-datacenter PD exactly as they drive the PDD router.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random

import aiohttp
from aiohttp import web

logger = logging.getLogger("sglang_pdd.pd_lb")
_SESSION = web.AppKey("session", aiohttp.ClientSession)
_CFG = web.AppKey("cfg", argparse.Namespace)


async def _generate(request: web.Request) -> web.StreamResponse:
    cfg, session = request.app[_CFG], request.app[_SESSION]
    body = await request.json()
    host = cfg.prefill.split("://", 1)[1].rsplit(":", 1)[0]
    body.update(
        bootstrap_host=host,
        bootstrap_port=cfg.bootstrap_port,
        bootstrap_room=random.getrandbits(63),
    )

    async def prefill():
        async with session.post(f"{cfg.prefill}/generate", json={**body, "stream": False}) as r:
            return r.status, await r.read()

    prefill_task = asyncio.ensure_future(prefill())
    try:
        async with session.post(f"{cfg.decode}/generate", json=body) as upstream:
            if not body.get("stream") or upstream.status != 200:
                payload = await upstream.read()
                status, prefill_payload = await prefill_task
                if upstream.status == 200 or status == 200:
                    return web.Response(
                        body=payload, status=upstream.status, content_type="application/json"
                    )
                return web.Response(
                    body=prefill_payload, status=status, content_type="application/json"
                )
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
            await prefill_task
            return resp
    finally:
        if not prefill_task.done():
            prefill_task.cancel()


async def _proxy_get(request: web.Request) -> web.Response:
    cfg, session = request.app[_CFG], request.app[_SESSION]
    async with session.get(f"{cfg.decode}{request.path}") as r:
        return web.Response(body=await r.read(), status=r.status, content_type="application/json")


def build_app(cfg: argparse.Namespace) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_CFG] = cfg

    async def on_startup(app):
        # Reuse idle connections for 2 s only: SGLang closes them after 5 s, and a request sent
        # on one it is closing fails (the router's --upstream-keepalive-s, for the same reason).
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2)
        app[_SESSION] = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None)
        )

    async def on_cleanup(app):
        await app[_SESSION].close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_post("/generate", _generate)
    for path in ("/v1/models", "/server_info", "/get_server_info", "/get_model_info", "/health"):
        app.router.add_get(path, _proxy_get)
    return app


def main(argv: list[str]) -> int:
    """Entry point of ``sglang-pdd pd-lb``."""
    ap = argparse.ArgumentParser(prog="sglang-pdd pd-lb", description=__doc__)
    ap.add_argument("--prefill", required=True, help="prefill server URL")
    ap.add_argument("--bootstrap-port", type=int, required=True, help="its bootstrap port")
    ap.add_argument("--decode", required=True, help="decode server URL")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    cfg = ap.parse_args(argv)
    for flag in ("prefill", "decode"):
        if not getattr(cfg, flag).startswith(("http://", "https://")):
            ap.error(f"--{flag} takes an http(s):// URL, got {getattr(cfg, flag)!r}")
    logging.basicConfig(level="INFO", format="[%(asctime)s] %(message)s")
    web.run_app(build_app(cfg), host=cfg.host, port=cfg.port, print=None)
    return 0
