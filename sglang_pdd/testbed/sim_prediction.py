"""The simulator's prediction of a testbed run on emulated chips, beside what was measured.

The testbed's servers pace every forward to ``InstancePerf.forward_time`` of the chip they
emulate and charge each KV write at the emulated model's bytes, so the simulator needs no
calibration: it runs the same chips, model and engine (``ChipEmulation``), the same link (the
testbed's WAN settings; the intra-DC path at the chip's interconnect, as the servers charge it)
and the same topology (1 P and 1 decoder per contender, RLD and MD for PDD) on the very requests
the testbed sent. Token counts follow the emulation: a testbed prompt token is ``token_scale``
model tokens (compute and KV bytes), while each streamed testbed token is one model decode
step, so prompts are scaled and outputs are not. Times are chip time (the testbed's reported
times, time dilation undone).

The figures are defined as in ``sglang_pdd.testbed.report``: percentiles (numpy's, linear) over
requests for TTFT and E2E, and over every inter-token gap of every request for ITL. The
simulator decodes as a fluid (no per-token times), so a request's gaps are rebuilt from its
record: RLD's ids at RLD's pace, the handoff gap (MD's first id after RLD's last) once, MD's ids
at MD's pace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from sglang_pdd.cache.prefix_blocks import block_hashes
from sglang_pdd.policy import HandoffPolicyConfig, PipelinePolicyConfig
from sglang_pdd.sim.cluster import RequestRecord
from sglang_pdd.sim.config import ClusterSpec, PoolSpec, SimConfig
from sglang_pdd.sim.runner import run_contender
from sglang_pdd.sim.workload import Request
from sglang_pdd.testbed.emulated_chips import ChipEmulation
from sglang_pdd.testbed.report import pct

# Contenders the simulator models, by their testbed names.
SIMULATED = ("same-dc", "cross-dc", "pdd")
# (metric, percentile) pairs predicted; the fidelity goal covers GOAL_FIGURES.
FIGURES = (
    ("ttft", 50),
    ("ttft", 90),
    ("ttft", 99),
    ("itl", 50),
    ("itl", 99),
    ("e2e", 50),
    ("e2e", 90),
)
GOAL_FIGURES = (("ttft", 50), ("ttft", 90), ("itl", 50), ("e2e", 50), ("e2e", 90))
FIDELITY_GOAL = 0.10  # the simulator within 10% of the testbed on GOAL_FIGURES


def _cluster_default(name: str):
    from sglang_pdd.testbed.cluster import PddClusterConfig

    return next(f.default for f in fields(PddClusterConfig) if f.name == name)


@dataclass(frozen=True)
class Replayed:
    """One request as the testbed sent it: when (chip time, from the workload's start), its
    prompt ids and how many ids it streamed back."""

    sent_s: float
    prompt_ids: tuple[int, ...]
    output_tokens: int


@dataclass(frozen=True)
class EmulatedScenario:
    """What the simulator must know of a testbed run besides its requests.

    wan_mbps, wan_delay_ms: the WAN's bandwidth and one-way delay (chip time).
    chunked_prefill_size: the servers' ``--chunked-prefill-size`` (testbed tokens).
    ttft_slo_s: the PDD router's ``--ttft-slo-s`` in chip time (None: the router's default).
    prefix_block_tokens: testbed tokens per simulated prefix block (SGLang's radix cache on
        the testbed matches per token).
    relay_shares_prefill: the router's ``--relay-shares-prefill``, which the testbed's
        topology leaves off with emulated chips (P and RLD list chips of their own).
    """

    emulation: ChipEmulation
    wan_mbps: float
    wan_delay_ms: float
    chunked_prefill_size: int = 512
    ttft_slo_s: float | None = None
    handoff_mode: str = "one-shot"
    prefix_block_tokens: int = 1
    relay_shares_prefill: bool = False

    @classmethod
    def from_args(cls, args: Mapping, wan_mbps: float | None = None) -> EmulatedScenario:
        """The scenario of ``benchmark/testbed.py``'s flags (its JSON's ``args``, or
        ``vars()`` of its namespace); ValueError when the run emulated no chips."""
        emu = args.get("emulation")
        if not emu:
            raise ValueError("the testbed ran without emulated chips (--no-emulation)")
        if not isinstance(emu, ChipEmulation):
            emu = ChipEmulation(**emu)
        slo = args.get("ttft_slo_s")
        return cls(
            emulation=emu,
            wan_mbps=float(wan_mbps if wan_mbps is not None else args["wan_mbps"]),
            wan_delay_ms=float(args["wan_delay_ms"]),
            chunked_prefill_size=_cluster_default("chunked_prefill_size"),
            # The testbed stretches the router's objective by the time dilation.
            ttft_slo_s=None if slo is None else slo / emu.time_dilation,
            handoff_mode=args.get("handoff_mode") or "one-shot",
        )


def sim_config(scenario: EmulatedScenario) -> SimConfig:
    """The testbed's three contenders on its emulated chips, model, engine and links."""
    from sglang_pdd.emulation.config import resolve_chip, resolve_model
    from sglang_pdd.sim.calibrate import testbed_wan

    emu, k = scenario.emulation, scenario.emulation.token_scale
    model, engine = resolve_model(emu.model_file)
    # The servers chunk prefills by testbed tokens: that many times k model tokens a forward.
    # SGLang's PD sends each chunk's KV as its forward ends.
    engine = dataclasses.replace(
        engine, chunk_tokens=scenario.chunked_prefill_size * k, kv_per_chunk=True
    )
    chip_a, chip_b = resolve_chip(emu.chip_a), resolve_chip(emu.chip_b)
    chips = {"A": dataclasses.replace(chip_a, name="A"), "B": dataclasses.replace(chip_b, name="B")}
    # The testbed's emulated WAN carries writes one at a time, in order (its WanLink).
    wan = dataclasses.replace(testbed_wan(scenario.wan_mbps, scenario.wan_delay_ms), fifo=True)
    a, b = PoolSpec("A", 1, emu.chips), PoolSpec("B", 1, emu.chips)
    # The router measures prompts in testbed tokens: its anomaly filter's threshold is k times
    # as many model tokens.
    # Its backlog limit is read on the dilated clock: 1/dilation of it in chip time.
    default = PipelinePolicyConfig()
    pipeline = PipelinePolicyConfig(
        ttft_slo_s=scenario.ttft_slo_s,
        anomaly_min_input_tokens=default.anomaly_min_input_tokens * k,
        relay_shares_prefill=scenario.relay_shares_prefill,
        prefill_backlog_limit_s=default.prefill_backlog_limit_s / emu.time_dilation,
    )
    contenders = (
        ClusterSpec("same-dc", "same-dc", a, a),
        ClusterSpec("cross-dc", "cross-dc", a, b, wan=wan, pipeline=pipeline),
        ClusterSpec(
            "pdd",
            "pdd",
            a,
            b,
            relay=a,
            wan=wan,
            pipeline=pipeline,
            handoff=HandoffPolicyConfig(mode=scenario.handoff_mode),
            transfer_claims=True,
        ),
    )
    return SimConfig(
        chips=chips,
        contenders=contenders,
        model=model,
        engine=engine,
        block_tokens=scenario.prefix_block_tokens * k,
    )


