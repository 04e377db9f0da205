"""Built-in defaults: the brief's chips A and B, a model, a cross-city link and three contenders.

Every number here is a calibration constant documented in docs/simulator.md. Chip B is derived
from chip A by the brief's ratios (81% of A on prefill, 210% on decode, 20-30% dearer), not
tuned per result.
"""

from __future__ import annotations

from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.sim.chips import ChipProfile, EngineProfile, ModelProfile
from sglang_pdd.sim.config import ClusterSpec, PoolSpec, SimConfig, SlaConfig
from sglang_pdd.sim.link import LinkConfig

# Chip A: a prefill-strong accelerator (the baseline); cost 1.0 per chip-hour is the unit.
CHIP_A = ChipProfile(
    name="A",
    peak_tflops=600.0,
    memory_gb=96.0,
    memory_bw_gbs=1600.0,
    interconnect_gbs=50.0,
    cost_per_hour=1.0,
)
# Chip B: the brief's lopsided chip: 81% of A's prefill, 210% of its decode, 25% dearer.
CHIP_B = ChipProfile(
    name="B",
    peak_tflops=CHIP_A.peak_tflops * 0.81,
    memory_gb=96.0,
    memory_bw_gbs=CHIP_A.memory_bw_gbs * 2.1,
    interconnect_gbs=50.0,
    cost_per_hour=1.25,
)
DEFAULT_CHIPS = {"A": CHIP_A, "B": CHIP_B}

# A large MoE with compressed KV: 24B active parameters, 240 GB of FP8 weights, 50 KB of KV
# per token (the brief's typical figure), sparse/compressed attention.
DEFAULT_MODEL = ModelProfile(
    name="agentic-moe-240b",
    active_params_b=24.0,
    weight_gb=240.0,
    kv_bytes_per_token=50_000,
    attn_flops_per_ctx_token=2.0e5,
    comm_bytes_per_token=2.0e5,
)
DEFAULT_ENGINE = EngineProfile()
DEFAULT_SLA = SlaConfig(ttft_s=10.0, itl_s=0.1)

# A cross-city line: 100 Gbps, 30 ms RTT, 20 ms mean jitter, one KV transfer (a TCP stream
# set over a long-haul path) reaching at most 5 Gbps; 0.01 chip-hours per Gbps-hour.
CROSS_CITY_WAN = LinkConfig(
    bandwidth_gbps=100.0, rtt_s=0.03, jitter_s=0.02, max_flow_gbps=5.0, cost_per_gbps_hour=0.01
)

P_CHIPS = 8  # chips per prefill instance
D_CHIPS = 8  # chips per decode instance (RLD is smaller: minimal deployment)
R_CHIPS = 4


def default_contenders(
    wan: LinkConfig = CROSS_CITY_WAN,
    prefill: int = 5,
    same_dc_decode: int = 6,
    main_decode: int = 4,
    relay: int = 1,
) -> tuple[ClusterSpec, ...]:
    """Same-DC PD on chip A, cross-DC PD (A prefill, B decode, with DRC) and PDD."""
    p = PoolSpec("A", prefill, P_CHIPS)
    return (
        ClusterSpec("same-dc-pd", "same-dc", p, PoolSpec("A", same_dc_decode, D_CHIPS)),
        ClusterSpec("cross-dc-pd", "cross-dc", p, PoolSpec("B", main_decode, D_CHIPS), wan=wan),
        ClusterSpec(
            "pdd",
            "pdd",
            p,
            PoolSpec("B", main_decode, D_CHIPS),
            relay=PoolSpec("A", relay, R_CHIPS),
            wan=wan,
            pipeline=PipelinePolicyConfig(),
            handoff=HandoffPolicyConfig(mode="auto"),
        ),
    )


def default_sim_config() -> SimConfig:
    """The configuration ``sglang-pdd sim`` uses without --config."""
    return SimConfig(
        chips=dict(DEFAULT_CHIPS),
        contenders=default_contenders(),
        model=DEFAULT_MODEL,
        engine=DEFAULT_ENGINE,
        sla=DEFAULT_SLA,
    )
