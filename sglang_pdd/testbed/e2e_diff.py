"""Where a PDD answer's time differs from the same turn's answer through cross-DC PD.

Both contenders get the same turns at the same arrival times (``benchmark/testbed.py``), so each
PDD request has a twin in the cross-DC run: same session, same turn, same output ids. For a
request Main-Decode finished after a handoff, the difference of the two E2Es splits exactly:

    PDD E2E - cross-DC E2E = start + slowdown - head_start

* ``start``: MD's first id to the client minus cross-DC's first token (when each decoder in
  datacenter B starts giving the client ids: MD after its KV, the handoff and the extend;
  cross-DC's decoder after its KV);
* ``head_start``: the ids RLD made before the handoff, valued at cross-DC's pace (the time
  cross-DC's decoder still spends on ids PDD no longer has to make in datacenter B);
* ``slowdown``: MD's remaining ids times (MD's pace - cross-DC's pace).

So a handoff finishes earlier exactly when RLD's head start outweighs MD's later start and
slower pace. For other requests the difference is split into TTFT and the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sglang_pdd.testbed.report import pct


@dataclass(frozen=True)
class TurnDifference:
    """One PDD request beside its cross-DC twin (seconds; pace = seconds per id)."""

    sid: int
    turn: int
    pipeline: str
    finished_on: str
    ids: int
    e2e_diff_s: float
    ttft_diff_s: float
    # Handed-off requests finished on MD only (else None):
    start_s: float | None = None
    head_start_s: float | None = None
    slowdown_s: float | None = None
    relay_ids: int = 0
    main_pace_s: float | None = None
    cross_pace_s: float | None = None


def _pace(e2e_s: float, ttft_s: float, ids: int) -> float | None:
    return (e2e_s - ttft_s) / (ids - 1) if ids > 1 else None


def pair_turns(pdd: list[dict], cross: list[dict]) -> list[TurnDifference]:
    """Every PDD request (a ``benchmark/testbed.py`` JSON row) with a successful cross-DC twin
    of the same output; rows without one are left out."""
    twins = {(r["sid"], r["turn"]): r for r in cross if r["status"] == 200}
    out = []
    for p in pdd:
        c = twins.get((p["sid"], p["turn"]))
        if p["status"] != 200 or c is None or c["output_ids"] != p["output_ids"]:
            continue
        if p["ttft_s"] is None or c["ttft_s"] is None:
            continue
        ids, record = len(p["output_ids"]), p["record"] or {}
        diff = TurnDifference(
            p["sid"],
            p["turn"],
            record.get("pipeline", "?"),
            record.get("finished_on", "?"),
            ids,
            p["e2e_s"] - c["e2e_s"],
            p["ttft_s"] - c["ttft_s"],
        )
        cross_pace = _pace(c["e2e_s"], c["ttft_s"], ids)
        relay_ids, main_ids = record.get("relay_tokens", 0), record.get("main_tokens", 0)
        main_first = record.get("main_first_s")
        handed_off = relay_ids > 0 and main_ids > 0 and main_first is not None
        if handed_off and cross_pace is not None and record.get("e2e_s") is not None:
            # Router-side times, shifted onto the client's clock by the request's end.
            offset = p["e2e_s"] - record["e2e_s"]
            main_pace = _pace(record["e2e_s"], main_first, main_ids)
            start = main_first + offset - c["ttft_s"]
            head_start = relay_ids * cross_pace
            # What is left of the difference once start and head start are counted: MD's
            # remaining ids at its pace against cross-DC's (exact by construction).
            slowdown = diff.e2e_diff_s - start + head_start
            diff = replace(
                diff,
                start_s=start,
                head_start_s=head_start,
                slowdown_s=slowdown,
                relay_ids=relay_ids,
                main_pace_s=main_pace,
                cross_pace_s=cross_pace,
            )
        out.append(diff)
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summary_lines(diffs: list[TurnDifference]) -> list[str]:
    """Per pipeline: how many PDD requests finished earlier than their cross-DC twin, the mean
    E2E and TTFT differences, and for handoffs the mean start, head start and slowdown."""
    lines = []
    groups: dict[str, list[TurnDifference]] = {}
    for d in diffs:
        handed = d.start_s is not None
        groups.setdefault(f"{d.pipeline}{' handed off' if handed else ''}", []).append(d)
    for name, group in sorted(groups.items()):
        earlier = sum(d.e2e_diff_s < 0 for d in group)
        line = (
            f"{name:<22} n={len(group):<3} earlier than cross-DC: {earlier:<3} "
            f"E2E diff mean {_mean([d.e2e_diff_s for d in group]):+.2f}s "
            f"(TTFT {_mean([d.ttft_diff_s for d in group]):+.2f}s)"
        )
        lines.append(line)
        handed = [d for d in group if d.start_s is not None]
        if handed:
            main_pace = _mean([d.main_pace_s for d in handed if d.main_pace_s is not None])
            lines.append(
                f"{'':<22} = start {_mean([d.start_s for d in handed]):+.2f}s"
                f" - head start {_mean([d.head_start_s for d in handed]):.2f}s"
                f" ({_mean([d.relay_ids for d in handed]):.0f} RLD ids)"
                f" + slowdown {_mean([d.slowdown_s for d in handed]):+.2f}s"
                f" (MD {1000 * main_pace:.1f} ms/id vs cross-DC"
                f" {1000 * _mean([d.cross_pace_s for d in handed]):.1f} ms/id)"
            )
    return lines


def ttft_goal_lines(pdd: list[dict], cross: list[dict], goal: float) -> list[str]:
    """What stands between PDD's P90 TTFT and ``goal`` x cross-DC PD's P90 TTFT (``benchmark/
    testbed.py`` JSON rows): the requests whose first token came later than that target (the
    goal allows a tenth of them at most), grouped by pipeline and the policy's rule, with their
    mean TTFT, the time until P answered (``prefill_s``: P's queue and prefill, and for P-MD the
    KV sent to MD) and their cross-DC twins' mean TTFT. Empty without answered requests."""
    done = [r for r in pdd if r["status"] == 200 and r["ttft_s"] is not None]
    cross_ttft = {
        (r["sid"], r["turn"]): r["ttft_s"]
        for r in cross
        if r["status"] == 200 and r["ttft_s"] is not None
    }
    if not done or not cross_ttft:
        return []
    target = goal * pct(list(cross_ttft.values()), 90)
    late = [r for r in done if r["ttft_s"] > target]
    lines = [
        f"TTFT target {target:.2f}s ({goal}x cross-DC's P90): {len(late)} of {len(done)} PDD "
        f"requests later ({100 * len(late) / len(done):.0f}%; the goal allows 10%)"
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in late:
        record = r["record"] or {}
        groups.setdefault((record.get("pipeline", "?"), record.get("rule") or "?"), []).append(r)
    for (pipeline, rule), rows in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        prefill = [r["record"]["prefill_s"] for r in rows if (r["record"] or {}).get("prefill_s")]
        twins = [cross_ttft[k] for r in rows if (k := (r["sid"], r["turn"])) in cross_ttft]
        lines.append(
            f"  {pipeline:<9} {rule:<13} n={len(rows):<3} TTFT mean "
            f"{_mean([r['ttft_s'] for r in rows]):.2f}s, P answered {_mean(prefill):.2f}s, "
            f"cross-DC twin {_mean(twins):.2f}s"
        )
    return lines
