"""``sglang-pdd render k8s --topology FILE [--site A] [--out DIR]``: Kubernetes manifests.

Per site: one Deployment and one Service per instance (the same ``launch_server`` flags as
``sglang-pdd launch``, one container, the instance's GPUs as ``nvidia.com/gpu``, host
networking so that Mooncake announces the node's address, the topology's ``host``); in the
router's site also the router's Deployment and Service and a ConfigMap holding the topology
file the router reads. Secrets come from a Secret named ``sglang-pdd-keys``, one key per
environment variable the topology names. Tests validate the output against Kubernetes' own
schemas (``kubernetes-validate``) and check it names the topology's ports and flags.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from sglang_pdd.topology.launch import server_argv, server_env
from sglang_pdd.topology.schema import Instance, Topology, load_topology

TOPOLOGY_MOUNT = "/etc/sglang-pdd"
KEYS_SECRET = "sglang-pdd-keys"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def namespace_of(site: str) -> str:
    return f"sglang-pdd-{site.lower()}"


def _ports(inst: Instance) -> list[dict]:
    named = [("http", inst.port), ("bootstrap", inst.bootstrap_port), ("ledger", inst.ledger_port)]
    named += [("control", inst.control_port), ("kv-events", inst.kv_events_port)]
    return [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in named if p is not None]


def _check_renderable(t: Topology, site: str) -> None:
    problems = []
    for i, inst in enumerate(t.sites[site].instances):
        key = f"sites.{site}.instances[{i}]"
        if not _DNS_LABEL.match(inst.name):
            problems.append(f"{key}.name: {inst.name!r} is not a Kubernetes name (a DNS label)")
        # In a pod the servers bind every interface of the node (host networking).
        if inst.role == "main" and not (inst.control_curve_secret or inst.control_insecure):
            problems.append(
                f"{key}: a pod's control socket binds the node's interfaces: give it "
                "control_curve_secret/control_curve_clients (or control_insecure: true)"
            )
        if inst.kv_events_port is not None and not inst.kv_events_insecure:
            problems.append(
                f"{key}.kv_events_port: a pod's publisher binds the node's interfaces: "
                "kv_events_insecure: true (on a private link), or no kv_events_port"
            )
    if problems:
        raise ValueError("; ".join(problems))


def _deployment(name, namespace, labels, container, replicas=1, volumes=(), host_net=False):
    spec = {"containers": [container], "volumes": list(volumes)}
    if host_net:
        spec |= {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def _service(name, namespace, labels, ports, kind="ClusterIP"):
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "type": kind,
            "selector": labels,
            "ports": [
                {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"]}
                for p in ports
            ],
        },
    }


def instance_manifests(t: Topology, site: str, inst: Instance) -> list[dict]:
    """The Deployment and Service of one instance."""
    ns, labels = (
        namespace_of(site),
        {"app.kubernetes.io/name": inst.name, "sglang-pdd/role": inst.role},
    )
    env = {k: v for k, v in server_env(t, site, inst).items() if k != "CUDA_VISIBLE_DEVICES"}
    model_dir = str(Path(t.model_path).parent)
    container = {
        "name": "sglang",
        "image": t.image,
        "command": server_argv(t, site, inst, listen_host="0.0.0.0", python="python3"),
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": _ports(inst),
        "resources": {"limits": {"nvidia.com/gpu": inst.tp}},
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "volumeMounts": [
            {"name": "model", "mountPath": model_dir, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    volumes = [
        {"name": "model", "hostPath": {"path": model_dir, "type": "Directory"}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
    ]
    if inst.control_curve_secret:  # MD's key pair and the routers' public keys, from Secrets
        for volume, path in (
            ("curve", str(Path(inst.control_curve_secret).parent)),
            ("curve-clients", inst.control_curve_clients),
        ):
            secret = f"{inst.name}-{volume}"
            volumes.append({"name": volume, "secret": {"secretName": secret}})
            container["volumeMounts"].append({"name": volume, "mountPath": path, "readOnly": True})
    return [
        _deployment(inst.name, ns, labels, container, volumes=volumes, host_net=True),
        _service(inst.name, ns, labels, _ports(inst)),
    ]


def router_manifests(t: Topology, topology_text: str) -> list[dict]:
    """The router's ConfigMap (the topology file), Deployment and Service."""
    ns, name = namespace_of(t.router.site), "sglang-pdd-router"
    labels = {"app.kubernetes.io/name": name, "sglang-pdd/role": "router"}
    env = [
        {"name": var, "valueFrom": {"secretKeyRef": {"name": KEYS_SECRET, "key": var}}}
        for var in (t.router.keys.api_key_env, t.router.keys.admin_api_key_env)
        + (t.router.keys.instance_api_key_env,)
        if var is not None
    ]
    port = {"name": "http", "containerPort": t.router.port, "protocol": "TCP"}
    container = {
        "name": "router",
        "image": t.image,
        "command": ["python3", "-m", "sglang_pdd.cli", "router"]
        + ["--topology", f"{TOPOLOGY_MOUNT}/topology.yaml"],
        "env": env,
        "ports": [port],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10},
        "volumeMounts": [{"name": "topology", "mountPath": TOPOLOGY_MOUNT, "readOnly": True}],
    }
    volumes = [{"name": "topology", "configMap": {"name": "sglang-pdd-topology"}}]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "sglang-pdd-topology", "namespace": ns},
        "data": {"topology.yaml": topology_text},
    }
    return [
        config_map,
        _deployment(name, ns, labels, container, t.router.replicas, volumes),
        _service(name, ns, labels, [port], kind="LoadBalancer"),
    ]


def render_site(t: Topology, site: str, topology_text: str) -> list[dict]:
    """Every manifest of ``site``, its Namespace first."""
    if site not in t.sites:
        raise ValueError(f"--site {site!r}: the topology's sites are {', '.join(t.sites)}")
    _check_renderable(t, site)
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace_of(site)}}]
    for inst in t.sites[site].instances:
        docs += instance_manifests(t, site, inst)
    if site == t.router.site:
        docs += router_manifests(t, topology_text)
    return docs


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # plain YAML: no &anchors for shared label maps
        return True


def dump(docs: list[dict]) -> str:
    """The manifests as one multi-document YAML stream."""
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False)


def main(argv: list[str]) -> int:
    """Entry point of ``sglang-pdd render``."""
    parser = argparse.ArgumentParser(
        prog="sglang-pdd render", description="render deployment files from a topology file"
    )
    parser.add_argument("target", choices=["k8s"], help="what to render")
    parser.add_argument("--topology", required=True, help="the deployment's topology file")
    parser.add_argument("--site", help="one site only (default: every site)")
    parser.add_argument("--out", help="write SITE.yaml files here (default: standard output)")
    args = parser.parse_args(argv)
    try:
        t = load_topology(args.topology)
        text = Path(args.topology).read_text()
        sites = [args.site] if args.site else list(t.sites)
        rendered = {site: render_site(t, site, text) for site in sites}
    except ValueError as exc:
        parser.error(str(exc))
    for site, docs in rendered.items():
        out = dump(docs)
        if args.out:
            path = Path(args.out) / f"{site}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(out)
            print(f"wrote {path}")
        else:
            print(f"---\n# site {site}\n{out}", end="")
    return 0
