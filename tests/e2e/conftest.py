"""Real SGLang servers on the CPU, started once per test session and shared by the e2e tests."""

from __future__ import annotations

import pytest

from sglang_pdd.testbed.launcher import ServerGroup, ServerSpec

# float32 so that any later comparison between differently batched computations (extend vs
# decode) sits far below argmax ties; PD itself is bit-identical in any dtype.
DTYPE = "float32"

# A failed e2e test's report carries these lines of every running server's log: on CI the logs
# are gone with the clone, and a router's warnings say why a request took the path it took.
_NOTABLE = ("WARNING", "ERROR", "Error", "Traceback", "sglang-pdd")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    group = item.funcargs.get("server_group") if hasattr(item, "funcargs") else None
    if report.when != "call" or not report.failed or group is None:
        return
    for server in group.servers:
        lines = [
            line
            for line in server.log_text().splitlines()
            if any(word in line for word in _NOTABLE)
        ]
        if lines:
            report.sections.append(
                (
                    f"log of {server.name} (notable lines)",
                    "\n".join(line[:400] for line in lines[-15:]),
                )
            )


@pytest.fixture(scope="session")
def server_group(tmp_path_factory):
    """The session's servers. Those that can fork from one process that imported SGLang once
    (``warm_start.py``): each then starts without ~12 s of import."""
    group = ServerGroup(log_dir=tmp_path_factory.mktemp("server-logs"), warm_start=True)
    yield group
    group.stop()


def _common(tiny_model) -> dict:
    return dict(model_path=str(tiny_model), dtype=DTYPE, chunked_prefill_size=512)


@pytest.fixture(scope="session")
def colocated_launched(server_group, tiny_model):
    """The co-located server, launched but not waited for: the session's other servers start
    beside it (a lone server's start leaves one of CI's two cores idle)."""
    # --tool-call-parser: the router parses tool calls with the same parser (pdd_cluster).
    extra = ("--pdd-seeded-sampling", "--tool-call-parser", "qwen25")
    spec = ServerSpec("colocated", extra_args=extra, **_common(tiny_model))
    return server_group.launch(spec)


@pytest.fixture(scope="session")
def colocated(server_group, colocated_launched):
    """One plain (co-located) SGLang server: the reference every PD/PDD output must equal."""
    server_group.wait_ready(colocated_launched)
    return colocated_launched


# Fixtures used by one module only are module-scoped and stop their servers when it ends: the
# whole session's servers at once do not fit CI's 24 GB machine.


@pytest.fixture(scope="module")
def pd_servers(server_group, tiny_model, colocated):
    """(colocated, prefill, decode): one plain server and one SGLang PD pair over Mooncake TCP.

    The decode server starts its subprocesses with SGLang's own spawn, as on a GPU (every other
    test server forks them): the plugin must load in spawned subprocesses through its entry
    point."""
    common = _common(tiny_model)
    yield (colocated,) + tuple(
        server_group.start(
            ServerSpec("pd-prefill", role="prefill", extra_args=("--pdd-log-transfers",), **common),
            ServerSpec(
                "pd-decode",
                role="decode",
                extra_args=("--disaggregation-decode-enable-radix-cache",),
                fork_subprocesses=False,
                **common,
            ),
        )
    )
    server_group.stop_named("pd-prefill", "pd-decode")


@pytest.fixture(scope="session")
def pdd_cluster(server_group, tiny_model, colocated_launched):
    """P, RLD and MD (MD behind an emulated 8 Mbit/s, 100 ms link) and a One-Shot router."""
    from sglang_pdd.testbed.cluster import PddClusterConfig, start_cluster
    from sglang_pdd.transfer.wan_link import WanLinkConfig

    cfg = PddClusterConfig(
        model_path=str(tiny_model),
        dtype=DTYPE,
        wan=WanLinkConfig(bandwidth_mbps=8.0, one_way_delay_ms=100.0),
        ttft_slo_s=0.0,  # every request takes P-RLD-MD
        seeded_sampling=True,  # like the co-located reference: seeded requests are comparable
        tool_call_parser="qwen25",  # as the co-located reference's
    )
    return start_cluster(server_group, cfg)


@pytest.fixture(scope="session")
def held_links(server_group, pdd_cluster):
    """A gate to the cluster's RLD and a stallable link (across the emulated WAN) to MD's
    control socket, for routers whose handoff points the tests choose: see ``held_links.py``."""
    from sglang_pdd.testbed.cluster import start_link_proxy
    from sglang_pdd.testbed.held_links import HeldLinks
    from sglang_pdd.testbed.relay_gate import RelayGate

    control_port = pdd_cluster.mains[0].control_port
    control = start_link_proxy(server_group, "held-control", control_port, pdd_cluster.config.wan)
    links = HeldLinks(RelayGate(pdd_cluster.relay.url), control)
    yield links
    links.release()


