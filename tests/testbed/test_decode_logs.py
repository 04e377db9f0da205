"""``benchmark/decode_logs.py``: SGLang's ``Decode batch`` lines to throughput with and without KV
transfers in flight, and to the time of one decode step per batch size and stretch of decoding."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmark"


@pytest.fixture(scope="module")
def decode_logs():
    if str(BENCHMARK) not in sys.path:
        sys.path.insert(0, str(BENCHMARK))  # it imports shared_flags from its folder
    spec = importlib.util.spec_from_file_location("decode_logs", BENCHMARK / "decode_logs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _line(at: str, running: int, tok_s: float, transfers: int = 0) -> str:
    # SGLang 0.5's decode log line, as a decode server of the testbed writes it.
    return (
        f"[2026-12-06 {at}] Decode batch, #running-req: {running}, #token: 2158, token usage: "
        f"0.03, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: {transfers}, "
        f"#retracted-req: 0, cpu graph: False, gen throughput (token/s): {tok_s}, #queue-req: 0"
    )


def test_step_times_split_at_silences_and_give_the_median_step_per_batch_size(decode_logs):
    lines = [_line("02:00:00", 1, 0.0)]  # zero throughput (nothing decoded): left out
    lines += [_line(f"02:00:0{i}", 1, tok) for i, tok in enumerate((250, 200, 250, 500))]
    lines += [_line(f"02:00:1{i}", 2, 400) for i in range(4)]
    lines += [_line("02:00:20", 3, 300)]  # one line of batch 3: too few to report
    lines += [_line(f"02:01:0{i}", 1, 300) for i in range(4)]  # after 40 s: a new stretch
    text = "\n".join(["some other line", *lines])
    first, second = decode_logs.step_times(text, gap_s=25)
    assert first[0] == "2026-12-06 02:00:00"
    assert first[1] == {1: (4, pytest.approx(4.0)), 2: (4, pytest.approx(5.0))}
    assert second == ("2026-12-06 02:01:00", {1: (4, pytest.approx(1000 / 300))})
    # A longer allowed silence joins the two stretches.
    [joined] = decode_logs.step_times(text, gap_s=120)
    assert joined[1][1][0] == 8


def test_throughput_is_split_by_transfers_in_flight(decode_logs):
    text = "\n".join(
        [_line("02:00:00", 1, 100, transfers=2), _line("02:00:01", 1, 300, transfers=0)]
    )
    summary = decode_logs.summarize(text)
    assert summary["transfers in flight"][:2] == (1, 100.0)
    assert summary["none in flight"][:2] == (1, 300.0)
    assert decode_logs.summarize("no decode lines") is None


def test_a_line_with_a_rank_in_its_stamp_or_without_a_stamp_is_read(decode_logs):
    ranked = _line("02:00:00", 2, 400, transfers=1).replace("02:00:00]", "02:00:00 TP0]")
    bare = _line("02:00:01", 2, 200).split("] ", 1)[1]  # no time stamp
    summary = decode_logs.summarize("\n".join([ranked, bare]))
    assert summary["transfers in flight"][:2] == (1, 400.0)
    assert summary["none in flight"][:2] == (1, 200.0)
    # A step time needs the line's time: the unstamped line is not placed in a stretch.
    [(stamp, sizes)] = decode_logs.step_times("\n".join([ranked] * 4 + [bare]))
    assert stamp == "2026-12-06 02:00:00"
    assert sizes == {2: (4, pytest.approx(5.0))}
