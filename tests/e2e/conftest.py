"""Real SGLang servers on the CPU, started once per test session and shared by the e2e tests."""

from __future__ import annotations

import pytest

from sglang_pdd.testbed.launcher import ServerGroup, ServerSpec

# float32 so that any later comparison between differently batched computations (extend vs
# decode) sits far below argmax ties; PD itself is bit-identical in any dtype.
DTYPE = "float32"


@pytest.fixture(scope="session")
def server_group(tmp_path_factory):
    group = ServerGroup(log_dir=tmp_path_factory.mktemp("server-logs"))
    yield group
    group.stop()


@pytest.fixture(scope="session")
def pd_servers(server_group, tiny_model):
    """(colocated, prefill, decode): one plain server and one SGLang PD pair over Mooncake TCP."""
    common = dict(model_path=str(tiny_model), dtype=DTYPE, chunked_prefill_size=512)
    return tuple(
        server_group.start(
            ServerSpec("colocated", **common),
            ServerSpec("prefill", role="prefill", extra_args=("--pdd-log-transfers",), **common),
            ServerSpec(
                "decode",
                role="decode",
                extra_args=("--disaggregation-decode-enable-radix-cache",),
                **common,
            ),
        )
    )
