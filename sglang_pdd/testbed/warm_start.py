"""Warm starts for CPU test servers: SGLang imported once, each server forked from that process.

Every SGLang server spends ~12 s of one core importing SGLang before it logs a line (``python -X
importtime -c "import sglang.launch_server; import sglang.srt.entrypoints.http_server"``: 11.3
s), and a test session starts some twenty-five. A *warm launcher* is one process that does what
``python -m sglang.launch_server`` does before it reads its command line (its imports and
``load_plugins()``) and imports the HTTP server it goes on to, once. Each server is then a fork
of it that runs ``sglang.launch_server`` as ``__main__`` (``runpy``) with the server's own argv,
environment, working directory and log: the same code on the same arguments, without the
import.

Only servers whose environment equals the launcher's, but for their own Mooncake ports, start
warm (``ServerGroup`` decides: no ``cpus`` pin, no ``env`` of their own, forked subprocesses);
an environment variable read at import time would otherwise take the launcher's value. The
testbed's benchmarks start every server cold, as an operator would.

The protocol, one JSON object per line: the parent writes ``{"argv", "env", "cwd", "log",
"append"}`` to the launcher's stdin; the launcher answers ``{"ready": true}`` once, ``{"pid"}``
per fork and ``{"exit": pid, "code"}`` when it reaps a server (``code`` as ``Popen.returncode``:
negative for a signal).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

# What ``sglang.launch_server`` imports before its ``__main__`` block and what ``run_server``
# imports for an HTTP server. ``sglang.launch_server`` itself stays unimported: runpy runs it
# as ``__main__`` in each fork.
PRELOAD = (
    "sglang.srt.arg_groups.overrides",
    "sglang.srt.plugins",
    "sglang.srt.server_args",
    "sglang.srt.utils",
    "sglang.srt.utils.common",
)
PRELOAD_AFTER_PLUGINS = ("sglang.srt.entrypoints.http_server",)
_REAP_INTERVAL_S = 0.2


def _send(message: dict) -> None:
    # os.write, not print: no Python buffer that a fork could copy into a server's log.
    os.write(1, (json.dumps(message) + "\n").encode())


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _run_server(request: dict) -> None:
    """In the fork: become the server ``request`` describes, run it, exit with its code."""
    import atexit
    import random
    import runpy

    os.setsid()  # its own process group, as Popen(start_new_session=True) gives a cold start
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if request["append"] else os.O_TRUNC)
    log = os.open(request["log"], flags, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the launcher's command pipe: not the server's
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # A fork inherits the launcher's random state: two servers would draw the same "random"
    # seeds and ports.
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.argv = ["sglang.launch_server", *request["argv"]]
    code = 0
    try:
        runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """The launcher's main loop: import, then fork a server per request and report exits."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from sglang.srt.plugins import load_plugins

    load_plugins()
    for name in PRELOAD_AFTER_PLUGINS:
        importlib.import_module(name)
    _send({"ready": True, "env": dict(os.environ)})  # as the imports left it
    commands = os.fdopen(0, "rb", buffering=0)
    pending = b""
    while True:
        readable, _, _ = select.select([commands], [], [], _REAP_INTERVAL_S)
        _reap()
        if not readable:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return  # the parent closed the pipe
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _run_server(request)
            _send({"pid": pid})


def fork_environment(
    env: dict[str, str],
    launcher_env: dict[str, str],
    imported_env: dict[str, str],
    ignore: tuple[str, ...],
) -> dict[str, str] | None:
    """The environment a fork of a warm launcher runs a server with, or None if the server must
    start cold. ``launcher_env``: what the launcher started with; ``imported_env``: what its
    imports left. A cold start's import sets the same variables, so the fork gets them where
    ``env`` lacks them; the result must then equal ``imported_env`` but for the ``ignore`` keys
    (each server's own, or read by nothing)."""
    added = {k: v for k, v in imported_env.items() if k not in launcher_env}
    merged = {**added, **env}

    def relevant(e: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in e.items() if k not in ignore}

    return merged if relevant(merged) == relevant(imported_env) else None


class WarmProcess:
    """A server forked by the warm launcher: the part of ``subprocess.Popen`` the testbed uses
    (``pid``, ``args``, ``returncode``, ``poll``, ``wait``)."""

    def __init__(self, launcher: WarmLauncher, pid: int, args: list[str]) -> None:
        self._launcher = launcher
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._launcher.wait_for_exit(0.1)
        return self.returncode


class WarmLauncher:
    """The parent's handle on one warm launcher process (started at once; it imports in the
    background while the caller goes on)."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = dict(env)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "sglang_pdd.testbed.warm_start"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.env,
                start_new_session=True,
            )
        self.log_path = log_path
        self._lock = threading.Lock()  # one fork request at a time
        self._changed = threading.Condition()
        self._ready = False
        self._imported_env: dict[str, str] = {}
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}
        self._closed = False
        threading.Thread(target=self._read, name="warm-launcher", daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._changed:
                if "ready" in message:
                    self._imported_env = message["env"]
                    self._ready = True
                elif "pid" in message:
                    self._pids.append(message["pid"])
                else:
                    self._exits[message["exit"]] = message["code"]
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _failed(self, what: str) -> RuntimeError:
        tail = self.log_path.read_text(errors="replace")[-3000:]
        return RuntimeError(f"the warm launcher {what}; its log tail:\n{tail}")

    def wait_ready(self) -> None:
        """Block until the launcher has imported SGLang (raise if it failed to)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._ready or self._closed, timeout=300):
                raise self._failed("did not finish importing SGLang in 300 s")
            if self._closed:
                raise self._failed("exited")

    def fork_env(self, env: dict[str, str], ignore: tuple[str, ...]) -> dict[str, str] | None:
        """``fork_environment`` against this launcher (waits for its imports)."""
        self.wait_ready()
        return fork_environment(env, self.env, self._imported_env, ignore)

    def spawn(self, cmd: list[str], env: dict[str, str], log_path: Path, append: bool):
        """Fork a server running ``cmd`` (``python -m sglang.launch_server ARGS``) with ``env``;
        its output goes to ``log_path``. Waits for the launcher's imports the first time."""
        if cmd[1:3] != ["-m", "sglang.launch_server"]:
            raise ValueError(f"the warm launcher runs sglang.launch_server only, not {cmd[:3]}")
        request = {
            "argv": cmd[3:],
            "env": env,
            "cwd": os.getcwd(),
            "log": str(log_path),
            "append": append,
        }
        self.wait_ready()
        with self._lock, self._changed:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            if not self._changed.wait_for(lambda: self._pids or self._closed, timeout=60):
                raise self._failed("did not fork in 60 s")
            if not self._pids:
                raise self._failed("exited")
            return WarmProcess(self, self._pids.pop(0), cmd)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
            if not self._closed:
                return None
        # The launcher is gone: its forks went to init, which reaps them.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -9
        return None

    def wait_for_exit(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def close(self) -> None:
        """Stop the launcher (its servers are stopped by their own handles first)."""
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)


if __name__ == "__main__":
    serve()
