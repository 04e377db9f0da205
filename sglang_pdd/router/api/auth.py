"""API keys: the router's own (``--api-key`` and ``--admin-api-key``, as
``sglang.launch_server``) and the one it presents to instances that require one
(``--instance-api-key``)."""

from __future__ import annotations

import secrets

# Always open, as on an SGLang server: probes and Prometheus need no secret.
OPEN_PREFIXES = ("/health", "/ready", "/metrics")
# The operator's endpoints (drain, undrain, the live request list): SGLang's ADMIN_OPTIONAL
# level, as its own admin endpoints.
ADMIN_PREFIXES = ("/pdd/",)


def authorized(
    path: str,
    method: str,
    authorization: str | None,
    api_key: str | None,
    admin_api_key: str | None = None,
) -> bool:
    """SGLang's rule (``sglang.srt.utils.auth.decide_request_auth``): probes are open; an admin
    endpoint needs the admin key if one is set, else the API key if one is set; any other
    endpoint needs the API key if one is set (the admin key does not open it).
    ``Authorization: Bearer <key>``, compared in constant time."""
    if method == "OPTIONS" or path.startswith(OPEN_PREFIXES):
        return True
    key = (admin_api_key or api_key) if path.startswith(ADMIN_PREFIXES) else api_key
    if not key:
        return True
    scheme, _, token = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token, key)


def upstream_headers(instance_api_key: str | None) -> dict[str, str]:
    """Headers of every request the router sends to an instance."""
    return {"Authorization": f"Bearer {instance_api_key}"} if instance_api_key else {}
