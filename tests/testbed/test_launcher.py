"""The launcher's process handling, with a small stand-in server (not SGLang)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from sglang_pdd.testbed.launcher import ServerSpec, build_command, server_env
from sglang_pdd.testbed.ports import free_port


def test_free_ports_are_distinct_and_spaced():
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    assert all(abs(a - b) > 10 for i, a in enumerate(ports) for b in ports[i + 1 :])


def test_each_server_gets_mooncake_ports_no_other_server_had():
    """A decode server started after another was killed must not draw its Mooncake ports:
    Prefill's pooled connections to the dead one would fail its first transfer."""
    spec = ServerSpec("d", "/m", role="decode")
    ranges = []
    for _ in range(20):
        env = server_env(spec, free_port())
        ranges.append(set(range(int(env["MC_MIN_PRC_PORT"]), int(env["MC_MAX_PRC_PORT"]) + 1)))
    assert all(len(r) >= 2 for r in ranges)  # a handshake port and a data port
    assert all(not (a & b) for i, a in enumerate(ranges) for b in ranges[i + 1 :])
    pinned = ServerSpec("d", "/m", env=(("MC_MIN_PRC_PORT", "15000"),))
    assert server_env(pinned, free_port())["MC_MIN_PRC_PORT"] == "15000"  # spec.env wins


def test_each_server_runs_one_torch_thread_per_core_it_is_given():
    """Pinned, one thread per pinned core; unpinned, one (it shares the host's cores with the
    other servers: two threads each spin at every op's barrier, twice the CPU for the same
    work); ``spec.env`` may say otherwise."""
    threads = lambda spec: server_env(spec, free_port())["OMP_NUM_THREADS"]  # noqa: E731
    assert threads(ServerSpec("d", "/m", cpus="0-2")) == "3"
    assert threads(ServerSpec("d", "/m")) == "1"
    assert threads(ServerSpec("d", "/m", env=(("OMP_NUM_THREADS", "4"),))) == "4"


def test_free_ports_lie_below_the_ephemeral_range():
    """Outgoing connections take their local port from the ephemeral range; a server port
    picked there could be taken before the server binds it."""
    from sglang_pdd.testbed.ports import _ephemeral_start

    start = _ephemeral_start()
    assert all(10_000 <= free_port() < start for _ in range(20))


