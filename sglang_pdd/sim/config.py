"""Simulation configuration: contenders (cluster specs), chips, model, engine, links, SLA.

Configs are frozen dataclasses; ``load_sim_config`` builds them from YAML and rejects unknown
keys or bad values with a ValueError naming the key and what is accepted.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.sim.chips import ChipProfile, EngineProfile, ModelProfile
from sglang_pdd.sim.link import LinkConfig

KINDS = ("same-dc", "cross-dc", "pdd")


@dataclass(frozen=True)
class PoolSpec:
    """A pool of identical instances: chip type, instance count, chips per instance.

    host_cache_gb: host-memory prefix-cache tier per chip (0 = HBM only).
    """

    chip: str
    count: int
    chips: int = 1
    host_cache_gb: float = 0.0

    def __post_init__(self) -> None:
        for f, low in (("count", 0), ("chips", 1)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"pool.{f} must be an integer >= {low}, got {v!r}")
        if not isinstance(self.host_cache_gb, (int, float)) or self.host_cache_gb < 0:
            raise ValueError(f"pool.host_cache_gb must be >= 0, got {self.host_cache_gb!r}")

    @property
    def total_chips(self) -> int:
        """Chips in the pool."""
        return self.count * self.chips


@dataclass(frozen=True)
class SlaConfig:
    """A request meets the SLA when its TTFT and its mean inter-token latency are within bounds.

    p99_ttft_s: optional tail bound for a whole run (0 = none): a plan whose TTFT P99 exceeds
        it is infeasible however many requests meet the per-request SLA.
    """

    ttft_s: float = 10.0
    itl_s: float = 0.1
    p99_ttft_s: float = 0.0

    def __post_init__(self) -> None:
        for f in ("ttft_s", "itl_s"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"sla.{f} must be a number > 0, got {v!r}")
        v = self.p99_ttft_s
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise ValueError(f"sla.p99_ttft_s must be a number >= 0 (0 = none), got {v!r}")


@dataclass(frozen=True)
class ClusterSpec:
    """One contender.

    kind: "same-dc" (P and decoders in one datacenter, KV over RDMA), "cross-dc" (decoders in
        the other datacenter, KV over the WAN; decode_cache toggles the decode-side cache), or
        "pdd" (cross-dc plus RLD instances and the pipeline/handoff policies).
    transfer_claims: PDD's router never sends one prefix to MD twice at once: a request whose
        prompt's next block MD lacks is on MD's link waits for that transfer to land, then
        sends only what MD still lacks (a P-MD request's prefill waits with it).
    """

    name: str
    kind: str
    prefill: PoolSpec
    decode: PoolSpec
    relay: PoolSpec | None = None
    decode_cache: bool = True
    wan: LinkConfig = field(default_factory=LinkConfig)
    intra_rtt_s: float = 2e-5
    pipeline: PipelinePolicyConfig = field(default_factory=PipelinePolicyConfig)
    handoff: HandoffPolicyConfig = field(default_factory=HandoffPolicyConfig)
    transfer_claims: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"contender.kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if self.prefill.count < 1 or self.decode.count < 1:
            raise ValueError(f"contender {self.name}: prefill.count and decode.count must be >= 1")
        if self.kind == "pdd" and (self.relay is None or self.relay.count < 1):
            raise ValueError(f"contender {self.name}: kind pdd needs relay.count >= 1")
        if self.kind != "pdd" and self.relay is not None and self.relay.count > 0:
            raise ValueError(f"contender {self.name}: relay instances need kind pdd")

    @property
    def cross_dc(self) -> bool:
        """Whether decoders sit across the WAN."""
        return self.kind != "same-dc"

    def pools(self) -> list[tuple[str, PoolSpec]]:
        """(role, pool) pairs present in this contender."""
        out = [("P", self.prefill)]
        if self.relay is not None and self.relay.count > 0:
            out.append(("RLD", self.relay))
        out.append(("MD" if self.cross_dc else "D", self.decode))
        return out

    def intra_link(self, rdma_bytes_per_s: float, prefill_instances: int) -> LinkConfig:
        """The intra-DC RDMA path: all P NICs together; one P instance's NICs cap a flow."""
        per_flow_gbps = rdma_bytes_per_s * 8 / 1e9
        return LinkConfig(
            bandwidth_gbps=per_flow_gbps * prefill_instances,
            rtt_s=self.intra_rtt_s,
            jitter_s=0.0,
            max_flow_gbps=per_flow_gbps,
        )


@dataclass(frozen=True)
class SimConfig:
    """Everything one ``sglang-pdd sim`` run needs except the workload."""

    chips: dict[str, ChipProfile]
    contenders: tuple[ClusterSpec, ...]
    model: ModelProfile = field(default_factory=ModelProfile)
    engine: EngineProfile = field(default_factory=EngineProfile)
    sla: SlaConfig = field(default_factory=SlaConfig)
    block_tokens: int = 512
    measure_from_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for spec in self.contenders:
            for _, pool in spec.pools():
                self.chip(pool.chip)
        if isinstance(self.block_tokens, bool) or not isinstance(self.block_tokens, int):
            raise ValueError(f"block_tokens must be an integer >= 1, got {self.block_tokens!r}")
        if self.block_tokens < 1:
            raise ValueError(f"block_tokens must be an integer >= 1, got {self.block_tokens!r}")
        if not isinstance(self.measure_from_s, (int, float)) or not self.measure_from_s >= 0:
            raise ValueError(f"measure_from_s must be >= 0, got {self.measure_from_s!r}")

    def chip(self, name: str) -> ChipProfile:
        """Chip profile by name."""
        if name not in self.chips:
            raise ValueError(f"chip {name!r} is not defined; defined chips: {sorted(self.chips)}")
        return self.chips[name]

    def cost_per_hour(self, spec: ClusterSpec) -> float:
        """Hardware cost of a contender per hour: its chips plus its WAN capacity."""
        cost = sum(p.total_chips * self.chip(p.chip).cost_per_hour for _, p in spec.pools())
        if spec.cross_dc:
            cost += spec.wan.bandwidth_gbps * spec.wan.cost_per_gbps_hour
        return cost


def build(cls, data: object, where: str):
    """Build a frozen dataclass from a mapping, naming unknown keys and accepted ones."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a mapping, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; accepted: {sorted(names)}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _num(value: object, where: str) -> object:
    # YAML reads "1e9" as a string; accept it as a number.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{where} must be a number, got {value!r}") from None
    return value


def _clean(data: dict, where: str) -> dict:
    return {
        k: (
            _num(v, f"{where}.{k}")
            if isinstance(v, str) and k not in ("name", "chip", "kind", "mode")
            else v
        )
        for k, v in data.items()
    }


def build_contender(data: dict, default_wan: LinkConfig, where: str) -> ClusterSpec:
    """Build one contender from a mapping (pools, links and policies nested)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a mapping")
    d = dict(data)
    for role in ("prefill", "decode", "relay"):
        if d.get(role) is not None:
            d[role] = build(PoolSpec, _clean(d[role], f"{where}.{role}"), f"{where}.{role}")
    d["wan"] = (
        build(LinkConfig, _clean(d["wan"], f"{where}.wan"), f"{where}.wan")
        if "wan" in d
        else default_wan
    )
    if "pipeline" in d:
        d["pipeline"] = build(PipelinePolicyConfig, d["pipeline"], f"{where}.pipeline")
    if "handoff" in d:
        d["handoff"] = build(HandoffPolicyConfig, d["handoff"], f"{where}.handoff")
    return build(ClusterSpec, d, where)


def sim_config_from_dict(data: dict, base: SimConfig) -> SimConfig:
    """Overlay a YAML mapping on a base config (built-in defaults)."""
    if not isinstance(data, dict):
        raise ValueError("the config file must hold a mapping")
    allowed = {f.name for f in dataclasses.fields(SimConfig)} | {"wan"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"config: unknown key(s) {unknown}; accepted: {sorted(allowed)}")
    chips = dict(base.chips)
    for name, spec in (data.get("chips") or {}).items():
        chips[name] = build(
            ChipProfile, _clean({"name": name, **spec}, f"chips.{name}"), f"chips.{name}"
        )
    default_wan = base.contenders[0].wan if base.contenders else LinkConfig()
    if "wan" in data:
        default_wan = build(LinkConfig, _clean(data["wan"], "wan"), "wan")
    if "contenders" in data:
        contenders = tuple(
            build_contender(c, default_wan, f"contenders[{i}]")
            for i, c in enumerate(data["contenders"])
        )
    else:
        contenders = tuple(
            dataclasses.replace(c, wan=default_wan) if "wan" in data else c for c in base.contenders
        )
    kwargs = {
        "chips": chips,
        "contenders": contenders,
        "model": build(
            ModelProfile,
            _clean({**dataclasses.asdict(base.model), **(data.get("model") or {})}, "model"),
            "model",
        ),
        "engine": build(
            EngineProfile,
            {**dataclasses.asdict(base.engine), **(data.get("engine") or {})},
            "engine",
        ),
        "sla": build(SlaConfig, {**dataclasses.asdict(base.sla), **(data.get("sla") or {})}, "sla"),
    }
    for k in ("block_tokens", "measure_from_s", "seed"):
        kwargs[k] = data.get(k, getattr(base, k))
    return SimConfig(**kwargs)


def load_sim_config(path: str | Path, base: SimConfig) -> SimConfig:
    """Read a YAML sim config on top of ``base``."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    return sim_config_from_dict(data, base)


def load_chips(path: str | Path) -> dict[str, ChipProfile]:
    """Read a chips YAML: ``{chips: {NAME: {peak_tflops, memory_gb, ...}}}`` or the bare map."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    data = data.get("chips", data) if isinstance(data, dict) else data
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected a mapping of chip name -> profile")
    return {
        name: build(ChipProfile, _clean({"name": name, **spec}, f"chips.{name}"), f"chips.{name}")
        for name, spec in data.items()
    }


def finite(x: float) -> float:
    """x, or -1.0 when x is not finite (JSON has no inf)."""
    return x if math.isfinite(x) else -1.0
