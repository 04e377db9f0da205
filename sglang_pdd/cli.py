"""The ``sglang-pdd`` console script: a lazy registry of subcommands.

Each subcommand lives in the module of its role and is imported only when invoked, so
``sglang-pdd sim`` never pays for importing SGLang and ``sglang-pdd router`` never imports the
simulator.
"""

from __future__ import annotations

import importlib
import sys

# name -> ("module:function", one-line help). The function takes argv (list[str]) and returns an
# exit code.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "tiny-model": ("sglang_pdd.testbed.tiny_model:main", "write a small random Llama model"),
    "router": ("sglang_pdd.router.cli:main", "run the PDD router in front of P, RLD and MD"),
    "wan-link": ("sglang_pdd.transfer.wan_proxy:main", "emulated-WAN TCP proxy (bandwidth, delay)"),
    "control-keys": (
        "sglang_pdd.main_decode.control_auth:main",
        "write CURVE key pairs for the Main-Decode control socket",
    ),
    "launch": (
        "sglang_pdd.topology.launch:main",
        "start (or --print) one site's instances from a topology file",
    ),
    "render": (
        "sglang_pdd.topology.k8s:main",
        "render Kubernetes manifests for both sites from a topology file",
    ),
    "dashboard": (
        "sglang_pdd.router.dashboard:main",
        "print the router's Grafana dashboard (JSON)",
    ),
    "hooks": ("sglang_pdd.patches:print_record", "print every hook sglang-pdd puts into SGLang"),
    "flags": ("sglang_pdd.flags_doc:main", "print the flag reference (docs/flags.md)"),
    "sim": ("sglang_pdd.sim.cli:sim_main", "simulate one cluster configuration on a trace"),
    "plan": ("sglang_pdd.sim.cli:plan_main", "search chip counts and link capacity for BCR"),
}


def _usage() -> str:
    lines = ["usage: sglang-pdd SUBCOMMAND [ARGS...]", "", "subcommands:"]
    lines += [f"  {name:<12} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``sglang-pdd SUBCOMMAND ...`` to the subcommand's module."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"sglang-pdd: unknown subcommand {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    target, _ = SUBCOMMANDS[name]
    module_name, func_name = target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
