"""API keys: the router's own (``--api-key``, as ``sglang.launch_server``) and the one it
presents to instances that require one (``--instance-api-key``)."""

from __future__ import annotations

import secrets

from aiohttp import web

# Always open, as on an SGLang server: probes and Prometheus need no secret.
OPEN_PREFIXES = ("/health", "/ready", "/metrics")


def authorized(path: str, method: str, authorization: str | None, api_key: str | None) -> bool:
    """SGLang's rule: with a key set, every endpoint but the open ones needs
    ``Authorization: Bearer <key>`` (compared in constant time)."""
    if not api_key or method == "OPTIONS" or path.startswith(OPEN_PREFIXES):
        return True
    scheme, _, token = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token, api_key)


def api_key_middleware(api_key: str | None):
    """An aiohttp middleware answering 401 ``{"error": "Unauthorized"}`` (SGLang's answer)."""

    @web.middleware
    async def check(request: web.Request, handler):
        if not authorized(
            request.path, request.method, request.headers.get("Authorization"), api_key
        ):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


def upstream_headers(instance_api_key: str | None) -> dict[str, str]:
    """Headers of every request the router sends to an instance."""
    return {"Authorization": f"Bearer {instance_api_key}"} if instance_api_key else {}
