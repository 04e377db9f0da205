"""Small hand-built configurations for simulator tests."""

from __future__ import annotations

from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.sim.chips import ChipProfile, EngineProfile, ModelProfile
from sglang_pdd.sim.config import ClusterSpec, PoolSpec, SimConfig, SlaConfig
from sglang_pdd.sim.link import LinkConfig
from sglang_pdd.sim.workload import Request

# A toy chip and model with round numbers: 100 TFLOP/s, 100 GB/s memory bandwidth.
CHIP = ChipProfile(
    "X",
    peak_tflops=100.0,
    memory_gb=100.0,
    memory_bw_gbs=100.0,
    interconnect_gbs=10.0,
    cost_per_hour=1.0,
)
MODEL = ModelProfile(
    name="toy",
    active_params_b=1.0,
    weight_gb=10.0,
    kv_bytes_per_token=1000,
    attn_flops_per_ctx_token=0.0,
    comm_bytes_per_token=0.0,
)
# Efficiency 1 at any size, no overhead: prefill of n tokens takes n * 2e9 / 1e14 s.
ENGINE = EngineProfile(
    mfu=1.0,
    mfu_half_tokens=0.0,
    mbu=1.0,
    step_overhead_s=0.0,
    chunk_tokens=100_000,
    max_decode_batch=64,
    memory_reserve_fraction=0.0,
)
WAN = LinkConfig(bandwidth_gbps=8.0, rtt_s=0.01, jitter_s=0.0, cost_per_gbps_hour=0.0)


def spec(kind: str, prefill: int = 1, decode: int = 1, relay: int = 1, **kw) -> ClusterSpec:
    """A contender on chip X with the toy WAN."""
    return ClusterSpec(
        name=kind,
        kind=kind,
        prefill=PoolSpec("X", prefill),
        decode=PoolSpec("X", decode),
        relay=PoolSpec("X", relay) if kind == "pdd" else None,
        wan=kw.pop("wan", WAN),
        pipeline=kw.pop("pipeline", PipelinePolicyConfig()),
        handoff=kw.pop("handoff", HandoffPolicyConfig()),
        **kw,
    )


def config(*specs: ClusterSpec, sla: SlaConfig | None = None, chips=None) -> SimConfig:
    """A SimConfig over the toy chip/model/engine."""
    return SimConfig(
        chips=chips or {"X": CHIP},
        contenders=tuple(specs),
        model=MODEL,
        engine=ENGINE,
        sla=sla or SlaConfig(ttft_s=100.0, itl_s=10.0),
    )


def req(rid: int, t: float, inp: int, out: int, hashes) -> Request:
    """One request."""
    return Request(rid, t, inp, out, tuple(hashes))
