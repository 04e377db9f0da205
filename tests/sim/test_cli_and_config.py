"""sim/plan entry points on tiny inputs, and config validation."""

import json

import pytest

from sglang_pdd.sim.cli import parse_sla, plan_main, sim_main
from sglang_pdd.sim.config import load_sim_config
from sglang_pdd.sim.defaults import default_sim_config
from sglang_pdd.sim.workload import load_mooncake, write_mooncake

from .helpers import req

TRACE = [req(i, 0.5 * i, 3000 + 100 * i, 20, range(i % 3 * 50, i % 3 * 50 + 6)) for i in range(12)]


def test_sim_default_config_prints_and_writes_json(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    write_mooncake(TRACE, trace)
    out = tmp_path / "o.json"
    assert sim_main(["--trace", str(trace), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert set(data["contenders"]) == {"same-dc-pd", "cross-dc-pd", "pdd"}
    for name, summary in data["contenders"].items():
        assert name in printed
        assert summary["requests"] == len(TRACE)
        assert set(summary["ttft_s"]) == {"p50", "p90", "p99"}
        assert "relay_token_share" in summary and "bcr" in summary


def test_mooncake_round_trip_and_rate_scale(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_mooncake(TRACE, trace)
    back = load_mooncake(trace, rate_scale=2.0)
    assert [r.input_tokens for r in back] == [r.input_tokens for r in TRACE]
    assert back[-1].arrival_s == pytest.approx(TRACE[-1].arrival_s / 2)


def test_plan_runs_on_a_tiny_trace(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    write_mooncake(TRACE, trace)
    out = tmp_path / "plan.json"
    argv = [
        "--trace",
        str(trace),
        "--link",
        "50",
        "--max-prefill",
        "2",
        "--max-decode",
        "2",
        "--max-relay",
        "1",
        "--json",
        str(out),
    ]
    assert plan_main(argv) == 0
    data = json.loads(out.read_text())
    assert data["pdd"]["feasible"] and data["same_dc"]["feasible"]
    assert "best PDD plan" in capsys.readouterr().out


def test_config_rejects_unknown_keys_and_bad_values(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("sla: {ttft_s: 5, latency: 3}\n")
    with pytest.raises(ValueError, match="latency"):
        load_sim_config(bad, default_sim_config())
    bad.write_text(
        "contenders:\n  - {name: x, kind: warp, prefill: {chip: A, count: 1}, "
        "decode: {chip: A, count: 1}}\n"
    )
    with pytest.raises(ValueError, match="kind"):
        load_sim_config(bad, default_sim_config())
    bad.write_text(
        "contenders:\n  - {name: x, kind: same-dc, prefill: {chip: Z, count: 1}, "
        "decode: {chip: A, count: 1}}\n"
    )
    with pytest.raises(ValueError, match="chip 'Z'"):
        load_sim_config(bad, default_sim_config())


def test_parse_sla():
    assert parse_sla("ttft=5,itl=0.05").itl_s == 0.05
    assert parse_sla("7").ttft_s == 7.0
    assert parse_sla("ttft=5,p99=30").p99_ttft_s == 30.0
    with pytest.raises(ValueError, match="ttft, itl and p99"):
        parse_sla("tpot=1")


def test_example_files_load_and_match_the_built_in_chips():
    from pathlib import Path

    from sglang_pdd.sim.config import load_chips

    root = Path(__file__).resolve().parents[2] / "examples"
    defaults = default_sim_config()
    chips = load_chips(root / "chips.yaml")
    for name, chip in defaults.chips.items():
        assert chips[name].peak_tflops == pytest.approx(chip.peak_tflops)
        assert chips[name].memory_bw_gbs == pytest.approx(chip.memory_bw_gbs)
        assert chips[name].cost_per_hour == chip.cost_per_hour
    cfg = load_sim_config(root / "sim_config.yaml", defaults)
    assert [c.kind for c in cfg.contenders] == ["same-dc", "cross-dc", "cross-dc", "pdd"]
    assert cfg.contenders[2].decode_cache is False
    assert cfg.contenders[3].handoff.mode == "auto"


def test_sim_writes_png_plots(tmp_path):
    pytest.importorskip("matplotlib")
    trace = tmp_path / "t.jsonl"
    write_mooncake(TRACE, trace)
    plots = tmp_path / "plots"
    assert sim_main(["--trace", str(trace), "--plots", str(plots)]) == 0
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["bcr_relay_share.png", "e2e_cdf.png", "itl_cdf.png", "ttft_cdf.png"]
    assert all((plots / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)
