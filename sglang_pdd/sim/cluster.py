"""One cluster configuration (same-DC PD, cross-DC PD or PDD) replaying a workload.

Request life:
  arrival -> P-side prefix cache match -> least-loaded P instance (chunked prefill)
  same-DC PD: full KV over the intra-DC path -> decoder
  cross-DC PD: decode-side cache (DRC) match -> missing KV over the WAN -> MD
  PDD: at arrival the router's own placement (policy.placement.place, with the shared
       PipelinePolicy and the router's moving averages of prefill time and handoff gap) picks
       P-MD, P-RLD-MD or (anomalous) P-RLD and the P, RLD and MD; in P-RLD-MD the
       full KV goes to RLD over RDMA while the missing KV crosses the WAN; when it lands the
       router's own RelayedHandoff (with the shared HandoffPolicy) hands RLD's tokens to MD
       as IDs, and MD rebuilds their KV with an extend pass (one-shot or catch-up chunks).
Every transfer to MD, from either pipeline, feeds the DRC.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import simpy

from sglang_pdd.cache import BlockPrefixCache
from sglang_pdd.handoff.steps import CHUNK, RelayedHandoff
from sglang_pdd.policy import (
    HANDOFF_RETRY_S,
    PIPELINE_P_MD,
    PIPELINE_P_RLD,
    PIPELINE_P_RLD_MD,
    HandoffPolicy,
    PipelinePolicy,
    RequestFacts,
    placement,
)
from sglang_pdd.policy.placement import (
    PACE_MIN_GAPS,
    PREFILL_PRIOR_S,
    ClusterSnapshot,
    MainCandidate,
    MovingAverage,
    Placement,
    PrefillCandidate,
    RelayCandidate,
    pace_ratio,
)
from sglang_pdd.sim.chips import InstancePerf
from sglang_pdd.sim.config import ClusterSpec, SimConfig
from sglang_pdd.sim.instances import DecodeInstance, PrefillInstance
from sglang_pdd.sim.link import FairShareLink, FifoLink, make_link
from sglang_pdd.sim.workload import Request
from sglang_pdd.transfer.link_model import LinkModelConfig, LiveLinkModel


@dataclass
class RequestRecord:
    """What happened to one request (times in seconds from the start of the trace)."""

    rid: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    pipeline: str = ""
    prefill_hit_tokens: int = 0
    decode_hit_tokens: int = 0
    wan_bytes: int = 0
    prefill_done_s: float = -1.0
    main_kv_s: float = -1.0
    first_token_s: float = -1.0
    done_s: float = -1.0
    relay_tokens: int = 0
    main_tokens: int = 0
    handoff_gap_s: float = 0.0
    completions: int = 0
    # Simulation-internal state, not reported.
    main_first_s: float = -1.0  # MD's first id after a handoff
    handed: int = 0
    placement: Placement | None = None  # PDD: placement's choice at arrival
    prefill_idx: int = -1
    relay_idx: int = -1
    on_relay: bool = False  # RLD holds the request (its KV arrived over the intra-DC path)
    main_idx: int = -1
    main_ready: bool = False
    handoff: RelayedHandoff | None = None
    pins: list = field(default_factory=list)
    streams: dict = field(default_factory=dict)  # "intra" / "wan" -> _KvStream (kv_per_chunk)
    claimed: bool = False  # transfer_claims: its transfer to MD is registered on the link
    send_on_claim: bool = False  # ... and goes when the claim is granted (the prefill is done)


class _KvStream:
    """The KV bound for one destination leaving P chunk by chunk (``EngineProfile.kv_per_chunk``):
    each prefill forward's KV past ``start_tokens`` (what the destination caches already)
    crosses ``link`` as the forward ends; ``close`` calls back once the prefill is done and
    every piece has landed."""

    def __init__(
        self, link: FairShareLink | FifoLink, kv_bytes_per_token: int, start_tokens: int
    ) -> None:
        self.link, self.kv = link, kv_bytes_per_token
        self.start = self.sent = start_tokens
        self.in_flight = 0
        self.then = None

    @property
    def nbytes(self) -> int:
        """Bytes sent so far."""
        return (self.sent - self.start) * self.kv

    def produced(self, tokens: int) -> None:
        """P's forward ended with the prompt's first ``tokens`` tokens of KV in place."""
        if tokens > self.sent:
            self.in_flight += 1
            self.link.send((tokens - self.sent) * self.kv, self._landed)
            self.sent = tokens

    def _landed(self, now: float) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self.then is not None:
            then, self.then = self.then, None
            then(now)

    def close(self, then) -> None:
        """The prefill is done: ``then(now)`` once its last piece lands (with nothing to send,
        after the message announcing so crossed)."""
        if self.sent == self.start:
            self.link.send(0, then)
        elif self.in_flight == 0:
            then(self.link.env.now)
        else:
            self.then = then


def _pick(pool: list, key) -> int:
    best, best_i = None, 0
    for i, inst in enumerate(pool):
        k = key(inst)
        if best is None or k < best:
            best, best_i = k, i
    return best_i


class ClusterSim:
    """Replays requests through one ClusterSpec; the policies are passed in, not built here.

    pipeline_policy and handoff_policy are the very objects a router would use; by default they
    are built from the spec's configs.
    """

    def __init__(
        self,
        spec: ClusterSpec,
        config: SimConfig,
        pipeline_policy: PipelinePolicy | None = None,
        handoff_policy: HandoffPolicy | None = None,
    ) -> None:
        self.spec, self.config = spec, config
        self.env = simpy.Environment()
        rng = random.Random(config.seed)
        self.pipeline_policy = pipeline_policy or PipelinePolicy(spec.pipeline)
        self.handoff_policy = handoff_policy or HandoffPolicy(spec.handoff)
        self.model = config.model
        self.kv = config.model.kv_bytes_per_token
        self.block_tokens = config.block_tokens
        self.kv_per_chunk = config.engine.kv_per_chunk
        # PDD's transfer claims: rid -> the prompt blocks its transfer to MD carries, from its
        # registration until it lands; and who waits for each to land.
        self.claims = spec.kind == "pdd" and spec.transfer_claims
        self.on_link: dict[int, frozenset] = {}
        self.link_waiters: dict[int, list] = {}

        def perf(pool):
            return InstancePerf(config.chip(pool.chip), config.model, config.engine, pool.chips)

        p_perf = perf(spec.prefill)
        self.prefill = [
            PrefillInstance(self.env, p_perf, f"P{i}") for i in range(spec.prefill.count)
        ]
        d_perf = perf(spec.decode)
        self.decode = [DecodeInstance(self.env, d_perf, f"D{i}") for i in range(spec.decode.count)]
        self.relay: list[DecodeInstance] = []
        if spec.relay is not None and spec.relay.count > 0:
            r_perf = perf(spec.relay)
            self.relay = [
                DecodeInstance(self.env, r_perf, f"R{i}") for i in range(spec.relay.count)
            ]
        # P-side prefix cache, pooled over P instances (HBM pool plus any host-memory tier).
        self.p_cache = self._pooled_cache(spec.prefill, p_perf)
        self.drc: BlockPrefixCache | None = None
        if spec.cross_dc and spec.decode_cache:
            self.drc = self._pooled_cache(spec.decode, d_perf)
        self.wan = make_link(self.env, spec.wan, rng) if spec.cross_dc else None
        # The policy sees the link as the router does: a LiveLinkModel fed with the transfers
        # started and landed, seeded with the link's nominal rate and RTT.
        self.link_model = LiveLinkModel(LinkModelConfig(spec.wan.bytes_per_s, spec.wan.rtt_s))
        # The intra-DC fabric: every P instance's NICs together, one instance's NICs per flow.
        intra = spec.intra_link(p_perf.rdma_bytes_per_s, spec.prefill.count)
        self.intra = make_link(self.env, intra, rng)
        self.records: dict[int, RequestRecord] = {}
        self.requests: dict[int, Request] = {}
        # PDD plans as the router does: at arrival, from its moving averages and from the
        # requests each P and MD was given and has not finished (the router's counts).
        self.planned = bool(self.relay) and spec.cross_dc
        self.prefill_estimate = MovingAverage(PREFILL_PRIOR_S)
        self.handoff_gap_estimate = MovingAverage(spec.wan.rtt_s)
        # Seconds per id of RLD and of MD, learned from finished requests as the router learns
        # them: placement values RLD's head start in MD's time (``placement.pace_ratio``).
        self.relay_itl_estimate = MovingAverage()
        self.main_itl_estimate = MovingAverage()
        self.prefill_active = [0] * len(self.prefill)
        self.main_active = [0] * len(self.decode)
        self._turns = itertools.count()

    def _pooled_cache(self, pool, perf: InstancePerf) -> BlockPrefixCache:
        """A prefix cache over every instance of ``pool``: HBM pool plus host-memory tier."""
        tokens = pool.count * (
            perf.kv_capacity_tokens + int(pool.host_cache_gb * 1e9 * pool.chips / self.kv)
        )
        return BlockPrefixCache(tokens // self.block_tokens)

    # --- arrivals and prefill -----------------------------------------------------------
    def run(self, requests: list[Request]) -> list[RequestRecord]:
        """Simulate until every request has finished; returns records in arrival order."""
        for req in requests:
            self.requests[req.rid] = req
            self.records[req.rid] = RequestRecord(
                req.rid, req.arrival_s, req.input_tokens, req.output_tokens
            )
            self.env.timeout(req.arrival_s).callbacks.append(lambda _e, r=req: self._arrive(r))
        self.env.run()
        return [self.records[r.rid] for r in requests]

    def _hit_tokens(self, blocks: int, req: Request) -> int:
        return min(req.input_tokens, blocks * self.block_tokens)

    def _arrive(self, req: Request) -> None:
        rec = self.records[req.rid]
        rec.prefill_hit_tokens = self._prefill_hit(req)
        if self.planned:
            i = self._place(req, rec)
            pipeline = rec.placement.decision.pipeline
            if self.claims and pipeline == PIPELINE_P_MD:
                # The router registers MD's transfer before it asks P for anything.
                self._claim(req, lambda: self._submit(req, rec, i))
                return
            if self.claims and pipeline == PIPELINE_P_RLD_MD:
                self._claim(req, lambda: None)  # RLD's side goes at once
        else:
            i = _pick(self.prefill, lambda p: p.queued_tokens)
        self._submit(req, rec, i)

    def _prefill_hit(self, req: Request) -> int:
        hit = self._hit_tokens(self.p_cache.match(req.hash_ids), req)
        # A fully cached prompt still computes its last token (to produce logits).
        return min(hit, req.input_tokens - 1)

    def _submit(self, req: Request, rec: RequestRecord, i: int) -> None:
        """Queue the request's prefill on P ``i`` (and its KV's streams, with kv_per_chunk)."""
        if rec.claimed:  # it waited for a claim: P's cache may hold more of it by now
            rec.prefill_hit_tokens = self._prefill_hit(req)
        hit = rec.prefill_hit_tokens
        on_chunk = None
        if self.kv_per_chunk:
            rec.streams = self._open_streams(req, rec)
            on_chunk = self._chunk_done
        self.prefill[i].submit(req.rid, req.input_tokens - hit, hit, self._prefill_done, on_chunk)

    def _dependency(self, req: Request) -> int | None:
        """A transfer on MD's link carrying the first block of this prompt MD's cache lacks."""
        held = self.drc.match(req.hash_ids) if self.drc is not None else 0
        if held >= len(req.hash_ids):
            return None
        first = req.hash_ids[held]
        return next((rid for rid, blocks in self.on_link.items() if first in blocks), None)

    def _claim(self, req: Request, then) -> None:
        """The router's claim: once no transfer on MD's link carries this prompt's next missing
        block (waiting for each that does to land), register this request's own, then
        ``then()``; MD's cache then lacks only what this transfer sends."""
        dep = self._dependency(req)
        if dep is not None:
            self.link_waiters.setdefault(dep, []).append(lambda: self._claim(req, then))
            return
        rec = self.records[req.rid]
        if rec.completions:  # RLD finished it meanwhile: nothing left to hold in MD's cache
            cached = self._hit_tokens(self.drc.match(req.hash_ids), req) if self.drc else 0
        else:
            cached = self._pin_decode_cache(req, rec)
        self.on_link[req.rid] = frozenset(req.hash_ids[cached // self.block_tokens :])
        rec.claimed = True
        if rec.send_on_claim:
            self._send_main(req, (req.input_tokens - cached) * self.kv)
        then()

    def _open_streams(self, req: Request, rec: RequestRecord) -> dict:
        """Where the request's KV goes as P makes it: the whole prompt to a decoder of this
        datacenter (same-DC PD's, or RLD), what MD's cache lacks across the WAN."""
        if not self.spec.cross_dc:
            return {"intra": _KvStream(self.intra, self.kv, 0)}
        if rec.placement is None:  # cross-DC PD: every request to MD
            start = self._pin_decode_cache(req, rec)
            relayed = False
        else:
            # PDD: P-MD's KV streams to MD as SGLang's PD does; P-RLD-MD's leaves for MD once
            # the prefill is done (P holds MD's twin request until then).
            d = rec.placement.decision
            relayed = d.pipeline in (PIPELINE_P_RLD, PIPELINE_P_RLD_MD)
            start = rec.decode_hit_tokens if d.pipeline == PIPELINE_P_MD else -1
        streams = {"intra": _KvStream(self.intra, self.kv, 0)} if relayed else {}
        if start >= 0:
            streams["wan"] = _KvStream(self.wan, self.kv, min(start, req.input_tokens))
            # The router's clock for the transfer starts at dispatch; its duration then holds
            # the prefill too, so it teaches the link's fit nothing (``learn=False`` on finish).
            nbytes = (req.input_tokens - streams["wan"].start) * self.kv
            self.link_model.start(req.rid, nbytes, self.env.now)
        return streams

    def _chunk_done(self, rid: int, tokens: int, now: float) -> None:
        for stream in self.records[rid].streams.values():
            stream.produced(tokens)

    def _place(self, req: Request, rec: RequestRecord) -> int:
        """The router's placement on this moment's snapshot; returns the chosen P's index."""
        cached = self._pin_decode_cache(req, rec)
        link = self.link_model.estimate()
        snapshot = ClusterSnapshot(
            prefills=tuple(
                PrefillCandidate(
                    str(i), rec.prefill_hit_tokens, self.prefill_active[i], p.backlog_s()
                )
                for i, p in enumerate(self.prefill)
            ),
            relays=tuple(RelayCandidate(str(i), r.load) for i, r in enumerate(self.relay)),
            mains=tuple(
                MainCandidate(str(i), cached, link, self.main_active[i])
                for i in range(len(self.decode))
            ),
            prefill_s=self.prefill_estimate.value,
            handoff_gap_s=self.handoff_gap_estimate.value,
            kv_bytes_per_token=self.kv,
            turn=next(self._turns),
            pace_ratio=pace_ratio(self.main_itl_estimate.value, self.relay_itl_estimate.value),
        )
        chosen = placement.place(
            snapshot, req.input_tokens, req.output_tokens, self.pipeline_policy
        )
        rec.placement, rec.pipeline = chosen, chosen.decision.pipeline
        rec.prefill_idx, rec.relay_idx = int(chosen.prefill), int(chosen.relay)
        self.prefill_active[rec.prefill_idx] += 1
        if chosen.decision.pipeline != PIPELINE_P_RLD:
            rec.main_idx = int(chosen.main)
            self.main_active[rec.main_idx] += 1
        return rec.prefill_idx

    def _pin_decode_cache(self, req: Request, rec: RequestRecord) -> int:
        """Hold the prompt's blocks in the decode-side cache; returns the tokens it holds."""
        cached = 0
        if self.drc is not None:
            pin = self.drc.acquire(req.hash_ids)
            rec.pins.append(pin)
            cached = self._hit_tokens(pin.blocks, req)
        rec.decode_hit_tokens = cached
        return cached

    def _prefill_done(self, rid: int, now: float) -> None:
        req, rec = self.requests[rid], self.records[rid]
        rec.prefill_done_s = now
        self.p_cache.insert(req.hash_ids)
        if not self.spec.cross_dc:
            rec.pipeline = "PD"
            self._send_local(req, self._to_main_direct)
            return
        if rec.placement is not None:
            self.prefill_active[rec.prefill_idx] -= 1
            decision = rec.placement.decision
        else:  # cross-DC PD: every request goes to MD, the missing KV over the WAN
            cached = rec.decode_hit_tokens if rec.streams else self._pin_decode_cache(req, rec)
            facts = RequestFacts(req.input_tokens, cached, req.output_tokens, self.kv)
            decision = self.pipeline_policy.decide(
                facts, self.link_model.estimate(), prefill_s=max(now - req.arrival_s, 0.0)
            )
        rec.pipeline = decision.pipeline
        if decision.pipeline == PIPELINE_P_RLD and self.relay:
            self._send_local(req, self._to_relay)
            return
        if "wan" in rec.streams:
            rec.wan_bytes = rec.streams["wan"].nbytes
            rec.streams["wan"].close(lambda t, r=req: self._main_kv_ready(r))
        elif self.claims and not rec.claimed:
            rec.send_on_claim = True  # waiting for a transfer carrying its prefix to land
        elif self.claims:
            self._send_main(req, (req.input_tokens - rec.decode_hit_tokens) * self.kv)
        else:
            self._send_main(req, decision.wan_bytes)
        if decision.pipeline == PIPELINE_P_RLD_MD and self.relay:
            self._send_local(req, self._to_relay)
        else:
            rec.pipeline = PIPELINE_P_MD

    def _send_main(self, req: Request, nbytes: int) -> None:
        """MD's KV leaves P, all at once, across the WAN."""
        self.records[req.rid].wan_bytes = nbytes
        self.link_model.start(req.rid, nbytes, self.env.now)
        self.wan.send(nbytes, lambda t, r=req: self._main_kv_ready(r))

    def _send_local(self, req: Request, then) -> None:
        stream = self.records[req.rid].streams.get("intra")
        if stream is not None:
            stream.close(lambda t, r=req: then(r))
        else:
            self.intra.send(req.input_tokens * self.kv, lambda t, r=req: then(r))

    # --- decode -------------------------------------------------------------------------
    def _first_token(self, rid: int, when: float) -> None:
        rec = self.records[rid]
        if rec.first_token_s < 0:
            rec.first_token_s = when

    def _to_main_direct(self, req: Request) -> None:
        rec = self.records[req.rid]
        if rec.main_idx < 0:
            rec.main_idx = _pick(self.decode, lambda d: d.load)
        self.decode[rec.main_idx].add(
            req.rid, req.output_tokens, req.input_tokens, self._first_token, self._main_done
        )

    def _to_relay(self, req: Request) -> None:
        rec = self.records[req.rid]
        if rec.main_ready and rec.pipeline == PIPELINE_P_RLD_MD:
            # The WAN copy won the race: MD takes the whole request.
            self._to_main_direct(req)
            return
        if rec.relay_idx < 0:
            rec.relay_idx = _pick(self.relay, lambda d: d.load)
        rec.on_relay = True
        self.relay[rec.relay_idx].add(
            req.rid, req.output_tokens, req.input_tokens, self._relay_first_token, self._relay_done
        )

    def _relay_first_token(self, rid: int, when: float) -> None:
        # The router learns P's queue and prefill time from relayed requests' first tokens.
        self.prefill_estimate.note(when - self.records[rid].arrival_s)
        self._first_token(rid, when)

    def _main_kv_ready(self, req: Request) -> None:
        rec = self.records[req.rid]
        rec.main_kv_s = self.env.now
        self.link_model.finish(req.rid, self.env.now, learn="wan" not in rec.streams)
        if self.drc is not None:
            self.drc.insert(req.hash_ids)
            if not rec.completions:
                rec.pins.append(self.drc.acquire(req.hash_ids))
        self.on_link.pop(req.rid, None)
        for waiter in self.link_waiters.pop(req.rid, ()):
            waiter()
        if rec.completions:
            return  # RLD already finished it; the transfer only warmed MD's cache
        rec.main_ready = True
        if rec.pipeline == PIPELINE_P_MD:
            self._to_main_direct(req)
        elif rec.on_relay:
            self._handoff(req.rid)
        # else: RLD's copy is still on the intra-DC path; _to_relay hands off on arrival.

    def _handoff(self, rid: int) -> None:
        """Drive the request's RelayedHandoff (the router's own state machine) one step."""
        rec, req = self.records[rid], self.requests[rid]
        relay = self.relay[rec.relay_idx]
        if rec.completions:
            return  # RLD finished it already
        if not relay.has(rid):
            # Still queued for an RLD slot: MD has the KV now, so it takes the whole request.
            if relay.cancel_waiting(rid):
                self._to_main_direct(req)
            return
        if rec.handoff is None:
            rec.handoff = RelayedHandoff(self.handoff_policy, HANDOFF_RETRY_S)
        state = rec.handoff
        state.main_ready()
        state.relay_progress(relay.tokens_so_far(rid))
        main = self.decode[rec.main_idx]
        one_way = self.spec.wan.rtt_s / 2
        handed_before = state.handed
        step = state.next_step(relay.load, self.env.now)
        if step is None:
            if not state.chunk_in_flight:
                # RLD's first id is still to come (the router acts on RLD's next chunk): look
                # again after one RLD step.
                wait = relay.step_s if relay.step_s > 0 else HANDOFF_RETRY_S
                self.env.timeout(wait).callbacks.append(lambda _e: self._handoff(rid))
            return
        if step.kind == CHUNK:
            self._send_chunk(rid, step.upto - handed_before, step.upto)
            return
        # The final handoff. MD's answer is taken at once (the simulation knows MD's room):
        # with no room MD defers it and RLD keeps streaming until the retry.
        made = step.upto
        if not main.can_admit(req.output_tokens - made, req.input_tokens + made):
            state.final_deferred(self.env.now)
            self.env.timeout(HANDOFF_RETRY_S).callbacks.append(lambda _e: self._handoff(rid))
            return
        state.final_taken()
        relay.stop(rid)
        rec.relay_tokens = made
        self._note_pace(self.relay_itl_estimate, rec.first_token_s, self.env.now, made)
        remaining = req.output_tokens - made
        stopped = self.env.now
        if remaining <= 0:
            self._finish(rid, stopped)
            return
        final_chunk = made - rec.handed
        rec.handed = made

        def ids_arrive():
            def started(r, when):
                rec.main_first_s = when
                rec.handoff_gap_s = max(rec.handoff_gap_s, when - stopped)
                self.handoff_gap_estimate.note(when - stopped)
                self._first_token(r, when)

            main.add(rid, remaining, req.input_tokens + made, started, self._main_done, final_chunk)

        self.env.timeout(one_way).callbacks.append(lambda _e: ids_arrive())

    def _send_chunk(self, rid: int, chunk: int, upto: int) -> None:
        """A Catch-Up chunk of ``chunk`` ids (RLD's first ``upto`` in all) crosses the WAN; MD
        extends over it, then the request's handoff takes its next step."""
        rec, req = self.records[rid], self.requests[rid]
        main = self.decode[rec.main_idx]
        rec.handed = upto
        ctx = req.input_tokens + upto

        def extended(_e) -> None:
            rec.handoff.chunk_extended()
            self._handoff(rid)

        def chunk_arrives() -> None:
            if not rec.completions:
                busy = main.add_extend_work(chunk, ctx)
                self.env.timeout(busy).callbacks.append(extended)

        self.env.timeout(self.spec.wan.rtt_s / 2).callbacks.append(lambda _e: chunk_arrives())

    def _relay_done(self, rid: int, now: float) -> None:
        rec = self.records[rid]
        rec.relay_tokens = rec.output_tokens
        self._note_pace(self.relay_itl_estimate, rec.first_token_s, now, rec.relay_tokens)
        self._finish(rid, now)

    def _main_done(self, rid: int, now: float) -> None:
        rec = self.records[rid]
        rec.main_tokens = rec.output_tokens - rec.relay_tokens
        first = rec.main_first_s if rec.relay_tokens else rec.first_token_s
        self._note_pace(self.main_itl_estimate, first, now, rec.main_tokens)
        self._finish(rid, now)

    @staticmethod
    def _note_pace(estimate: MovingAverage, first_s: float, last_s: float, ids: int) -> None:
        """Fold one request's seconds per id into ``estimate`` when it made enough ids to say
        (``PACE_MIN_GAPS`` gaps, as the router)."""
        if first_s >= 0 and ids > PACE_MIN_GAPS:
            estimate.note((last_s - first_s) / (ids - 1))

    def _finish(self, rid: int, now: float) -> None:
        rec = self.records[rid]
        rec.completions += 1
        rec.done_s = now
        if rec.placement is not None and rec.main_idx >= 0 and rec.completions == 1:
            self.main_active[rec.main_idx] -= 1
        for pin in rec.pins:
            self.drc.release(pin)
        rec.pins.clear()
