"""Mooncake's transport in what ``sglang-pdd launch`` prints and ``render k8s`` writes, for a
site with RDMA and without: TCP is always forced with ``MC_FORCE_TCP=1`` (``MOONCAKE_PROTOCOL``
alone gives RDMA on a host with an HCA), a Prefill in an RDMA site is never forced to TCP as a
whole and gets a second, TCP engine for the WAN instead (``--pdd-wan-transport tcp``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sglang_pdd.topology.k8s import render_site
from sglang_pdd.topology.launch import launch_commands, main
from sglang_pdd.topology.schema import parse_topology

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "topology.yaml"
TCP = {"MOONCAKE_PROTOCOL": "tcp", "MC_FORCE_TCP": "1"}


def _topology(a_device: str | None, b_device: str | None) -> tuple:
    raw = yaml.safe_load(EXAMPLE.read_text())
    for site, device in (("A", a_device), ("B", b_device)):
        raw["sites"][site].pop("ib_device", None)
        if device:
            raw["sites"][site]["ib_device"] = device
    return parse_topology(raw), yaml.safe_dump(raw)


def _launched(t) -> dict:
    """{instance name: (env, argv)} of both sites as ``sglang-pdd launch`` starts them."""
    return {c.name: (c.env, c.argv) for site in ("A", "B") for c in launch_commands(t, site)}


def _rendered(t, text) -> dict:
    """{instance name: (env, command)} of both sites' Deployments as ``render k8s`` writes
    them."""
    out = {}
    for site in ("A", "B"):
        for doc in render_site(t, site, text):
            if doc["kind"] != "Deployment":
                continue
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            if "sglang.launch_server" not in container["command"]:
                continue  # the router
            env = {e["name"]: e["value"] for e in container["env"]}
            out[doc["metadata"]["name"]] = (env, container["command"])
    return out


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("render", [_launched, _rendered], ids=["launch", "render-k8s"])
def test_a_site_with_rdma_keeps_prefill_on_rdma_with_a_tcp_engine_for_the_wan(render):
    t, text = _topology("mlx5_0", None)
    out = render(t) if render is _launched else render(t, text)
    p_env, p_argv = out["prefill-0"]
    assert p_env["MOONCAKE_PROTOCOL"] == "rdma" and "MC_FORCE_TCP" not in p_env
    assert p_env["MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER"] == "65535"  # for its WAN engine
    assert _flag(p_argv, "--pdd-wan-transport") == "tcp"
    assert _flag(p_argv, "--disaggregation-ib-device") == "mlx5_0"
    r_env, r_argv = out["relay-0"]
    assert r_env["MOONCAKE_PROTOCOL"] == "rdma" and "MC_FORCE_TCP" not in r_env
    assert _flag(r_argv, "--disaggregation-ib-device") == "mlx5_0"
    m_env, m_argv = out["main-0"]
    assert TCP.items() <= m_env.items() and "--disaggregation-ib-device" not in m_argv


@pytest.mark.parametrize("render", [_launched, _rendered], ids=["launch", "render-k8s"])
def test_sites_without_rdma_force_tcp_everywhere(render):
    t, text = _topology(None, None)
    out = render(t) if render is _launched else render(t, text)
    for name in ("prefill-0", "relay-0", "main-0"):
        env, argv = out[name]
        assert TCP.items() <= env.items(), name
        assert "--disaggregation-ib-device" not in argv, name
    assert _flag(out["prefill-0"][1], "--pdd-wan-transport") == "shared"


def test_rdma_routed_between_the_sites_keeps_one_rdma_engine_everywhere():
    t, _ = _topology("mlx5_0", "mlx5_1")
    out = _launched(t)
    for name in ("prefill-0", "relay-0", "main-0"):
        env, _ = out[name]
        assert env["MOONCAKE_PROTOCOL"] == "rdma" and "MC_FORCE_TCP" not in env, name
    assert _flag(out["prefill-0"][1], "--pdd-wan-transport") == "shared"
    assert _flag(out["main-0"][1], "--disaggregation-ib-device") == "mlx5_1"


def test_rdma_only_in_the_main_decode_site_still_receives_the_wan_over_tcp():
    t, _ = _topology(None, "mlx5_1")
    out = _launched(t)
    assert TCP.items() <= out["main-0"][0].items()
    assert "--disaggregation-ib-device" not in out["main-0"][1]


def test_the_printed_script_carries_the_environment(tmp_path, capsys):
    shown = []
    for devices, site in ((("mlx5_0", None), "A"), ((None, None), "A"), (("mlx5_0", None), "B")):
        _, text = _topology(*devices)
        path = tmp_path / "topology.yaml"
        path.write_text(text)
        assert main(["--topology", str(path), "--site", site, "--print", "--no-router"]) == 0
        printed = capsys.readouterr().out
        shown.append(f"--- ib_device A={devices[0]} B={devices[1]}, site {site}\n{printed}")
        lines = [line for line in printed.splitlines() if "launch_server" in line]
        for line in lines:
            forced = "MC_FORCE_TCP=1" in line
            assert forced == ("MOONCAKE_PROTOCOL=tcp" in line), line
            if "--pdd-role prefill" in line and devices[0]:
                assert not forced and "--pdd-wan-transport tcp" in line
    with capsys.disabled():  # -s shows what the launcher printed
        print("\n".join(shown))
