"""SGLang's own gateway (``smg``, PyPI) in front of SGLang PD: the baseline operators run.

The testbed's cross-DC and same-DC contenders are SGLang PD behind ``smg launch
--pd-disaggregation``, as an SGLang deployment serves PD today; PDD is measured against them.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from sglang_pdd.testbed.launcher import ServerGroup, ServerProcess
from sglang_pdd.testbed.ports import free_port


def smg_command() -> str:
    """The ``smg`` executable of this Python environment (installed by scripts/requirements)."""
    here = Path(sys.executable).with_name("smg")
    found = str(here) if here.exists() else shutil.which("smg")
    if found is None:
        raise RuntimeError("smg (SGLang's gateway, PyPI 'smg') is not installed")
    return found


def start_smg(
    group: ServerGroup,
    name: str,
    prefill_url: str,
    bootstrap_port: int,
    decode_url: str,
    timeout: float = 120.0,
    cpus: str = "",
) -> ServerProcess:
    """Start ``smg`` serving SGLang PD over one prefill and one decode server; wait until its
    ``/readiness`` answers 200, which it does once its workers passed their health checks
    (its ``/health`` is 200 from the start, while a request would still get 503 "No prefill
    workers available"). ``cpus``: the cores it runs on (empty: any)."""
    port = free_port()
    cmd = [
        smg_command(),
        "launch",
        "--pd-disaggregation",
        "--prefill",
        prefill_url,
        str(bootstrap_port),
        "--decode",
        decode_url,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--policy",
        "round_robin",
        # smg serves metrics on 0.0.0.0:29000 by default: two gateways (same-DC and cross-DC
        # PD) would collide there; each gets a free loopback port.
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(free_port()),
    ]
    server = group.launch_command(name, cmd, port, cpus=cpus)
    group.wait_ready(server, timeout=timeout, path="/readiness")
    return server
