"""Run contenders on a workload and collect their summaries."""

from __future__ import annotations

import dataclasses

from sglang_pdd.sim.cluster import ClusterSim, RequestRecord
from sglang_pdd.sim.config import ClusterSpec, SimConfig
from sglang_pdd.sim.metrics import ContenderResult, summarize
from sglang_pdd.sim.workload import Request


def run_contender(
    spec: ClusterSpec, config: SimConfig, requests: list[Request]
) -> tuple[ContenderResult, list[RequestRecord]]:
    """Simulate one contender; returns its summary and per-request records."""
    sim = ClusterSim(spec, config)
    records = sim.run(requests)
    return summarize(sim, spec, config, records), records


def run_all(config: SimConfig, requests: list[Request]) -> list[ContenderResult]:
    """Simulate every contender of config on the same requests."""
    return [run_contender(spec, config, requests)[0] for spec in config.contenders]


def with_contenders(config: SimConfig, *specs: ClusterSpec) -> SimConfig:
    """A copy of config with other contenders."""
    return dataclasses.replace(config, contenders=tuple(specs))
