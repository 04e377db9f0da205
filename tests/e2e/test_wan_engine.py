"""Prefill's second Mooncake engine end to end: P (``--pdd-wan-transport tcp``), RLD and MD on
real CPU servers, a P-RLD-MD request through the router, and P's per-engine byte counters on its
``/metrics``: every byte to Main-Decode (127.0.0.2) left through the WAN engine, every byte to
Relay-Decode (127.0.0.1) through the local one, and the answer is the co-located server's.

On this host both engines are TCP (no RDMA device), so only the counters can tell them apart.
"""

from __future__ import annotations

import pytest

from sglang_pdd.testbed.client import generate, wait_router_settled
from sglang_pdd.transfer.wan_engine import engine_split, read_engine_bytes
from tests.e2e.prompts import varied_prompts

pytestmark = pytest.mark.servers

LOCAL_HOST, WAN_HOST = "127.0.0.1", "127.0.0.2"


@pytest.fixture(scope="module")
def two_engine_cluster(server_group, tiny_model, colocated):
    """P with a TCP engine for datacenter B beside its local one, RLD, one MD behind the
    emulated WAN, and a router sending every request P-RLD-MD."""
    from sglang_pdd.testbed.cluster import (
        DATACENTER_B_HOST,
        PddCluster,
        PddClusterConfig,
        launch_main_decode,
        start_router,
    )
    from sglang_pdd.testbed.launcher import ServerSpec
    from sglang_pdd.transfer.wan_link import WanLinkConfig

    cfg = PddClusterConfig(
        model_path=str(tiny_model),
        dtype="float32",
        wan=WanLinkConfig(bandwidth_mbps=50.0, one_way_delay_ms=20.0),
        ttft_slo_s=0.0,  # every request P-RLD-MD
        kv_events=False,
    )
    common = dict(
        model_path=cfg.model_path,
        dtype=cfg.dtype,
        chunked_prefill_size=cfg.chunked_prefill_size,
        max_total_tokens=cfg.max_total_tokens,
    )
    wan = cfg.wan
    prefill_args = (
        *("--pdd-role", "prefill", "--pdd-wan-hosts", DATACENTER_B_HOST),
        *("--pdd-wan-transport", "tcp", "--enable-metrics"),
        *("--pdd-wan-bandwidth-mbps", str(wan.bandwidth_mbps)),
        *("--pdd-wan-delay-ms", str(wan.one_way_delay_ms)),
    )
    names = ("prefill-2e", "relay-2e")
    stub = PddCluster(cfg, None, None, [])
    main = launch_main_decode(server_group, stub, "main-2e")
    prefill, relay = server_group.start(
        ServerSpec(names[0], role="prefill", extra_args=prefill_args, **common),
        ServerSpec(names[1], role="decode", extra_args=("--pdd-role", "relay"), **common),
    )
    site = main.ready()
    cluster = PddCluster(cfg, prefill, relay, [site])
    cluster.router = start_router(server_group, cluster, name="router-2e")
    yield cluster
    server_group.stop_named("router-2e", *names, *main.names)


def test_every_md_byte_leaves_through_the_wan_engine_and_every_rld_byte_through_the_local(
    two_engine_cluster, colocated
):
    cluster = two_engine_cluster
    log = cluster.prefill.log_text()
    assert "Mooncake engines: local" in log and f"(tcp) for {WAN_HOST}" in log, log[-2000:]

    prompt = varied_prompts(5, seed=45)[4]  # over 2,000 tokens: many writes on both paths
    body = {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": 48}}
    got = generate(cluster.router_url, body)
    assert got.status == 200, got.body
    pdd = got.body["meta_info"]["pdd"]
    assert pdd["pipeline"] == "P-RLD-MD", pdd
    assert got.output_ids == generate(colocated.url, body).output_ids  # parity kept
    wait_router_settled(cluster.router_url)

    per_engine = read_engine_bytes(cluster.prefill.url)
    print(f"P's per-engine KV bytes: {per_engine}")
    assert set(per_engine) == {"local", "wan"}, per_engine
    assert set(per_engine["wan"]) == {WAN_HOST} and per_engine["wan"][WAN_HOST] > 0
    assert set(per_engine["local"]) == {LOCAL_HOST} and per_engine["local"][LOCAL_HOST] > 0
    assert engine_split(per_engine, [WAN_HOST]).misrouted_bytes == 0
    # The prompt went to both in full: MD's copy is no smaller than RLD's.
    assert per_engine["wan"][WAN_HOST] >= per_engine["local"][LOCAL_HOST]
