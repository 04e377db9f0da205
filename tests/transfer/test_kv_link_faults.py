"""The emulated KV link's fault file: states, stall until changed, drop, bad content."""

from __future__ import annotations

import threading

import pytest

from sglang_pdd.transfer.kv_link_faults import KvLinkFaults, set_link_state


def test_no_file_is_up_and_each_state_reads_back(tmp_path):
    path = tmp_path / "link"
    faults = KvLinkFaults(str(path))
    assert faults.state() == "up" and faults.admit()
    for state in ("stall", "drop", "up"):
        set_link_state(path, state)
        assert faults.state() == state
    set_link_state(path, "drop")
    assert not faults.admit()


def test_a_stalled_write_waits_until_the_link_is_dropped(tmp_path):
    path = tmp_path / "link"
    set_link_state(path, "stall")
    faults = KvLinkFaults(str(path), poll_s=0.01)
    result, entered = [], threading.Event()

    def write():
        entered.set()
        result.append(faults.admit())

    worker = threading.Thread(target=write)
    worker.start()
    entered.wait(5)
    assert worker.is_alive() and not result  # still stalled (admit cannot return while stall)
    set_link_state(path, "drop")
    worker.join(10)
    assert result == [False]


def test_unknown_content_keeps_the_link_up_and_is_logged(tmp_path, caplog):
    path = tmp_path / "link"
    path.write_text("stal\n")
    assert KvLinkFaults(str(path)).state() == "up"
    assert "not one of up, stall, drop" in caplog.text


def test_set_link_state_refuses_an_unknown_state(tmp_path):
    with pytest.raises(ValueError, match="accepted values are up, stall, drop"):
        set_link_state(tmp_path / "link", "down")


def test_a_paced_write_fails_midway_when_dropped_and_completes_when_up(tmp_path):
    import time

    path = tmp_path / "link"
    faults = KvLinkFaults(str(path), poll_s=0.01)
    assert faults.wait_until(time.monotonic() + 0.02)  # up: arrives
    set_link_state(path, "drop")
    assert not faults.wait_until(time.monotonic() + 3600)  # fails at once, not in an hour