def sim_requests(replayed: Sequence[Replayed], token_scale: int, block_tokens: int) -> list:
    """Simulator requests (in ``replayed``'s order, which must be by send time): prompts of
    ``token_scale`` model tokens per testbed token, hashed per ``block_tokens`` testbed
    tokens so that prefix sharing is the testbed's; outputs unscaled."""
    out = []
    for rid, r in enumerate(replayed):
        if not r.prompt_ids or r.output_tokens < 1:
            raise ValueError(f"request {rid}: needs a prompt and at least one output id")
        hashes = tuple(block_hashes(list(r.prompt_ids), block_tokens))
        out.append(Request(rid, r.sent_s, len(r.prompt_ids) * token_scale, r.output_tokens, hashes))
    return out


def request_gaps(rec: RequestRecord) -> list[float]:
    """One simulated request's inter-token gaps: a handed-off request's RLD ids at RLD's pace,
    its handoff gap once, then MD's ids at MD's pace; any other request's decode spread evenly
    over its gaps."""
    n = rec.output_tokens - 1
    if n < 1:
        return []
    handed = rec.handoff_gap_s > 0 and rec.main_first_s >= 0 and 0 < rec.relay_tokens <= n
    if not handed:
        return [(rec.done_s - rec.first_token_s) / n] * n
    stop = rec.main_first_s - rec.handoff_gap_s  # RLD's last id
    on_relay, on_main = rec.relay_tokens - 1, rec.output_tokens - rec.relay_tokens - 1
    gaps = [(stop - rec.first_token_s) / on_relay] * on_relay if on_relay else []
    gaps.append(rec.handoff_gap_s)
    if on_main:
        gaps += [(rec.done_s - rec.main_first_s) / on_main] * on_main
    return gaps


