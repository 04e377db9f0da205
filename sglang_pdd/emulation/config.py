"""``EmulationConfig``: the chip, model and scales one emulated server runs with.

Built from the ``--pdd-emulate-*`` flags (``PddServerConfig.emulation``): a chip named by the
simulator's built-in profiles (``A``, ``B``) or ``FILE.yaml:NAME`` from a chips file, the model
from the simulator's defaults or a simulator config file's ``model:`` and ``engine:`` sections.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from sglang_pdd.sim.chips import ChipProfile, EngineProfile, InstancePerf, ModelProfile


@dataclass(frozen=True)
class EmulationConfig:
    """What one server emulates. token_scale: model tokens per testbed token (compute and KV
    bytes); time_dilation: every emulated duration multiplied by it."""

    chip: ChipProfile
    model: ModelProfile
    engine: EngineProfile
    chips: int = 8
    token_scale: int = 1
    time_dilation: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.chips, bool) or not isinstance(self.chips, int) or self.chips < 1:
            raise ValueError(f"--pdd-emulate-chips must be an integer >= 1, got {self.chips!r}")
        k = self.token_scale
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"--pdd-token-scale must be an integer >= 1, got {k!r}")
        d = self.time_dilation
        if not isinstance(d, (int, float)) or not math.isfinite(d) or not 0 < d <= 1000:
            raise ValueError(f"--pdd-time-dilation must be in (0, 1000], got {d!r}")

    @cached_property
    def perf(self) -> InstancePerf:
        """The instance's step-time model (``chips`` chips serving the model)."""
        return InstancePerf(self.chip, self.model, self.engine, self.chips)

    def model_kv_bytes(self, testbed_tokens: float) -> float:
        """Bytes of the emulated model's KV for ``testbed_tokens`` tokens."""
        return testbed_tokens * self.token_scale * self.model.kv_bytes_per_token


def resolve_chip(spec: str) -> ChipProfile:
    """``A`` / ``B`` (the simulator's built-in chips) or ``FILE.yaml:NAME`` (a chips file, as
    ``sglang-pdd sim --chips`` reads); ValueError naming ``--pdd-emulate-chip`` otherwise."""
    from sglang_pdd.sim.config import load_chips
    from sglang_pdd.sim.defaults import DEFAULT_CHIPS

    if spec in DEFAULT_CHIPS:
        return DEFAULT_CHIPS[spec]
    path, sep, name = spec.rpartition(":")
    if not sep or not path:
        raise ValueError(
            f"--pdd-emulate-chip {spec!r}: name a built-in chip ({', '.join(DEFAULT_CHIPS)}) or "
            "FILE.yaml:NAME"
        )
    try:
        chips = load_chips(path)
    except OSError as exc:
        raise ValueError(f"--pdd-emulate-chip: cannot read {path}: {exc}") from None
    if name not in chips:
        raise ValueError(f"--pdd-emulate-chip: {path} defines {sorted(chips)}, not {name!r}")
    return chips[name]


def resolve_model(path: str) -> tuple[ModelProfile, EngineProfile]:
    """The simulator's default model and engine, or those of a simulator config file (its
    ``model:`` and ``engine:`` sections over the defaults)."""
    from sglang_pdd.sim.config import load_sim_config
    from sglang_pdd.sim.defaults import default_sim_config

    base = default_sim_config()
    if not path:
        return base.model, base.engine
    try:
        cfg = load_sim_config(path, base)
    except OSError as exc:
        raise ValueError(f"--pdd-emulate-model: cannot read {path}: {exc}") from None
    return cfg.model, cfg.engine
