"""Start SGLang servers as subprocesses, wait for health, capture logs, tear them down.

Used by tests, examples and benchmarks. Every server gets its own free HTTP, NCCL and (for
prefill servers) bootstrap port, so two clusters on one host never collide. Each server runs in
its own process group, and ``ServerGroup`` kills every group it started on exit, on an exception
(a failing test) and on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sglang_pdd.testbed.ports import SPACING, free_port

if TYPE_CHECKING:
    from sglang_pdd.testbed.warm_start import WarmProcess

ROLES = ("colocated", "prefill", "decode")

# Flags SGLang's CPU engine needs on a machine without a GPU (see docs/cpu.md).
CPU_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--sampling-backend",
    "pytorch",
    "--disable-overlap-schedule",
    "--disable-cuda-graph",
    "--skip-server-warmup",
    "--sleep-on-idle",  # an idle scheduler otherwise spins a core; tests run many servers
)
CPU_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "MOONCAKE_PROTOCOL": "tcp",
    "SGLANG_HOST_IP": "127.0.0.1",
    # Mooncake's TCP transport queues at most 1,024 writes per peer and rejects what waits
    # longer than 1 s for a place ("TCP lane queue-full rejection"); SGLang then blacklists the
    # receiver. With page size 1 a busy server's KV is scattered, one write per token, layer
    # and K/V, so one long prompt to a busy Main-Decode overflows it (docs/costs.md). 65535
    # is the most Mooncake 0.3.13 accepts (it ignores larger values with a warning).
    "MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER": "65535",
    "MC_TCP_MAX_PENDING_ADMISSIONS_PER_PEER": "65535",
    "MC_TCP_ADMISSION_TIMEOUT_MS": "120000",
    # A stopped server's scheduler exits first; SGLang reads that as a crash and sleeps 5 s
    # before py-spy and CUDA core dumps that a CPU testbed has no use for: every stop took 5 s
    # more (16 stops a suite).
    "SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0",
    "SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0",
}


@dataclass(frozen=True)
class ServerSpec:
    """One SGLang server to launch.

    ``role`` is ``colocated`` (a plain server), ``prefill`` or ``decode`` (SGLang's PD
    disaggregation over Mooncake). ``extra_args`` are appended to the command line verbatim.
    """

    name: str
    model_path: str
    role: str = "colocated"
    cpu: bool = True
    max_total_tokens: int = 65536
    chunked_prefill_size: int = 1024
    dtype: str = "bfloat16"
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # CPU cores the server may use ("0", "1-3"; empty: all). Pinning each emulated datacenter
    # to its own cores keeps one datacenter's work from slowing the other's, as separate
    # machines would; torch then uses one thread per pinned core.
    cpus: str = ""
    # Run SGLang's overlap scheduler (its default on GPUs); the CPU flags otherwise turn it off.
    overlap_schedule: bool = False
    # CPU servers start their scheduler and detokenizer by fork (--pdd-fork-subprocesses): they
    # inherit the launcher's imports, about 0.4x the CPU of a spawned start. False: SGLang's
    # spawn, as on a GPU (tests that prove the plugin loads in spawned subprocesses keep it).
    fork_subprocesses: bool = True

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role={self.role!r}: accepted values are {', '.join(ROLES)}")
        if self.cpus and not all(part.replace("-", "").isdigit() for part in self.cpus.split(",")):
            raise ValueError(f"cpus={self.cpus!r}: give a core list like 0 or 0-1 or 0,2")


@dataclass
class ServerProcess:
    """A launched server (or helper process): its URL, ports, log file and process."""

    spec: ServerSpec | None
    port: int
    log_path: Path
    proc: subprocess.Popen | WarmProcess  # WarmProcess: forked by a warm launcher
    bootstrap_port: int | None = None
    host: str = "127.0.0.1"
    name: str = ""
    control_url: str | None = None  # a WAN link's command API (POST /stall, /drop, /reset ...)

    def __post_init__(self) -> None:
        if not self.name and self.spec is not None:
            self.name = self.spec.name

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def link(self, op: str) -> dict:
        """Tell this WAN link to ``stall``, ``drop``, ``reset`` or ``restore`` (or read its
        ``state``); see ``sglang_pdd/transfer/link_faults.py``."""
        import requests

        if self.control_url is None:
            raise ValueError(f"{self.name} has no link command API")
        method = requests.get if op == "state" else requests.post
        resp = method(f"{self.control_url}/{op}", timeout=30)
        resp.raise_for_status()
        return resp.json()

    def pause(self) -> None:
        """Freeze the whole process group (SIGSTOP): e.g. a link proxy then forwards nothing,
        while the peers on both sides keep running."""
        _signal_group(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Undo ``pause`` (SIGCONT)."""
        _signal_group(self.proc.pid, signal.SIGCONT)

    def set_nice(self, value: int) -> int:
        """Give every thread of the server's processes (its scheduler and detokenizer
        subprocesses included) the nice ``value``, so that the kernel favours the other
        processes on its cores; returns how many threads were set. Linux keeps a nice value per
        thread, so each is set (threads started later inherit their creator's)."""
        import psutil

        root = psutil.Process(self.proc.pid)
        count = 0
        for proc in (root, *root.children(recursive=True)):
            try:
                threads = proc.threads()
            except psutil.NoSuchProcess:  # a child that ended meanwhile
                continue
            for thread in threads:
                try:
                    os.setpriority(os.PRIO_PROCESS, thread.id, value)
                except ProcessLookupError:  # a thread that ended meanwhile
                    continue
                count += 1
        return count

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the server's whole process group (SIGTERM, then SIGKILL after ``timeout``:
        a one-rank server exits within a second; a tensor-parallel one on the CPU took 14 s
        to wind its ranks down, time no test needs)."""
        if self.proc.poll() is not None:
            return
        self.resume()  # a paused process would not act on SIGTERM
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=timeout)
        # The scheduler and detokenizer share the group; make sure none outlives the server.
        _signal_group(self.proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def build_command(spec: ServerSpec, port: int, nccl_port: int, bootstrap_port: int | None):
    """The ``python -m sglang.launch_server`` command line for ``spec``."""
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        spec.model_path,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--nccl-port",
        str(nccl_port),
        "--dtype",
        spec.dtype,
        "--max-total-tokens",
        str(spec.max_total_tokens),
        "--chunked-prefill-size",
        str(spec.chunked_prefill_size),
        "--log-level",
        "info",
    ]
    if spec.cpu:
        skip = {"--disable-overlap-schedule"} if spec.overlap_schedule else set()
        cmd += [flag for flag in CPU_FLAGS if flag not in skip]
        if spec.fork_subprocesses:
            cmd.append("--pdd-fork-subprocesses")
    if spec.role != "colocated":
        cmd += [
            "--disaggregation-mode",
            spec.role,
            "--disaggregation-transfer-backend",
            "mooncake",
        ]
    if spec.role == "prefill":
        cmd += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    if (
        spec.role == "decode"
        and spec.cpu
        and "--disaggregation-decode-retraction-backup" not in (spec.extra_args)
    ):
        # The default host-pool backup sizes itself from free host memory with a 10 GiB
        # reserve and refuses to start on a small machine running several servers.
        cmd += ["--disaggregation-decode-retraction-backup", "cpu_tensor"]
    cmd += list(spec.extra_args)
    if spec.cpus:
        cmd = ["taskset", "-c", spec.cpus, *cmd]
    return cmd


def core_count(cpus: str) -> int:
    """How many cores a taskset list (``0``, ``0-1``, ``0,2``) names."""
    n = 0
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


# A Mooncake engine binds two of these (handshake, data); free_port keeps them to this server.
MOONCAKE_PORTS = SPACING


def server_env(spec: ServerSpec, mooncake_port: int) -> dict[str, str]:
    """The environment of ``spec``'s server: this process's, the CPU settings, Mooncake's ports
    from ``mooncake_port`` (``MOONCAKE_PORTS`` of them) and then ``spec.env``, which wins.

    Mooncake draws its handshake and data ports at random from 15000-17000 by default. A test
    session starts and kills many decode servers on one host; when a new one draws the data
    port of one killed earlier, Prefill's Mooncake still holds pooled connections to that
    port and its first transfer fails on them ("failed to read WRITE ack frame", seen in CI).
    Ports from ``free_port`` are never handed out twice in a process, so neither are these.
    """
    env = {**os.environ, **(CPU_ENV if spec.cpu else {})}
    env["MC_MIN_PRC_PORT"] = str(mooncake_port)
    env["MC_MAX_PRC_PORT"] = str(mooncake_port + MOONCAKE_PORTS - 1)
    env.update(dict(spec.env))
    if spec.cpus:
        env["OMP_NUM_THREADS"] = str(core_count(spec.cpus))
    elif spec.cpu:
        # Unpinned, the server shares every core with the host's other servers: torch's
        # threads, one per core, spin at each op's barrier while the others' need the cores.
        # One thread each does the same work on less CPU, which a host running many servers
        # lacks (docs/cpu.md: four requests at once on one server, 2 cores: 0.73x
        # the CPU, 1.39x the wall time on an otherwise idle host); ``spec.env`` may say
        # otherwise.
        env["OMP_NUM_THREADS"] = dict(spec.env).get("OMP_NUM_THREADS", "1")
    return env


# What may differ between a warm launcher's environment and a server's: each server's own
# Mooncake ports (read when its engine starts) and the test pytest is in (read by nothing).
_OWN_PORTS = ("MC_MIN_PRC_PORT", "MC_MAX_PRC_PORT")
_UNREAD = ("PYTEST_CURRENT_TEST",)


def warm_env() -> dict[str, str]:
    """The environment of a warm launcher: an unpinned CPU server's (``server_env``) without
    the Mooncake ports each server gets for itself."""
    probe = ServerSpec("warm-launcher", model_path="")
    env = server_env(probe, 0)
    for key in _OWN_PORTS + _UNREAD:
        env.pop(key, None)
    return env


def _starts_warm(spec: ServerSpec, cmd: list[str]) -> bool:
    """Whether ``spec`` may fork from the warm launcher (``WarmLauncher.fork_env`` then checks
    its environment): not pinned to cores (that sets torch's threads at import), its
    subprocesses forked (a spawned start is what a test of spawning wants)."""
    return spec.fork_subprocesses and cmd[:3] == [sys.executable, "-m", "sglang.launch_server"]


@dataclass
class ServerGroup:
    """Servers launched together and torn down together (a context manager)."""

    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sglang-pdd-")))
    servers: list[ServerProcess] = field(default_factory=list)
    # Fork the servers that can from one process that imported SGLang once (``warm_start.py``):
    # a test session's servers then start without ~12 s of import each. Off for benchmarks.
    warm_start: bool = False

    def __post_init__(self) -> None:
        self._warm = None
        if self.warm_start:
            from sglang_pdd.testbed.warm_start import WarmLauncher

            self._warm = WarmLauncher(warm_env(), self.log_dir / "warm-launcher.log")

    def _claim_name(self, name: str) -> None:
        """Names are unique among running servers: logs and ``stop_named`` go by name."""
        if any(server.name == name and server.alive() for server in self.servers):
            raise ValueError(f"a server named {name!r} already runs in this group")

    def launch(self, spec: ServerSpec) -> ServerProcess:
        """Start ``spec`` without waiting for it to be ready."""
        self._claim_name(spec.name)
        port = free_port()
        bootstrap_port = free_port() if spec.role == "prefill" else None
        server = self._spawn(spec, port, bootstrap_port, "wb")
        self.servers.append(server)
        return server

    def _spawn(
        self, spec: ServerSpec, port: int, bootstrap_port: int | None, log_mode: str
    ) -> ServerProcess:
        env = server_env(spec, free_port())
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.name}.log"
        cmd = build_command(spec, port, free_port(), bootstrap_port)
        if self._warm is not None and _starts_warm(spec, cmd):
            fork_env = self._warm.fork_env(env, ignore=_OWN_PORTS + _UNREAD)
            if fork_env is not None:
                proc = self._warm.spawn(cmd, fork_env, log_path, append=log_mode == "ab")
                return ServerProcess(spec, port, log_path, proc, bootstrap_port)
        with open(log_path, log_mode) as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return ServerProcess(spec, port, log_path, proc, bootstrap_port)

    def restart(self, server: ServerProcess, timeout: float = 300.0) -> ServerProcess:
        """Start ``server``'s SGLang server again on the same ports (stopping it first if it
        still runs), as an operator restarts a failed instance, and wait until it is ready.
        Returns the new process; its log goes on in the same file."""
        if server.spec is None:
            raise ValueError(f"{server.name} is not an SGLang server: nothing to restart")
        if server.alive():
            server.stop()
        again = self._spawn(server.spec, server.port, server.bootstrap_port, "ab")
        self.servers[self.servers.index(server)] = again
        self.wait_ready(again, timeout)
        return again

    def launch_command(self, name: str, cmd: list[str], port: int, cpus: str = "") -> ServerProcess:
        """Start a non-SGLang helper (router, WAN proxy) that listens on ``port``, on the cores
        ``cpus`` names (``taskset``; empty: any core)."""
        self._claim_name(name)
        if cpus:
            cmd = ["taskset", "-c", cpus, *cmd]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        server = ServerProcess(None, port, log_path, proc, name=name)
        self.servers.append(server)
        return server

    def wait_ready(
        self,
        server: ServerProcess,
        timeout: float = 300.0,
        path: str | None = "/health",
        api_key: str | None = None,
    ) -> None:
        """Block until ``server`` answers ``path`` (or accepts TCP when ``path`` is None),
        presenting ``api_key`` as a bearer token when given."""
        name = server.name
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not server.alive():
                raise RuntimeError(
                    f"{name} exited with {server.proc.returncode}; log tail:\n"
                    + server.log_text()[-4000:]
                )
            try:
                if path is None:
                    with socket.create_connection((server.host, server.port), timeout=2):
                        return
                headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
                request = urllib.request.Request(server.url + path, headers=headers)
                with urllib.request.urlopen(request, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(
            f"{name} not ready after {timeout:.0f}s; log tail:\n" + server.log_text()[-4000:]
        )

    def start(self, *specs: ServerSpec, timeout: float = 300.0) -> list[ServerProcess]:
        """Launch all ``specs`` at once (they start in parallel) and wait for every one."""
        launched = [self.launch(spec) for spec in specs]
        for server in launched:
            self.wait_ready(server, timeout)
        return launched

    def wait_warm(self) -> None:
        """Block until the warm launcher (if any) has imported SGLang: a benchmark of warm
        starts leaves that one import out of the first."""
        if self._warm is not None:
            self._warm.wait_ready()

    def stop(self) -> None:
        """Stop every server, in reverse order of launch (then the warm launcher, if any)."""
        for server in reversed(self.servers):
            server.stop()
        if self._warm is not None:
            self._warm.close()

    def stop_named(self, *names: str) -> None:
        """Stop the servers called ``names`` (a fixture's own, when the module using them ends,
        so that a small machine never holds every server of a session at once)."""
        unknown = set(names) - {server.name for server in self.servers}
        if unknown:
            raise ValueError(f"no server named {sorted(unknown)} in this group")
        for server in reversed(self.servers):
            if server.name in names:
                server.stop()

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def exit_on_sigterm() -> None:
    """Turn SIGTERM (a CI timeout, ``kill``) into ``SystemExit``, as Ctrl-C raises
    ``KeyboardInterrupt``: a ``with ServerGroup(...)`` block then stops every process it
    started instead of leaving them running."""
    import signal

    def _exit(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def post_json(url: str, body: dict, timeout: float = 300.0) -> tuple[int, dict]:
    """POST ``body`` as JSON; return (status, parsed JSON body), also for 4xx/5xx answers."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        payload = err.read()
        try:
            return err.code, json.loads(payload or b"{}")
        except json.JSONDecodeError:
            return err.code, {"raw": payload.decode(errors="replace")}
