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


def _common(tiny_model) -> dict:
    return dict(model_path=str(tiny_model), dtype=DTYPE, chunked_prefill_size=512)


@pytest.fixture(scope="session")
def colocated(server_group, tiny_model):
    """One plain (co-located) SGLang server: the reference every PD/PDD output must equal."""
    return server_group.start(ServerSpec("colocated", **_common(tiny_model)))[0]


@pytest.fixture(scope="session")
def pd_servers(server_group, tiny_model, colocated):
    """(colocated, prefill, decode): one plain server and one SGLang PD pair over Mooncake TCP."""
    common = _common(tiny_model)
    return (colocated,) + tuple(
        server_group.start(
            ServerSpec("prefill", role="prefill", extra_args=("--pdd-log-transfers",), **common),
            ServerSpec(
                "decode",
                role="decode",
                extra_args=("--disaggregation-decode-enable-radix-cache",),
                **common,
            ),
        )
    )


@pytest.fixture(scope="session")
def pdd_cluster(server_group, tiny_model, colocated):
    """P, RLD and MD (MD behind an emulated 8 Mbit/s, 100 ms link) and a One-Shot router."""
    from sglang_pdd.testbed.cluster import PddClusterConfig, start_cluster
    from sglang_pdd.transfer.wan_link import WanLinkConfig

    cfg = PddClusterConfig(
        model_path=str(tiny_model),
        dtype=DTYPE,
        wan=WanLinkConfig(bandwidth_mbps=8.0, one_way_delay_ms=100.0),
        ttft_slo_s=0.0,  # every request takes P-RLD-MD
    )
    return start_cluster(server_group, cfg)


@pytest.fixture(scope="session")
def catchup_router(server_group, pdd_cluster):
    """A second router on the same instances, handing off in Catch-Up mode."""
    from sglang_pdd.testbed.cluster import start_router

    return start_router(
        server_group,
        pdd_cluster,
        name="router-catchup",
        handoff_mode="catch-up",
        catchup_threshold=4,
        catchup_chunk=64,
        # MD's KV requested after RLD's: a larger backlog when MD is ready, so Catch-Up
        # hands off in several chunks.
        main_transfer_start="after-relay",
    )


@pytest.fixture(scope="session")
def main_only_router(server_group, pdd_cluster):
    """A router that sends everything P-MD (its relay threshold is never reached)."""
    from sglang_pdd.testbed.cluster import start_router

    return start_router(server_group, pdd_cluster, name="router-p-md", ttft_slo_s=1e9)


@pytest.fixture(scope="session")
def slow_relay_router(server_group, pdd_cluster):
    """A router that reaches Relay-Decode through a 3 s one-way link: Main-Decode's ready comes
    before Relay-Decode's first token reaches the router, so the handoff carries one id."""
    from sglang_pdd.testbed.cluster import start_router, start_wan_proxy
    from sglang_pdd.transfer.wan_link import WanLinkConfig

    slow = WanLinkConfig(bandwidth_mbps=1000.0, one_way_delay_ms=3000.0)
    relay_url = start_wan_proxy(server_group, "slow-relay", pdd_cluster.relay.port, slow)
    # Over a 3 s one-way link no idle connection outlives SGLang's 5 s keep-alive: never reuse.
    return start_router(server_group, pdd_cluster, name="router-slow-relay", relay_url=relay_url,
                        upstream_keepalive_s=0)  # fmt: skip


@pytest.fixture(scope="session")
def small_relay(server_group, tiny_model, pdd_cluster):
    """A Relay-Decode with room for only 8192 KV tokens, so one long request makes it busy."""
    common = {**_common(tiny_model), "max_total_tokens": 8192}
    spec = ServerSpec("relay-small", role="decode", extra_args=("--pdd-role", "relay"), **common)
    return server_group.start(spec)[0]


@pytest.fixture(scope="session")
def auto_router(server_group, pdd_cluster, small_relay):
    """An auto-handoff router on the small relay: Catch-Up below half load, One-Shot above."""
    from sglang_pdd.testbed.cluster import start_router

    return start_router(server_group, pdd_cluster, name="router-auto", relay_url=small_relay.url,
                        handoff_mode="auto", catchup_threshold=4, catchup_chunk=64,
                        auto_relay_busy_fraction=0.5)  # fmt: skip


@pytest.fixture(scope="session")
def two_mains_router(server_group, pdd_cluster):
    """A router over the cluster's Main-Decode and a second one (both behind the WAN)."""
    from sglang_pdd.testbed.cluster import add_main_decode, start_router

    second = add_main_decode(server_group, pdd_cluster, "main-b")
    return start_router(server_group, pdd_cluster, name="router-two-mains",
                        mains=[pdd_cluster.mains[0], second])  # fmt: skip
