"""Free TCP ports for servers on one host, never the same one twice in a process.

Ports are drawn below the kernel's ephemeral range (``ip_local_port_range``): the kernel gives
outgoing connections their local port from that range, so a port picked there can be taken by
any connection in the seconds before an SGLang server binds it ("address already in use").
Below it only servers bind explicitly. Each candidate is test-bound before it is handed out, and
remembering what was handed out keeps two servers of one process from sharing a port.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

_lock = threading.Lock()
_handed_out: set[int] = set()
_LOWEST = 10_000
# Ports handed out lie more than this apart: SGLang derives a few internal ports from the HTTP
# port, and the launcher gives each server a Mooncake range of this many ports from its own.
SPACING = 10
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unreadable)."""
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now, outside the ephemeral range, and was not
    returned before in this process."""
    top = _ephemeral_start()
    with _lock:
        for _ in range(1000):
            port = random.randrange(_LOWEST, top) if top > _LOWEST + 100 else 0
            if port == 0:  # an unusual ephemeral range: let the kernel choose
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((host, 0))
                    port = sock.getsockname()[1]
            if all(abs(port - used) > SPACING for used in _handed_out) and _bindable(host, port):
                _handed_out.add(port)
                return port
    raise RuntimeError("could not find a free TCP port after 1000 tries")
