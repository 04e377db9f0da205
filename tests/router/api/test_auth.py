"""The router's API key rule (SGLang's) and the key it presents to instances."""

from __future__ import annotations

import pytest

from sglang_pdd.router.api.auth import authorized, upstream_headers
from sglang_pdd.router.config import MainEndpoint, RouterConfig


@pytest.mark.parametrize(
    "path, method, header, allowed",
    [
        ("/generate", "POST", "Bearer s3cret", True),
        ("/generate", "POST", "bearer s3cret", True),
        ("/generate", "POST", "Bearer wrong", False),
        ("/generate", "POST", "s3cret", False),
        ("/v1/chat/completions", "POST", None, False),
        ("/pdd/requests", "GET", None, False),
        ("/health", "GET", None, True),
        ("/health_generate", "GET", None, True),
        ("/metrics", "GET", None, True),
        ("/generate", "OPTIONS", None, True),
    ],
)
def test_a_key_guards_everything_but_probes(path, method, header, allowed):
    assert authorized(path, method, header, "s3cret") is allowed
    assert authorized(path, method, header, None)  # no key: open, as SGLang


def test_instances_get_the_instance_key():
    assert upstream_headers("k1") == {"Authorization": "Bearer k1"}
    assert upstream_headers(None) == {}


def test_bad_keys_are_refused_naming_the_flag():
    base = dict(
        prefill=("http://p:1",),
        relay=("http://r:1",),
        main=(MainEndpoint("http://m:1", "tcp://m:2"),),
    )
    for flag, field in (
        ("--api-key", "api_key"),
        ("--admin-api-key", "admin_api_key"),
        ("--instance-api-key", "instance_api_key"),
    ):
        for bad in ("", "two words"):
            with pytest.raises(ValueError, match=flag):
                RouterConfig(**base, **{field: bad})


PATHS = ["/generate", "/v1/chat/completions", "/pdd/drain", "/pdd/requests", "/health", "/metrics"]
HEADERS = [None, "Bearer user", "Bearer admin", "bearer admin", "admin", "Bearer other"]
KEYS = [(None, None), ("user", None), (None, "admin"), ("user", "admin")]


@pytest.mark.parametrize(("api_key", "admin_api_key"), KEYS)
def test_the_admin_tier_decides_as_sglang_does(api_key, admin_api_key):
    """Every path, header and key setting: the router's answer is SGLang's own
    (``decide_request_auth``, the /pdd/ endpoints at its ADMIN_OPTIONAL level)."""
    from sglang.srt.utils.auth import AuthLevel, decide_request_auth

    for path in PATHS:
        level = AuthLevel.ADMIN_OPTIONAL if path.startswith("/pdd/") else AuthLevel.NORMAL
        for method in ("GET", "POST", "OPTIONS"):
            for header in HEADERS:
                sglang = decide_request_auth(
                    method=method,
                    path=path,
                    authorization_header=header,
                    api_key=api_key,
                    admin_api_key=admin_api_key,
                    auth_level=level,
                ).allowed
                ours = authorized(path, method, header, api_key, admin_api_key)
                assert ours is sglang, (path, method, header, api_key, admin_api_key)


def test_the_admin_key_opens_only_the_operators_endpoints():
    assert authorized("/pdd/drain", "POST", "Bearer admin", "user", "admin")
    assert not authorized("/pdd/drain", "POST", "Bearer user", "user", "admin")
    assert not authorized("/generate", "POST", "Bearer admin", "user", "admin")
