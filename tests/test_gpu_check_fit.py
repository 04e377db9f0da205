"""``benchmark/gpu_check.py``'s fitting, on synthetic timings: forwards timed by the
simulator's own step-time model (``sglang_pdd/sim/chips.py``) with known engine constants are
fitted back to those constants, and the profile it writes loads as a simulator config. Plus the
whole script on the CPU at tiny sizes (its smoke test)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest
import yaml

from sglang_pdd.sim.chips import ChipProfile, EngineProfile, InstancePerf, ModelProfile
from sglang_pdd.sim.config import SimConfig, sim_config_from_dict

SCRIPT = Path(__file__).resolve().parent.parent / "benchmark" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))  # it imports shared_flags from its folder
    spec = importlib.util.spec_from_file_location("benchmark_gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _synthetic(gc, engine: EngineProfile, noise: float = 0.0, seed: int = 0):
    """Prefill and decode points of llama-3-8b on an H100-like chip, timed by the simulator's
    step-time model with ``engine`` (times scaled by 1 +- ``noise``, uniform)."""
    shape, dtype_bytes = gc.SHAPES["llama-3-8b"], 2
    chip = ChipProfile("H100", 989.0, 80.0, 3350.0, 450.0, 1.0)
    model = ModelProfile(
        name="llama-3-8b",
        active_params_b=shape.params() / 1e9,
        weight_gb=shape.params() * dtype_bytes / 1e9,
        kv_bytes_per_token=shape.kv_bytes_per_token(dtype_bytes),
        attn_flops_per_ctx_token=shape.attn_flops_per_ctx_token(),
    )
    perf = InstancePerf(chip, model, engine, chips=1)
    rng = random.Random(seed)

    def jitter(t: float) -> float:
        return t * (1 + rng.uniform(-noise, noise))

    prefill = [
        gc.PrefillPoint(n, ctx, jitter(perf.prefill_time([(n, ctx)])))
        for ctx in (0, 8192, 32768)
        for n in (128, 512, 2048, 8192)
    ]
    decode = [
        gc.DecodePoint(b, ctx, jitter(perf.decode_step_time(b, b * ctx)))
        for ctx in (8192, 32768)
        for b in (1, 8, 32, 64)
    ]
    return shape, chip, prefill, decode, dtype_bytes


def test_the_fit_recovers_the_constants_that_made_the_timings(gc):
    engine = EngineProfile(mfu=0.42, mfu_half_tokens=300.0, mbu=0.7, step_overhead_s=0.003)
    shape, chip, prefill, decode, dtype_bytes = _synthetic(gc, engine)
    fit = gc.fit_profile(shape, prefill, decode, chip.peak_tflops, chip.memory_bw_gbs, dtype_bytes)
    assert fit.mbu == pytest.approx(0.7, rel=1e-6)
    assert fit.step_overhead_s == pytest.approx(0.003, rel=1e-6)
    assert fit.mfu == pytest.approx(0.42, rel=1e-4)
    assert fit.mfu_half_tokens == pytest.approx(300.0, rel=1e-3)
    assert fit.max_rel_error < 1e-4


def test_the_fit_holds_on_noisy_timings(gc):
    engine = EngineProfile(mfu=0.55, mfu_half_tokens=200.0, mbu=0.8, step_overhead_s=0.002)
    shape, chip, prefill, decode, dtype_bytes = _synthetic(gc, engine, noise=0.03, seed=4)
    fit = gc.fit_profile(shape, prefill, decode, chip.peak_tflops, chip.memory_bw_gbs, dtype_bytes)
    assert fit.mbu == pytest.approx(0.8, rel=0.05)
    assert fit.mfu == pytest.approx(0.55, rel=0.1)
    assert fit.max_rel_error < 0.15


def test_the_written_profile_loads_as_a_simulator_config(gc):
    engine = EngineProfile(mfu=0.42, mfu_half_tokens=300.0, mbu=0.7, step_overhead_s=0.003)
    shape, chip, prefill, decode, dtype_bytes = _synthetic(gc, engine)
    fit = gc.fit_profile(shape, prefill, decode, chip.peak_tflops, chip.memory_bw_gbs, dtype_bytes)
    text = gc.profile_yaml("H100", "llama-3-8b", shape, fit, 989.0, 80.0, 3350.0, 450.0, 2)
    cfg = sim_config_from_dict(yaml.safe_load(text), SimConfig(chips={}, contenders=()))
    assert cfg.chips["H100"].memory_bw_gbs == 3350.0
    assert cfg.engine.mbu == pytest.approx(0.7, rel=1e-4)
    assert cfg.model.kv_bytes_per_token == shape.kv_bytes_per_token(2)
    # The loaded profile times a forward as the fitted one does.
    perf = InstancePerf(cfg.chips["H100"], cfg.model, cfg.engine)
    p = prefill[5]
    assert perf.prefill_time([(p.new, p.context)]) == pytest.approx(p.seconds, rel=1e-3)
    assert dataclasses.asdict(cfg.engine)["step_overhead_s"] == pytest.approx(0.003, rel=1e-4)


def test_too_few_or_flat_timings_are_refused(gc):
    shape = gc.SHAPES["tiny"]
    one = [gc.DecodePoint(1, 128, 0.01)]
    with pytest.raises(ValueError, match="at least two"):
        gc.fit_profile(shape, [gc.PrefillPoint(8, 0, 0.01)] * 2, one, 1.0, 1.0, 4)
    same = [gc.DecodePoint(2, 128, 0.01), gc.DecodePoint(2, 128, 0.02)]
    with pytest.raises(ValueError, match="same bytes"):
        gc.fit_profile(shape, [gc.PrefillPoint(8, 0, 0.01)] * 2, same, 1.0, 1.0, 4)


def test_the_script_runs_on_the_cpu_at_tiny_sizes(gc, tmp_path):
    """Every timing is written; the fit too unless this shared host's noise defeats it."""
    rc = gc.main(["--device", "cpu", "--model", "tiny", "--quick", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["handoff"]["handed"] == 100 and result["prefill"] and result["decode"]
    assert "infiniband" in result and (tmp_path / "gpu_check.txt").exists()
    assert (rc == 0) == (result["fit"] is not None)
    if rc == 0:
        profile = yaml.safe_load((tmp_path / "chip_profile.yaml").read_text())
        sim_config_from_dict(profile, SimConfig(chips={}, contenders=()))
    assert sum(f.stat().st_size for f in tmp_path.iterdir()) < 64 << 20