def figures(records: Sequence[RequestRecord]) -> dict[str, float | None]:
    """``{"ttft_p50": ..., "itl_p99": ...}`` of simulated records, as the testbed's summary
    defines them."""
    series = {
        "ttft": [r.first_token_s - r.arrival_s for r in records],
        "itl": [g for r in records for g in request_gaps(r)],
        "e2e": [r.done_s - r.arrival_s for r in records],
    }
    return {f"{m}_p{q}": pct(series[m], q) for m, q in FIGURES}


@dataclass
class Prediction:
    """One contender's simulated figures (seconds) and what its requests did."""

    name: str
    requests: int
    figures: dict[str, float | None]
    pipelines: dict[str, int]
    relay_share: float


def predict(
    scenario: EmulatedScenario, requests: Mapping[str, Sequence[Replayed]]
) -> dict[str, Prediction]:
    """Simulate each contender of ``SIMULATED`` found in ``requests`` on its own requests
    (each contender ran the same sessions, but a session's later turns were sent when its
    earlier ones ended there); returns a prediction per contender."""
    config = sim_config(scenario)
    k = scenario.emulation.token_scale
    out = {}
    for spec in config.contenders:
        rows = sorted(requests.get(spec.name) or (), key=lambda r: r.sent_s)
        if not rows:
            continue
        reqs = sim_requests(rows, k, scenario.prefix_block_tokens)
        _, records = run_contender(spec, config, reqs)
        pipelines: dict[str, int] = {}
        for r in records:
            pipelines[r.pipeline] = pipelines.get(r.pipeline, 0) + 1
        tokens = sum(r.output_tokens for r in records)
        out[spec.name] = Prediction(
            spec.name,
            len(records),
            figures(records),
            pipelines,
            sum(r.relay_tokens for r in records) / tokens if tokens else 0.0,
        )
    return out


def replayed_from_results(results) -> list[Replayed]:
    """The successful requests of a contender's ``RequestResult``s (times in chip time, as
    ``run_point`` returns them)."""
    return [
        Replayed(r.at_s + r.late_s, tuple(r.prompt_ids), len(r.output_ids))
        for r in results
        if r.status == 200 and r.ttft_s is not None and r.output_ids
    ]


def replayed_from_rows(rows: Sequence[Mapping], sessions) -> list[Replayed]:
    """The successful requests of a contender's rows in the testbed's JSON, their prompts
    rebuilt from the sessions its flags generate plus the recorded outputs; ValueError when a
    rebuilt prompt's length is not the recorded one (another workload)."""
    from sglang_pdd.sim.calibrate import testbed_prompts

    keys = {(r["sid"], r["turn"]) for r in rows}
    known = {(s.sid, k) for s in sessions for k in range(len(s.turns))}
    if missing := sorted(keys - known):
        raise ValueError(f"(session, turn) {missing[:3]} not in the workload the flags generate")
    sessions = [
        dataclasses.replace(s, turns=s.turns[: 1 + max(k for sid, k in keys if sid == s.sid)])
        for s in sessions
        if any(sid == s.sid for sid, _ in keys)
    ]
    prompts = testbed_prompts(sessions, {(r["sid"], r["turn"]): r["output_ids"] for r in rows})
    out = []
    for r in rows:
        prompt = prompts[(r["sid"], r["turn"])]
        if len(prompt) != r["prompt_tokens"]:
            raise ValueError(
                f"session {r['sid']} turn {r['turn']}: the rebuilt prompt has {len(prompt)} "
                f"tokens, the JSON {r['prompt_tokens']}: not the workload the flags generate"
            )
        if r["status"] == 200 and r["ttft_s"] is not None and r["output_ids"]:
            out.append(Replayed(r["at_s"] + r["late_s"], tuple(prompt), len(r["output_ids"])))
    return out


