"""Free TCP ports for servers on one host, never the same one twice in a process.

Binding to port 0 lets the kernel pick a port nobody holds now; remembering what was handed out
keeps two servers of the same test run (or two clusters in one process) from being given the same
port before either has bound it. Separate processes are kept apart by the kernel's choice being
random over the ephemeral range and by each server binding within seconds.
"""

from __future__ import annotations

import socket
import threading

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now and was not returned before in this process."""
    with _lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
            # SGLang derives a few internal ports from the HTTP port; keep a gap of 10.
            if all(abs(port - used) > 10 for used in _handed_out):
                _handed_out.add(port)
                return port
    raise RuntimeError("could not find a free TCP port after 100 tries")