def _held_router(server_group, pdd_cluster, held_links, name, **overrides):
    """A router over ``held_links``: it hands off at the points its tests choose (the tail
    rule is off, and RLD's ids are held at the final handoff, unless ``overrides`` say
    otherwise)."""
    from dataclasses import replace

    from sglang_pdd.testbed.cluster import start_router

    site = replace(
        pdd_cluster.mains[0], control_via_wan=held_links.control.url.replace("http://", "tcp://")
    )
    return start_router(
        server_group,
        pdd_cluster,
        name=name,
        relay_url=held_links.relay.url,
        mains=[site],
        **{"tail_on_relay": False, "handoff_switch": "hold", **overrides},
    )


@pytest.fixture(scope="session")
def held_router(server_group, pdd_cluster, held_links):
    """A One-Shot router on the cluster's instances, over ``held_links``."""
    return _held_router(server_group, pdd_cluster, held_links, "router-held")


@pytest.fixture(scope="module")
def overlap_router(server_group, pdd_cluster, held_links):
    """A One-Shot router over ``held_links`` whose final handoff overlaps: RLD streams on."""
    yield _held_router(
        server_group, pdd_cluster, held_links, "router-overlap", handoff_switch="overlap"
    )
    server_group.stop_named("router-overlap")


@pytest.fixture(scope="session")
def impatient_router(server_group, pdd_cluster, held_links):
    """A One-Shot router that ends a request whose decoding instance is silent for 2 s (and
    does not migrate it: what the limit itself does is under test)."""
    return _held_router(
        server_group,
        pdd_cluster,
        held_links,
        "router-impatient",
        upstream_idle_timeout_s=2.0,
        migration_limit=0,
    )


@pytest.fixture(scope="session")
def catchup_router(server_group, pdd_cluster, held_links):
    """A Catch-Up router on the cluster's instances, over ``held_links``."""
    return _held_router(
        server_group,
        pdd_cluster,
        held_links,
        "router-catchup",
        handoff_mode="catch-up",
        catchup_threshold=4,
        catchup_chunk=64,
    )


@pytest.fixture(scope="session")
def main_only_router(server_group, pdd_cluster):
    """A router that sends everything P-MD (its relay threshold is never reached)."""
    from sglang_pdd.testbed.cluster import start_router

    return start_router(server_group, pdd_cluster, name="router-p-md", ttft_slo_s=1e9)


@pytest.fixture(scope="module")
def small_relay(server_group, tiny_model, pdd_cluster):
    """A Relay-Decode with room for only 8192 KV tokens, so one long request makes it busy."""
    common = {**_common(tiny_model), "max_total_tokens": 8192}
    spec = ServerSpec("relay-small", role="decode", extra_args=("--pdd-role", "relay"), **common)
    yield server_group.start(spec)[0]
    server_group.stop_named("relay-small")


@pytest.fixture(scope="module")
def small_relay_links(small_relay, held_links):
    """A gate to the small relay, and (shared) the stallable link to MD's control socket."""
    from sglang_pdd.testbed.held_links import HeldLinks
    from sglang_pdd.testbed.relay_gate import RelayGate

    links = HeldLinks(RelayGate(small_relay.url), held_links.control)
    yield links
    links.release()


@pytest.fixture(scope="module")
def auto_router(server_group, pdd_cluster, small_relay_links):
    """An auto-handoff router on the small relay: Catch-Up below half load, One-Shot above."""
    yield _held_router(
        server_group,
        pdd_cluster,
        small_relay_links,
        "router-auto",
        handoff_mode="auto",
        catchup_threshold=4,
        catchup_chunk=64,
        auto_relay_busy_fraction=0.5,
    )
    server_group.stop_named("router-auto")


@pytest.fixture(scope="module")
def two_mains_router(server_group, pdd_cluster):
    """A router over the cluster's Main-Decode and a second one (both behind the WAN)."""
    from sglang_pdd.testbed.cluster import add_main_decode, start_router

    second = add_main_decode(server_group, pdd_cluster, "main-b")
    yield start_router(
        server_group, pdd_cluster, name="router-two-mains", mains=[pdd_cluster.mains[0], second]
    )
    server_group.stop_named("router-two-mains", "main-b")
