"""``sglang-pdd launch --topology FILE --site A [--print]``: one site's ``launch_server`` commands.

Each instance of the site becomes one ``python -m sglang.launch_server`` command with the flags
its role needs (SGLang's PD flags, the ``--pdd-*`` flags, the KV-event publisher of a Main-
Decode) and its environment (chips, Mooncake's transport and TCP limits, the host IP Mooncake
announces). ``--print`` prints them (a shell script); without it they are started and watched:
one exiting stops the others.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass

from sglang_pdd.topology.schema import Instance, Topology, load_topology

# Mooncake over TCP: with its defaults (1,024 writes per peer, 1 s) a long prompt to a busy
# decode server is refused and SGLang blacklists the receiver (docs/pdd.md, docs/costs.md).
TCP_LIMITS = {
    "MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER": "65535",
    "MC_TCP_MAX_PENDING_ADMISSIONS_PER_PEER": "65535",
    "MC_TCP_ADMISSION_TIMEOUT_MS": "120000",
}
_DISAGGREGATION_MODE = {"prefill": "prefill", "relay": "decode", "main": "decode"}


@dataclass(frozen=True)
class LaunchCommand:
    """One instance's process: its name, environment additions and argv."""

    name: str
    env: dict[str, str]
    argv: list[str]

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.argv)}".strip()


def kv_events_config(inst: Instance, listen_host: str) -> str:
    """SGLang's ``--kv-events-config`` for a Main-Decode's publisher on its kv_events_port."""
    endpoint = f"tcp://{listen_host}:{inst.kv_events_port}"
    return json.dumps({"publisher": "zmq", "endpoint": endpoint, "bind": True, "topic": "kv"})


def server_argv(
    t: Topology,
    site: str,
    inst: Instance,
    listen_host: str | None = None,
    python: str = sys.executable,
) -> list[str]:
    """``launch_server``'s argv for ``inst`` (in ``site``); ``listen_host``: the address it
    binds (default: its ``host``; ``0.0.0.0`` in a container)."""
    host = listen_host or inst.host
    argv = [python, "-m", "sglang.launch_server"]
    argv += ["--model-path", t.model_path, "--host", host, "--port", str(inst.port)]
    argv += ["--tp-size", str(inst.tp)]
    argv += ["--disaggregation-mode", _DISAGGREGATION_MODE[inst.role]]
    argv += ["--disaggregation-transfer-backend", "mooncake", "--pdd-role", inst.role]
    if mooncake_transport(t, site, inst) == "rdma":
        argv += ["--disaggregation-ib-device", t.sites[site].ib_device]
    if inst.role == "prefill":
        if inst.bootstrap_port is not None:
            argv += ["--disaggregation-bootstrap-port", str(inst.bootstrap_port)]
        if remote := t.remote_hosts(site):
            argv += ["--pdd-wan-hosts", ",".join(remote)]
            argv += ["--pdd-wan-transport", wan_transport(t, site)]
        if inst.ledger_port is not None:
            argv += ["--pdd-ledger-port", str(inst.ledger_port), "--pdd-ledger-host", host]
    if inst.role == "main":
        argv += ["--disaggregation-decode-enable-radix-cache"]
        argv += ["--pdd-control-port", str(inst.control_port), "--pdd-control-host", host]
        if inst.control_curve_secret:
            argv += ["--pdd-control-curve-secret", inst.control_curve_secret]
            argv += ["--pdd-control-curve-clients", inst.control_curve_clients]
        if inst.control_insecure:
            argv += ["--pdd-control-insecure"]
        if inst.kv_events_port is not None:
            argv += ["--kv-events-config", kv_events_config(inst, host)]
    if inst.kv_events_insecure:
        argv += ["--pdd-kv-events-insecure"]
    return argv + list(inst.args)


def wan_over_rdma(t: Topology) -> bool:
    """Whether KV crosses the WAN over RDMA: every site names an RDMA device (RoCE routed
    between the sites). Otherwise it crosses over TCP."""
    return all(s.ib_device is not None for s in t.sites.values())


