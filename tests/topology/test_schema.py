"""The topology file: the example checks, and every kind of mistake is refused naming its key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from sglang_pdd.topology.schema import load_topology, parse_topology

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "topology.yaml"


def _raw() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_the_example_topology_is_valid():
    t = load_topology(EXAMPLE)
    assert [i.name for _, i in t.instances()] == ["prefill-0", "relay-0", "main-0"]
    assert t.remote_hosts("A") == ["10.1.0.21"]
    ((_, main),) = t.instances("main")
    assert main.control_endpoint == "tcp://10.1.0.21:5600"
    assert main.kv_events_endpoint == "tcp://10.1.0.21:5557"


def _main(raw: dict) -> dict:
    return raw["sites"]["B"]["instances"][0]


MISTAKES = [
    (lambda r: _main(r).update(port="30000"), "sites.B.instances[0].port: Expected `int`"),
    (lambda r: _main(r).update(colour="red"), "sites.B.instances[0]: Object contains unknown"),
    (lambda r: _main(r).update(role="decode"), "sites.B.instances[0].role"),
    (lambda r: _main(r).pop("control_port"), "sites.B.instances[0].control_port: a main"),
    (lambda r: _main(r).update(port=70000), "sites.B.instances[0].port: must be in 1..65535"),
    (lambda r: _main(r).update(tp=4), "sites.B.instances[0].chips: 8 chips for tp 4"),
    (lambda r: _main(r).update(control_port=30000), "control_port: 10.1.0.21:30000 is used twice"),
    (lambda r: _main(r).pop("control_curve_clients"), "go together"),
    (
        lambda r: (_main(r).pop("control_curve_secret"), _main(r).pop("control_curve_clients")),
        "not loopback: give it control_curve_secret",
    ),
    (lambda r: _main(r).pop("kv_events_insecure"), "kv_events_port: the KV-event publisher"),
    (lambda r: r["router"].update(site="C"), "router.site: 'C' is not one of A, B"),
    (lambda r: r["sites"].pop("B"), "sites: PDD spans two sites, got 1"),
    (lambda r: r["sites"]["A"]["instances"][0].update(bootstrap_port=None, role="main"), "main"),
    (lambda r: r["sites"]["A"]["instances"][1].update(control_port=1), "only a main instance"),
    (lambda r: r["sites"]["A"]["instances"][1].update(name="prefill-0"), "is used twice"),
    (lambda r: r["wan"].update(bandwidth_mbps=0), "wan: bandwidth_mbps must be > 0"),
    (lambda r: _main(r).update(ledger_port=5700), "ledger_port: only a prefill instance"),
    (
        lambda r: r["sites"]["A"]["instances"].append(
            {
                "name": "prefill-1",
                "role": "prefill",
                "host": "10.0.0.13",
                "port": 1,
                "ledger_port": 2,
            }
        ),
        "the routers share one transfer ledger",
    ),
    (lambda r: r.pop("wan"), "(top level): Object missing required field `wan`"),
    (lambda r: _main(r).update(url="10.1.0.21:30000"), "url: an http(s):// URL"),
]


@pytest.mark.parametrize(("mistake", "message"), MISTAKES)
def test_a_mistake_is_refused_naming_its_key(mistake, message):
    raw = copy.deepcopy(_raw())
    mistake(raw)
    with pytest.raises(ValueError) as refused:
        parse_topology(raw)
    assert message in str(refused.value)


def test_a_file_that_is_not_yaml_or_missing_is_named(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("sites: [unclosed")
    with pytest.raises(ValueError, match="t.yaml: not YAML"):
        load_topology(bad)
    with pytest.raises(ValueError, match="cannot read the topology file"):
        load_topology(tmp_path / "absent.yaml")