def test_commands_give_each_role_its_flags():
    prefill = build_command(ServerSpec("p", "/m", role="prefill"), 1000, 1001, 1002)
    assert prefill[prefill.index("--disaggregation-mode") + 1] == "prefill"
    assert prefill[prefill.index("--disaggregation-bootstrap-port") + 1] == "1002"
    decode = build_command(ServerSpec("d", "/m", role="decode"), 1000, 1001, None)
    assert "--disaggregation-decode-retraction-backup" in decode
    assert "--disaggregation-mode" not in build_command(ServerSpec("c", "/m"), 1, 2, None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_tears_down_every_process(tmp_path):
    script = textwrap.dedent(
        f"""
        import signal, sys, time
        from pathlib import Path
        from sglang_pdd.testbed.launcher import ServerGroup
        # Ctrl-C in a terminal raises KeyboardInterrupt; a test run started in the background
        # would hand this process SIGINT ignored (POSIX, for '&' jobs), so restore the default.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from sglang_pdd.testbed.ports import free_port
        with ServerGroup(log_dir=Path({str(tmp_path)!r})) as group:
            port = free_port()
            child = group.launch_command(
                "http", [sys.executable, "-m", "http.server", str(port), "-b", "127.0.0.1"], port)
            group.wait_ready(child, timeout=30, path=None)
            print(child.proc.pid, flush=True)
            time.sleep(300)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    assert _alive(child_pid)
    parent.send_signal(signal.SIGINT)
    parent.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(child_pid)


def test_stop_named_stops_only_those_servers(tmp_path):
    import pytest

    from sglang_pdd.testbed.launcher import ServerGroup

    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    with ServerGroup(log_dir=tmp_path) as group:
        kept = group.launch_command("kept", sleeper, free_port())
        gone = group.launch_command("gone", sleeper, free_port())
        with pytest.raises(ValueError, match="already runs"):
            group.launch_command("kept", sleeper, free_port())  # would share its log and name
        with pytest.raises(ValueError, match="no-such"):
            group.stop_named("gone", "no-such")
        assert gone.alive()
        group.stop_named("gone")
        assert not gone.alive() and kept.alive()
        group.launch_command("gone", sleeper, free_port())  # a stopped server's name is free


def test_tensor_parallel_ranks_share_the_datacenters_cores():
    from sglang_pdd.testbed.cluster import cpu_rank_binding

    assert cpu_rank_binding("0-3", 2) == "0,1|2,3"
    assert cpu_rank_binding("1", 2) == "1|1"  # fewer cores than ranks: all of them each
    assert cpu_rank_binding("0,2,4", 2) == "0|2"
    assert cpu_rank_binding("", 1).count("|") == 0


def test_only_servers_whose_import_would_match_the_warm_launchers_start_warm():
    """A server forks from the warm launcher only when SGLang's import would see what the
    launcher's saw: the same environment but for its own Mooncake ports, no core pinning (torch
    sets its threads at import), its subprocesses forked. What the import itself set in the
    launcher, the fork gets too."""
    from sglang_pdd.testbed.launcher import _OWN_PORTS, _UNREAD, _starts_warm, warm_env
    from sglang_pdd.testbed.warm_start import fork_environment

    launcher_env = warm_env()
    # A variable SGLang's import set in the launcher (as it sets TRITON_CACHE_DIR), named so
    # that no earlier import in this process set it already.
    imported = {**launcher_env, "SGLANG_PDD_TEST_SET_AT_IMPORT": "/cache"}

    def fork_env(**fields):
        spec = ServerSpec("s", model_path="/m", **fields)
        if not _starts_warm(spec, build_command(spec, free_port(), free_port(), None)):
            return None
        env = {**server_env(spec, free_port()), "PYTEST_CURRENT_TEST": "this one"}
        return fork_environment(env, launcher_env, imported, _OWN_PORTS + _UNREAD)

    env = fork_env()
    assert env is not None and env["SGLANG_PDD_TEST_SET_AT_IMPORT"] == "/cache"
    assert env["MC_MIN_PRC_PORT"] != launcher_env.get("MC_MIN_PRC_PORT")  # its own ports
    assert fork_env(role="decode", extra_args=("--pdd-role", "main")) is not None
    assert fork_env(cpus="0-1") is None
    assert fork_env(env=(("SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION", "64"),)) is None
    assert fork_env(fork_subprocesses=False) is None
    assert fork_env(cpu=False) is None


def test_set_nice_reaches_every_thread_of_the_server_and_its_children(tmp_path):
    import psutil

    from sglang_pdd.testbed.launcher import ServerProcess

    # A "server" with a second thread and a child process (as SGLang's scheduler is), which
    # says when both are up and then waits for its stdin to close.
    child = "import sys; sys.stdin.read()"
    script = textwrap.dedent(
        f"""
        import subprocess, sys, threading
        subprocess.Popen([sys.executable, "-c", {child!r}], stdin=subprocess.PIPE)
        threading.Thread(target=sys.stdin.read, daemon=True).start()
        print("up", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "up"
        server = ServerProcess(None, 0, tmp_path / "log", proc, name="relay")
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
        tids = [t.id for p in procs for t in p.threads()]
        assert len(procs) == 2 and len(tids) >= 3
        assert server.set_nice(7) == len(tids)
        # Linux keeps a nice value per thread: each one's own /proc entry must say 7.
        assert {os.getpriority(os.PRIO_PROCESS, tid) for tid in tids} == {7}
    finally:
        proc.kill()  # its child reads the pipe the parent held: it ends at EOF
        proc.wait()


def test_sigterm_stops_every_process_a_server_group_started(tmp_path):
    """A testbed script killed with SIGTERM leaves nothing running (exit_on_sigterm)."""
    script = tmp_path / "script.py"
    pid_file = tmp_path / "child.pid"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            from pathlib import Path
            from sglang_pdd.testbed.launcher import ServerGroup, exit_on_sigterm

            exit_on_sigterm()
            with ServerGroup(log_dir=Path({str(tmp_path)!r})) as group:
                child = group.launch_command("sleeper", [sys.executable, "-c",
                    "import time; time.sleep(600)"], 0)
                Path({str(pid_file)!r}).write_text(str(child.proc.pid))
                time.sleep(600)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)])
    deadline = time.monotonic() + 120
    while not pid_file.exists():
        assert proc.poll() is None, "the script ended before starting its child"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        while True:  # reaped by the group's stop: gone, not a zombie of ours
            os.kill(child, 0)
            assert time.monotonic() < deadline, "the child outlived its group"
            time.sleep(0.05)