def mooncake_transport(t: Topology, site: str, inst: Instance) -> str:
    """``rdma`` or ``tcp``: the transport of ``inst``'s (first) Mooncake engine.

    A site without an RDMA device is TCP. A Main-Decode receives KV only across the WAN, so it
    is TCP unless the WAN carries RDMA, whatever its own site has (a receiver has one engine,
    and a TCP sender cannot reach an RDMA-only one). A Prefill in an RDMA site stays RDMA: its
    second engine (``--pdd-wan-transport tcp``) carries the WAN's KV."""
    if t.sites[site].ib_device is None:
        return "tcp"
    if inst.role == "main" and not wan_over_rdma(t):
        return "tcp"
    return "rdma"


def wan_transport(t: Topology, site: str) -> str:
    """A Prefill's ``--pdd-wan-transport``: ``tcp`` (a second engine, forced to TCP) when its
    site has RDMA and the WAN does not; ``shared`` (its one engine) otherwise."""
    return "tcp" if t.sites[site].ib_device is not None and not wan_over_rdma(t) else "shared"


def server_env(t: Topology, site: str, inst: Instance) -> dict[str, str]:
    """What ``inst``'s process adds to its environment.

    TCP is forced with ``MC_FORCE_TCP=1``: Mooncake installs RDMA whenever the host has an
    HCA, whatever ``MOONCAKE_PROTOCOL`` says. A Prefill in an RDMA site is never forced to TCP
    as a whole; it gets Mooncake's TCP limits for its WAN engine."""
    env = {"SGLANG_HOST_IP": inst.host}  # the address Mooncake announces to its peers
    if inst.chips:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, inst.chips))
    if mooncake_transport(t, site, inst) == "tcp":
        env |= {"MOONCAKE_PROTOCOL": "tcp", "MC_FORCE_TCP": "1", **TCP_LIMITS}
    else:
        env["MOONCAKE_PROTOCOL"] = "rdma"
        if inst.role == "prefill" and wan_transport(t, site) == "tcp" and t.remote_hosts(site):
            env |= TCP_LIMITS
    return env


def launch_commands(t: Topology, site: str) -> list[LaunchCommand]:
    """Every instance of ``site``, as a ``LaunchCommand``."""
    if site not in t.sites:
        raise ValueError(f"--site {site!r}: the topology's sites are {', '.join(t.sites)}")
    return [
        LaunchCommand(inst.name, server_env(t, site, inst), server_argv(t, site, inst))
        for inst in t.sites[site].instances
    ]


def router_command(t: Topology, topology_path: str) -> LaunchCommand:
    """The router, which reads the same file."""
    argv = [sys.executable, "-m", "sglang_pdd.cli", "router", "--topology", topology_path]
    return LaunchCommand("router", {}, argv)


def main(argv: list[str]) -> int:
    """Entry point of ``sglang-pdd launch``."""
    parser = argparse.ArgumentParser(
        prog="sglang-pdd launch", description="start (or print) one site's instances"
    )
    parser.add_argument("--topology", required=True, help="the deployment's topology file")
    parser.add_argument("--site", required=True, help="the site whose instances to start")
    parser.add_argument("--print", action="store_true", help="print the commands, start none")
    parser.add_argument(
        "--no-router", action="store_true", help="do not start the router in its site"
    )
    args = parser.parse_args(argv)
    try:
        t = load_topology(args.topology)
        commands = launch_commands(t, args.site)
    except ValueError as exc:
        parser.error(str(exc))
    if t.router.site == args.site and not args.no_router:
        commands.append(router_command(t, args.topology))
    if args.print:
        print("#!/usr/bin/env bash\nset -euo pipefail")
        for command in commands:
            print(f"# {command.name}\n{command.shell()} &")
        print("wait -n")
        return 0
    return _run(commands)


def _run(commands: list[LaunchCommand]) -> int:
    """Start every command; when one exits, stop the others and return its exit code."""
    procs = [
        subprocess.Popen(c.argv, env={**os.environ, **c.env}, start_new_session=True)
        for c in commands
    ]
    try:
        pid, status = os.wait()
        code = os.waitstatus_to_exitcode(status)
        name = next(c.name for c, p in zip(commands, procs, strict=True) if p.pid == pid)
        print(f"sglang-pdd launch: {name} exited with {code}; stopping the others", flush=True)
        return code or 1
    except KeyboardInterrupt:
        return 130
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait()
