"""``POST /pdd/drain`` and ``/pdd/undrain``: take a decoding instance out for maintenance.

Draining an instance takes it out of rotation at once (no new request is planned on it) and
moves its in-flight requests elsewhere by token-ID migration: each continues from its prompt plus
the ids its client already has (``migration.py``), so a rolling upgrade of an RLD or MD drops no
stream. A request that cannot migrate (its next tokens depend on state inside the instance:
sampling that is not greedy, penalties, a grammar, stop strings) finishes where it is; the
answer counts those as ``finishing``. A request parked on a draining Main-Decode is not handed
to it: Relay-Decode finishes it. ``/pdd/undrain`` puts the instance back.
"""

from __future__ import annotations

import json

from aiohttp import web

from sglang_pdd.router.state import STATE
from sglang_pdd.router.upstream.calls import UpstreamError


def draining_error(url: str, cause: str = "POST /pdd/drain") -> UpstreamError:
    """What a request's stream from a draining instance ends with (it then migrates)."""
    return UpstreamError(
        503, {"error": {"message": f"{url} is draining ({cause})", "code": 503}}, url
    )


def _instance(request_body: dict, state) -> str:
    url = request_body.get("url") if isinstance(request_body, dict) else None
    known = {*state.config.prefill, *state.config.relay, *state.mains}
    if not isinstance(url, str) or url not in known:
        message = f'give {{"url": URL}} with one of the router\'s instances: {sorted(known)}'
        raise web.HTTPBadRequest(
            text=json.dumps({"error": message}), content_type="application/json"
        )
    return url


async def drain(request: web.Request) -> web.Response:
    state = request.app[STATE]
    url = _instance(await request.json(), state)
    state.health.draining.add(url)
    moved, finishing = state.move_requests_off(url)
    return web.json_response({"draining": url, "moved": moved, "finishing": finishing})


async def undrain(request: web.Request) -> web.Response:
    state = request.app[STATE]
    url = _instance(await request.json(), state)
    state.health.draining.discard(url)
    return web.json_response({"draining": sorted(state.health.draining)})
