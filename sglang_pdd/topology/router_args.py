"""The router's flags from a topology file (``sglang-pdd router --topology FILE``).

The file's instances become ``--prefill``/``--relay``/``--main`` flags (each Main-Decode's URL,
control and KV-event endpoints kept together; ``--relay-shares-prefill`` when a Relay-Decode
shares a Prefill's host and chips), its WAN the policy's assumed link, and
``router.options`` (flag name -> value) the other flags. The router's own parser then checks
them as if typed: an unknown option is refused by name. Flags given on the command line after
``--topology`` win over the file's options.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from sglang_pdd.topology.schema import Topology

# Flags the file owns: giving them beside --topology would make two sources of instances.
INSTANCE_FLAGS = ("--prefill", "--relay", "--main", "--main-control", "--main-kv-events")
INSTANCE_FLAGS += ("--transfer-ledger",)
_KEY_FLAGS = {
    "api_key_env": "--api-key",
    "admin_api_key_env": "--admin-api-key",
    "instance_api_key_env": "--instance-api-key",
}


def router_argv(t: Topology, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The router's argv for ``t`` (secrets read from ``environ``)."""
    r = t.router
    argv = ["--host", r.host, "--port", str(r.port)]
    argv += ["--wan-bandwidth-mbps", str(t.wan.bandwidth_mbps), "--wan-rtt-ms", str(t.wan.rtt_ms)]
    for _, inst in t.instances("prefill"):
        argv += ["--prefill", inst.http_url]
        if inst.ledger_endpoint is not None:
            argv += ["--transfer-ledger", inst.ledger_endpoint]
    relays = t.instances("relay")
    for _, inst in relays:
        argv += ["--relay", inst.http_url]
    if not relays:
        argv.append("--no-relay")
    elif _relay_shares_prefill(t):
        argv.append("--relay-shares-prefill")
    for _, inst in t.instances("main"):
        argv += ["--main", inst.http_url, "--main-control", inst.control_endpoint]
        if inst.kv_events_endpoint is not None:
            argv += ["--main-kv-events", inst.kv_events_endpoint]
    for name, value in r.options.items():
        flag = "--" + name
        if flag in INSTANCE_FLAGS or flag == "--topology":
            raise ValueError(f"router.options.{name}: the topology's instances set it")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            raise ValueError(
                f"router.options.{name}: {value!r} is not a value; leave the option out for "
                "its default"
            )
        else:
            argv += [flag, str(value)]
    for field, flag in _KEY_FLAGS.items():
        if (variable := getattr(r.keys, field)) is None:
            continue
        if not environ.get(variable):
            raise ValueError(f"router.keys.{field}: the environment variable {variable} is unset")
        argv += [flag, environ[variable]]
    return argv


def _relay_shares_prefill(t: Topology) -> bool:
    """A Relay-Decode and a Prefill on one host whose chips overlap (no chips listed: every
    chip visible there) compete for the same compute."""
    for _, relay in t.instances("relay"):
        for _, prefill in t.instances("prefill"):
            if relay.host != prefill.host:
                continue
            if not relay.chips or not prefill.chips or set(relay.chips) & set(prefill.chips):
                return True
    return False


def expand_topology(argv: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """``argv`` with ``--topology FILE`` replaced by the flags the file stands for (``argv``
    unchanged without it); ``ValueError`` naming the flag or key on a conflict."""
    from sglang_pdd.topology.schema import load_topology

    path, rest = None, []
    tokens = iter(argv)
    for token in tokens:
        if token == "--topology":
            path = next(tokens, None)
            if path is None:
                raise ValueError("--topology takes a file")
        elif token.startswith("--topology="):
            path = token.split("=", 1)[1]
        else:
            rest.append(token)
    if path is None:
        return list(argv)
    given = {t.split("=", 1)[0] for t in rest if t.startswith("--")}
    if clash := sorted(given & set(INSTANCE_FLAGS)):
        raise ValueError(
            f"{', '.join(clash)}: the topology file lists the instances; give either it or "
            "these flags"
        )
    return router_argv(load_topology(path), environ) + rest
