"""Real SGLang servers on emulated accelerators: outputs unchanged, forwards padded to the chip's
time, KV charged at the emulated model's size, overruns counted."""

from __future__ import annotations

import re

import pytest
import requests

from sglang_pdd.testbed.client import generate, generate_all
from tests.e2e.conftest import DTYPE
from tests.e2e.prompts import varied_prompts

pytestmark = pytest.mark.servers
GREEDY = {"temperature": 0.0, "max_new_tokens": 40, "ignore_eos": True}
_COUNTERS = re.compile(r"sglang-pdd: emulation forwards=(\d+) overruns=(\d+) emulated_s=([\d.]+)")
_SCALE = re.compile(r"sglang-pdd: emulation chip=(\S+) .* kv_scale=([\d.]+)")
_KV = re.compile(r"kv-transfer to=\S+ bytes=(\d+) total=\d+ model_bytes=(\d+)")


@pytest.fixture(scope="module")
def emulated_group(tmp_path_factory):
    """This module's servers, in a group of their own (their names are the session cluster's)."""
    from sglang_pdd.testbed.launcher import ServerGroup

    with ServerGroup(log_dir=tmp_path_factory.mktemp("emulated-logs"), warm_start=True) as group:
        yield group


@pytest.fixture(scope="module")
def emulated_cluster(emulated_group, tiny_model, colocated):
    """P and RLD on chip A, MD on chip B (the brief's chips), a router relaying every request."""
    from sglang_pdd.testbed.cluster import PddClusterConfig, start_cluster
    from sglang_pdd.testbed.emulated_chips import ChipEmulation
    from sglang_pdd.transfer.wan_link import WanLinkConfig

    cfg = PddClusterConfig(
        model_path=str(tiny_model),
        dtype=DTYPE,
        wan=WanLinkConfig(bandwidth_mbps=1000.0, one_way_delay_ms=10.0),
        ttft_slo_s=0.0,  # every request takes P-RLD-MD
        emulation=ChipEmulation(token_scale=4),
    )
    return start_cluster(emulated_group, cfg)


@pytest.fixture(scope="module")
def overrunning_server(emulated_group, tiny_model, tmp_path_factory):
    """A co-located server emulating a chip far faster than this host: every forward overruns."""
    from sglang_pdd.testbed.launcher import ServerSpec

    chips = tmp_path_factory.mktemp("chips") / "chips.yaml"
    chips.write_text(
        "chips:\n  Z:\n    peak_tflops: 1.0e9\n    memory_gb: 1.0e6\n    memory_bw_gbs: 1.0e9\n"
        "    interconnect_gbs: 1.0e6\n    cost_per_hour: 1\n"
    )
    model = chips.parent / "model.yaml"
    model.write_text("engine:\n  step_overhead_s: 0\n")
    extra = ("--pdd-emulate-chip", f"{chips}:Z", "--pdd-emulate-model", str(model))
    spec = ServerSpec(
        "overrunning",
        model_path=str(tiny_model),
        dtype=DTYPE,
        chunked_prefill_size=512,
        extra_args=(*extra, "--enable-metrics"),
        # spawned, as on a GPU: its scheduler imports prometheus_client after SGLang set
        # PROMETHEUS_MULTIPROC_DIR, so the scheduler's counters reach /metrics
        fork_subprocesses=False,
    )
    (server,) = emulated_group.start(spec)
    return server


def _counters(server) -> tuple[int, int, float]:
    found = _COUNTERS.findall(server.log_text())
    assert found, f"{server.name}: no emulation counters in its log"
    forwards, overruns, emulated = found[-1]
    return int(forwards), int(overruns), float(emulated)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_outputs_through_emulated_pdd_equal_the_colocated_server(
    emulated_cluster, colocated, stream
):
    bodies = [{"text": p, "sampling_params": GREEDY} for p in varied_prompts()[:4]]
    expected = generate_all(colocated.url, bodies)
    for body, want in zip(bodies, expected, strict=True):
        got = generate(emulated_cluster.router_url, body, stream=stream)
        assert got.status == 200, got.body
        assert got.output_ids == want.output_ids
        assert got.body["meta_info"]["pdd"]["pipeline"] == "P-RLD-MD"


def test_every_server_paced_its_forwards_on_its_chip(emulated_cluster):
    from sglang_pdd.emulation.config import EmulationConfig
    from sglang_pdd.emulation.forward import ForwardPacer, ForwardShape
    from sglang_pdd.sim.defaults import CHIP_A, CHIP_B, DEFAULT_ENGINE, DEFAULT_MODEL

    generate(emulated_cluster.router_url, {"text": "warm", "sampling_params": GREEDY})
    chips = {}
    for server in (emulated_cluster.prefill, emulated_cluster.relay, emulated_cluster.main):
        forwards, _, emulated_s = _counters(server)
        assert forwards > 0 and emulated_s > 0, server.name
        chips[server.name] = _SCALE.search(server.log_text()).group(1)
    assert chips == {"prefill": "A", "relay": "A", "main": "B"}
    # A streamed answer cannot come faster than one emulated decode step per token: the
    # quickest step either decoding chip takes (batch 1, the shortest context).
    fastest = min(
        ForwardPacer(
            EmulationConfig(chip, DEFAULT_MODEL, DEFAULT_ENGINE, token_scale=4),
            on_decode_server=True,
        ).duration(ForwardShape(decode_batch=1, decode_context=1))
        for chip in (CHIP_A, CHIP_B)
    )
    got = generate(
        emulated_cluster.router_url, {"text": "pace", "sampling_params": GREEDY}, stream=True
    )
    assert got.status == 200
    (t_first, n_first), (t_last, n_last) = got.token_times[0], got.token_times[-1]
    assert n_last == GREEDY["max_new_tokens"]
    assert t_last - t_first >= (n_last - n_first) * fastest * 0.99


def test_kv_is_charged_at_the_emulated_models_size(emulated_cluster):
    p = emulated_cluster.prefill
    generate(emulated_cluster.router_url, {"text": varied_prompts()[0], "sampling_params": GREEDY})
    scale = float(_SCALE.search(p.log_text()).group(2))
    writes = [(int(b), int(m)) for b, m in _KV.findall(p.log_text())]
    assert writes, "P logged no KV writes"
    # 50 KB per model token, 4 model tokens per testbed token, over the tiny model's real bytes
    assert scale > 100
    for real, model in writes:
        assert model == pytest.approx(real * scale, rel=1e-6, abs=1)


def test_a_chip_faster_than_the_host_counts_overruns(overrunning_server, colocated):
    body = {"text": varied_prompts()[1], "sampling_params": {**GREEDY, "max_new_tokens": 8}}
    got, want = generate(overrunning_server.url, body), generate(colocated.url, body)
    assert got.output_ids == want.output_ids
    generate(overrunning_server.url, {"text": "x", "sampling_params": GREEDY})  # a later log line
    forwards, overruns, _ = _counters(overrunning_server)
    assert forwards > 0 and overruns == forwards
    metrics = requests.get(f"{overrunning_server.url}/metrics", timeout=30).text
    counted = re.search(r"^sglang_pdd:emulated_overruns_total\S* ([\d.e+]+)$", metrics, re.M)
    assert counted and float(counted.group(1)) >= overruns