def relative_error(measured: float | None, predicted: float | None) -> float | None:
    """(predicted - measured) / measured; None when either is missing or measured is 0."""
    if measured is None or predicted is None or measured == 0:
        return None
    return (predicted - measured) / measured


def comparison(measured: Mapping[str, object], predicted: Mapping[str, Prediction]) -> list:
    """Rows (contender, figure, measured, predicted, relative error, within the goal or None
    for a figure outside it) for every contender both sides have. ``measured`` maps a name to a
    ``ContenderSummary`` or its dict."""
    rows = []
    for name, pred in predicted.items():
        summary = measured.get(name)
        if summary is None:
            continue
        for m, q in FIGURES:
            key = f"{m}_p{q}"
            got = summary[key] if isinstance(summary, Mapping) else getattr(summary, key)
            err = relative_error(got, pred.figures[key])
            within = None
            if (m, q) in GOAL_FIGURES and err is not None:
                within = abs(err) <= FIDELITY_GOAL
            rows.append((name, key, got, pred.figures[key], err, within))
    return rows


def format_comparison(rows: list, predicted: Mapping[str, Prediction] | None = None) -> str:
    """A table of ``comparison``'s rows, ms for ITL and s otherwise, and the goal's verdict."""

    def cell(key: str, v: float | None) -> str:
        if v is None:
            return "-"
        return f"{1000 * v:.1f}ms" if key.startswith("itl") else f"{v:.3f}s"

    head = f"{'contender':<10} {'figure':<9} {'measured':>9} {'simulated':>9} {'error':>7}  goal"
    lines = [head, "-" * len(head)]
    for name, key, got, pred, err, within in rows:
        verdict = "" if within is None else ("within 10%" if within else "OVER 10%")
        error = "-" if err is None else f"{100 * err:+.1f}%"
        lines.append(
            f"{name:<10} {key:<9} {cell(key, got):>9} {cell(key, pred):>9} {error:>7}  {verdict}"
        )
    judged = [r for r in rows if r[5] is not None]
    met = sum(r[5] for r in judged)
    lines.append(
        f"fidelity: {met}/{len(judged)} figures (TTFT P50/P90, ITL P50, E2E P50/P90) within "
        f"{100 * FIDELITY_GOAL:.0f}%"
    )
    for name, pred in (predicted or {}).items():
        if pred.pipelines.keys() - {"PD"}:
            lines.append(
                f"{name} simulated: pipelines {pred.pipelines}, RLD share "
                f"{100 * pred.relay_share:.1f}%"
            )
    return "\n".join(lines)


def print_prediction(point: dict, args, out=print) -> dict[str, Prediction]:
    """Print the simulator's prediction beside one testbed point's measured figures.

    point: ``run_point``'s result (its ``runs`` and ``summaries``); args: the testbed's
    namespace (or its JSON ``args``). Prints nothing for a run without emulated chips."""
    flags = args if isinstance(args, Mapping) else vars(args)
    if not flags.get("emulation"):
        return {}
    try:
        scenario = EmulatedScenario.from_args(flags, point.get("wan_mbps"))
        runs = {n: replayed_from_results(rs) for n, rs in point["runs"].items() if n in SIMULATED}
        predicted = predict(scenario, runs)
    except ValueError as exc:  # the measured run stays reported whatever the simulator says
        out(f"simulator: no prediction ({exc})")
        return {}
    measured = {s.name: s for s in point["summaries"]}
    out("simulator (same chips, model, links and requests), measured vs simulated:")
    out(format_comparison(comparison(measured, predicted), predicted))
    return predicted
