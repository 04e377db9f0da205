"""The emulated forward's duration and the pacer, as pure logic (a fake clock, no servers)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_pdd.emulation.config import EmulationConfig, resolve_chip, resolve_model
from sglang_pdd.emulation.forward import ForwardPacer, ForwardShape
from sglang_pdd.sim.defaults import CHIP_A, CHIP_B, DEFAULT_ENGINE, DEFAULT_MODEL


def _config(chip=CHIP_A, **kw) -> EmulationConfig:
    return EmulationConfig(chip=chip, model=DEFAULT_MODEL, engine=DEFAULT_ENGINE, **kw)


class FakeClock:
    """Time moves only when the code under test sleeps or the test says the CPU worked."""

    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 0.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.slept.append(s)
        self.now += s

    def work(self, s: float) -> None:
        self.now += s
        self.cpu += s


def _pacer(cfg: EmulationConfig, clock: FakeClock, **kw) -> ForwardPacer:
    return ForwardPacer(
        cfg, clock=lambda: clock.now, sleep=clock.sleep, thread_cpu=lambda: clock.cpu, **kw
    )


def test_prefill_is_compute_bound_and_decode_memory_bound():
    p = _pacer(_config(), FakeClock())
    prefill_4k = p.duration(ForwardShape(extends=((4096, 0),)))
    prefill_8k = p.duration(ForwardShape(extends=((8192, 0),)))
    assert prefill_8k > 1.8 * prefill_4k  # grows with the tokens
    one = p.duration(ForwardShape(decode_batch=1, decode_context=1000))
    many = p.duration(ForwardShape(decode_batch=16, decode_context=16_000))
    assert many < 1.5 * one  # a decode step reads the weights once for the whole batch


def test_a_cached_prefix_makes_an_extend_longer_but_far_shorter_than_prefilling_it():
    p = _pacer(_config(), FakeClock())
    cold = p.duration(ForwardShape(extends=((60_000, 0),)))
    new_only = p.duration(ForwardShape(extends=((4000, 0),)))
    cached = p.duration(ForwardShape(extends=((4000, 56_000),)))
    assert new_only < cached < cold


def test_chip_b_decodes_faster_and_prefills_slower_than_chip_a():
    a, b = _pacer(_config(CHIP_A), FakeClock()), _pacer(_config(CHIP_B), FakeClock())
    decode = ForwardShape(decode_batch=32, decode_context=32 * 64_000)
    prefill = ForwardShape(extends=((8192, 0),))
    assert a.duration(decode) / b.duration(decode) > 1.7
    assert b.duration(prefill) > a.duration(prefill)


def test_a_handoff_extend_on_a_decode_server_costs_about_one_decode_step():
    md = _pacer(_config(CHIP_B), FakeClock(), on_decode_server=True)
    step = md.duration(ForwardShape(decode_batch=8, decode_context=8 * 64_000))
    handoff = md.duration(ForwardShape(extends=((100, 64_000),)))
    assert handoff < 2 * step  # the brief: decode is memory-bound, the extend nearly free


def test_token_scale_and_dilation_scale_the_duration():
    shape = ForwardShape(extends=((512, 1024),), decode_batch=4, decode_context=4096)
    base = _pacer(_config(), FakeClock())
    scaled = _pacer(_config(token_scale=8), FakeClock())
    unscaled_equivalent = ForwardShape(
        extends=((512 * 8, 1024 * 8),), decode_batch=4, decode_context=4096 * 8
    )
    assert scaled.duration(shape) == pytest.approx(base.duration(unscaled_equivalent))
    dilated = _pacer(_config(time_dilation=3.0), FakeClock())
    assert dilated.duration(shape) == pytest.approx(3 * base.duration(shape))


@given(
    real=st.floats(0, 2.0),
    tokens=st.integers(1, 20_000),
    prefix=st.integers(0, 100_000),
    decode=st.integers(0, 256),
)
def test_a_forward_never_ends_before_its_emulated_duration(real, tokens, prefix, decode):
    clock = FakeClock()
    p = _pacer(_config(), clock)
    shape = ForwardShape(
        extends=((tokens, prefix),), decode_batch=decode, decode_context=decode * 100
    )
    started = p.begin()
    clock.work(real)
    overrun = p.end(started, shape)
    target = p.duration(shape)
    assert clock.now - started >= target - 1e-9
    assert overrun == (real > target)
    assert p.stats.forwards == 1 and p.stats.overruns == int(overrun)
    if not overrun:
        assert clock.now - started == pytest.approx(target)


def test_overruns_and_cpu_between_forwards_are_counted():
    clock = FakeClock()
    p = _pacer(_config(), clock)
    shape = ForwardShape(decode_batch=1, decode_context=10)
    target = p.duration(shape)
    for real in (target / 2, target * 2, target / 3):
        started = p.begin()
        clock.work(real)
        p.end(started, shape)
        clock.work(0.001)  # the scheduler's own work before the next forward
    p.begin()
    assert p.stats.forwards == 3 and p.stats.overruns == 1
    # the scheduler's 1 ms before the second forward is part of its emulated step
    assert p.stats.overrun_s == pytest.approx(target + 0.001)
    assert p.stats.iterations == 3
    assert p.stats.between_cpu_s == pytest.approx(0.003)


def test_idle_and_placeholder_batches_are_not_padded_or_counted():
    clock = FakeClock()
    p = _pacer(_config(), clock)
    p.end(p.begin(), ForwardShape())
    assert clock.slept == [] and p.stats.forwards == 0


def test_chip_and_model_files(tmp_path):
    chips = tmp_path / "chips.yaml"
    chips.write_text(
        "chips:\n  C:\n    peak_tflops: 100\n    memory_gb: 80\n    memory_bw_gbs: 3000\n"
        "    interconnect_gbs: 50\n    cost_per_hour: 1.5\n"
    )
    assert resolve_chip(f"{chips}:C").memory_bw_gbs == 3000
    assert resolve_chip("B") is CHIP_B
    with pytest.raises(ValueError, match="--pdd-emulate-chip"):
        resolve_chip(f"{chips}:D")
    with pytest.raises(ValueError, match="--pdd-emulate-chip"):
        resolve_chip("nothing")
    model = tmp_path / "model.yaml"
    model.write_text("model:\n  kv_bytes_per_token: 12000\nengine:\n  step_overhead_s: 0.001\n")
    m, e = resolve_model(str(model))
    assert m.kv_bytes_per_token == 12000 and e.step_overhead_s == 0.001
    with pytest.raises(ValueError, match="--pdd-emulate-model"):
        resolve_model(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    "kw, flag",
    [
        (dict(token_scale=0), "--pdd-token-scale"),
        (dict(token_scale=1.5), "--pdd-token-scale"),
        (dict(time_dilation=float("nan")), "--pdd-time-dilation"),
        (dict(time_dilation=0), "--pdd-time-dilation"),
        (dict(chips=0), "--pdd-emulate-chips"),
    ],
)
def test_bad_scales_are_refused_naming_the_flag(kw, flag):
    with pytest.raises(ValueError, match=flag):
        _config(**kw)


@pytest.mark.parametrize("scheduler_s", [0.0, 0.001, 0.003, 0.02])
def test_the_schedulers_time_between_forwards_is_part_of_the_step_up_to_its_overhead(
    scheduler_s,
):
    """On the chip, a step's overhead (scheduling, launch, sampling) comes before the forward:
    the scheduler's real time there counts toward the emulated step, up to that overhead."""
    clock = FakeClock()
    p = _pacer(_config(time_dilation=1.0), clock)
    shape = ForwardShape(decode_batch=2, decode_context=200)
    target = p.duration(shape)
    p.end(p.begin(), shape)
    ended = clock.now
    clock.work(scheduler_s)  # process_batch_result, streaming, the next batch's scheduling
    started = p.begin()
    clock.work(target / 4)  # the real forward
    assert not p.end(started, shape)
    credit = min(scheduler_s, p.credit_s)
    assert p.credit_s == pytest.approx(DEFAULT_ENGINE.step_overhead_s)
    assert clock.now - ended == pytest.approx(target + scheduler_s - credit)
