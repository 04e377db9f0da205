"""The testbed's emulated chips as server flags (pure logic)."""

from __future__ import annotations

import pytest

from sglang_pdd.testbed.emulated_chips import ChipEmulation


def test_each_datacenter_gets_its_chip_and_the_shared_scales():
    emu = ChipEmulation(token_scale=16, time_dilation=3.0)
    a, b = emu.server_args("A"), emu.server_args("B")
    assert a[a.index("--pdd-emulate-chip") + 1] == "A"
    assert b[b.index("--pdd-emulate-chip") + 1] == "B"
    for args in (a, b):
        assert args[args.index("--pdd-token-scale") + 1] == "16"
        assert args[args.index("--pdd-time-dilation") + 1] == "3.0"
    assert emu.config("B").chip.name == "B" and emu.config("A").token_scale == 16
    with pytest.raises(ValueError, match="datacenter"):
        emu.server_args("C")


def test_bad_settings_are_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--pdd-token-scale"):
        ChipEmulation(token_scale=0)
    with pytest.raises(ValueError, match="--pdd-emulate-chip"):
        ChipEmulation(chip_b="nonsense")
