"""``sglang-pdd render k8s``: every manifest validates against Kubernetes' own schemas
(``kubernetes-validate``, strict: no unknown fields), and names the topology's ports and
flags."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from sglang_pdd.topology.k8s import dump, main, namespace_of, render_site
from sglang_pdd.topology.schema import load_topology

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "topology.yaml"
K8S_VERSION = "1.33"


def _rendered(site: str) -> list[dict]:
    return render_site(load_topology(EXAMPLE), site, EXAMPLE.read_text())


@pytest.mark.parametrize("site", ["A", "B"])
def test_every_manifest_validates_against_kubernetes_schemas(site):
    docs = list(yaml.safe_load_all(dump(_rendered(site))))  # as kubectl would read them
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("site", ["A", "B"])
def test_manifests_name_the_topologys_ports_and_flags(site):
    t = load_topology(EXAMPLE)
    docs = _rendered(site)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for inst in t.sites[site].instances:
        spec = deployments[inst.name]["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        command = container["command"]
        ports = {p["containerPort"] for p in container["ports"]}
        wanted = {inst.port, inst.bootstrap_port, inst.ledger_port}
        wanted |= {inst.control_port, inst.kv_events_port}
        assert ports == wanted - {None}
        assert {p["port"] for p in services[inst.name]["spec"]["ports"]} == ports
        assert command[command.index("--port") + 1] == str(inst.port)
        assert command[command.index("--pdd-role") + 1] == inst.role
        assert command[command.index("--tp-size") + 1] == str(inst.tp)
        assert container["resources"]["limits"]["nvidia.com/gpu"] == inst.tp
        if inst.control_port is not None:
            assert command[command.index("--pdd-control-port") + 1] == str(inst.control_port)
        if inst.ledger_port is not None:
            assert command[command.index("--pdd-ledger-port") + 1] == str(inst.ledger_port)
        assert deployments[inst.name]["metadata"]["namespace"] == namespace_of(site)
    if site == t.router.site:
        router = deployments["sglang-pdd-router"]["spec"]
        assert router["replicas"] == t.router.replicas
        config = next(d for d in docs if d["kind"] == "ConfigMap")
        assert load_topology_text(config["data"]["topology.yaml"]) == t
        secrets = {
            e["valueFrom"]["secretKeyRef"]["key"]
            for e in router["template"]["spec"]["containers"][0]["env"]
        }
        assert secrets == {"PDD_API_KEY", "PDD_ADMIN_API_KEY"}


def load_topology_text(text: str):
    from sglang_pdd.topology.schema import parse_topology

    return parse_topology(yaml.safe_load(text))


def test_a_main_without_curve_keys_is_not_rendered(tmp_path):
    text = (
        EXAMPLE.read_text()
        .replace("control_curve_secret:", "#")
        .replace("control_curve_clients:", "#")
    )
    path = tmp_path / "t.yaml"
    path.write_text(text.replace("host: 10.1.0.21", "host: 127.0.0.1"))
    with pytest.raises(ValueError, match="control socket binds the node's interfaces"):
        render_site(load_topology(path), "B", text)


def test_render_writes_one_file_per_site(tmp_path):
    assert main(["k8s", "--topology", str(EXAMPLE), "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.yaml", "B.yaml"]
