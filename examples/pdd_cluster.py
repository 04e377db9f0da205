"""The main job: a local PDD cluster on the CPU serving a multi-turn workload.

Brings up Prefill, Relay-Decode and Main-Decode (datacenter B behind an emulated WAN), the PDD
router, and, for comparison, SGLang's own cross-datacenter PD (a decode server behind the same
link, with its decode-side radix cache). Runs the same multi-turn conversations through both,
prints each request's PDD record and both TTFTs, then the medians and ratios, and tears
everything down.

    bash scripts/with-env.sh python examples/pdd_cluster.py
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

from sglang_pdd.testbed.client import generate, pd_generate, wait_router_settled
from sglang_pdd.testbed.cluster import (
    DATACENTER_B_HOST,
    PddClusterConfig,
    start_cluster,
    start_wan_proxy,
)
from sglang_pdd.testbed.launcher import ServerGroup, ServerSpec
from sglang_pdd.transfer.wan_link import WanLinkConfig

WORDS = (
    "cache prefill decode relay main token stream latency link datacenter radix extend "
    "handoff batch chunk server request model output input prefix"
).split()


def conversation_turns(rng: random.Random, context_words: int, turns: int) -> list[str]:
    """User messages: a long first message (shared context), then short follow-ups."""
    first = " ".join(rng.choice(WORDS) for _ in range(context_words))
    return [first] + [" ".join(rng.choice(WORDS) for _ in range(25)) for _ in range(turns - 1)]


def start_baseline(group: ServerGroup, cluster, model: str, cfg: PddClusterConfig) -> str:
    """SGLang's own cross-datacenter PD: a decode server in datacenter B behind the same link."""
    (decode,) = group.start(
        ServerSpec(
            "baseline-decode",
            model_path=model,
            role="decode",
            dtype=cfg.dtype,
            chunked_prefill_size=cfg.chunked_prefill_size,
            max_total_tokens=cfg.max_total_tokens,
            env=(("SGLANG_HOST_IP", DATACENTER_B_HOST),),
            extra_args=("--disaggregation-decode-enable-radix-cache",),
        )
    )
    return start_wan_proxy(group, "baseline-wan-http", decode.port, cfg.wan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model-path", default=None, help="model to serve (default: a generated 2-layer model)"
    )
    parser.add_argument("--conversations", type=int, default=3)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument(
        "--context-words", type=int, default=1200, help="words in each conversation's first message"
    )
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--wan-mbps", type=float, default=8.0)
    parser.add_argument("--wan-delay-ms", type=float, default=100.0)
    parser.add_argument("--handoff-mode", default="one-shot", choices=("one-shot", "catch-up"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="sglang-pdd-example-"))
    model = args.model_path
    if model is None:
        from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

        model = str(write_tiny_model(workdir / "tiny-model", TinyModelConfig(seed=args.seed)))
        print(f"generated model: {model}", flush=True)
    cfg = PddClusterConfig(
        model_path=model,
        handoff_mode=args.handoff_mode,
        wan=WanLinkConfig(args.wan_mbps, args.wan_delay_ms),
    )
    rng = random.Random(args.seed)
    rows = []
    with ServerGroup(log_dir=workdir / "logs") as group:
        print(
            f"starting P, RLD, MD, router and the baseline (logs: {group.log_dir}) ...", flush=True
        )
        cluster = start_cluster(group, cfg)
        baseline_decode = start_baseline(group, cluster, model, cfg)
        prefill = cluster.prefill
        header = (
            f"{'conv':>4} {'turn':>4} {'prompt':>6} | {'PDD ttft':>8} {'base ttft':>9} | "
            f"{'relay':>5} {'main':>4} {'ready_s':>7} {'handoff_s':>9} {'wan_KB':>7} same"
        )
        print(header)
        print("-" * len(header))
        for conv in range(args.conversations):
            history = ""
            for turn, message in enumerate(conversation_turns(rng, args.context_words, args.turns)):
                history += f" user: {message} assistant:"
                body = {
                    "text": history,
                    "sampling_params": {"temperature": 0.0, "max_new_tokens": args.max_new_tokens},
                }
                pdd = generate(cluster.router_url, body, stream=True)
                # A request finished on RLD still sends its KV to MD: let that end first, so the
                # baseline does not share the link with it.
                wait_router_settled(cluster.router_url)
                base = pd_generate(
                    prefill.url, prefill.bootstrap_port, baseline_decode, body, stream=True
                )
                if pdd.status != 200 or base.status != 200:
                    print(f"request failed: {pdd.body} {base.body}", file=sys.stderr)
                    return 1
                rec = pdd.body["meta_info"]["pdd"]
                same = pdd.body["output_ids"] == base.body["output_ids"]
                rows.append((pdd.ttft_s, base.ttft_s, rec, same))
                ready = rec["main_ready_s"]
                hand = rec["handoff_s"]
                print(
                    f"{conv:>4} {turn:>4} {pdd.body['meta_info']['prompt_tokens']:>6} | "
                    f"{pdd.ttft_s:>8.3f} {base.ttft_s:>9.3f} | {rec['relay_tokens']:>5} "
                    f"{rec['main_tokens']:>4} {ready if ready is None else round(ready, 3)!s:>7} "
                    f"{hand if hand is None else round(hand, 3)!s:>9} "
                    f"{rec['wan_bytes'] / 1024:>7.1f} {same}",
                    flush=True,
                )
                history += " " + pdd.body["text"]
    pdd_ttft = [r[0] for r in rows]
    base_ttft = [r[1] for r in rows]
    relay = sum(r[2]["relay_tokens"] for r in rows)
    total = relay + sum(r[2]["main_tokens"] for r in rows)
    print()
    print(
        f"requests: {len(rows)}; identical outputs PDD vs baseline: "
        f"{sum(r[3] for r in rows)}/{len(rows)}"
    )
    print(
        f"TTFT median: PDD {statistics.median(pdd_ttft):.3f}s, SGLang cross-DC PD "
        f"{statistics.median(base_ttft):.3f}s, ratio PDD/PD "
        f"{statistics.median(pdd_ttft) / statistics.median(base_ttft):.2f}"
    )
    print(f"TTFT max:    PDD {max(pdd_ttft):.3f}s, SGLang cross-DC PD {max(base_ttft):.3f}s")
    print(f"output tokens made by RLD: {relay}/{total} ({100 * relay / max(total, 1):.1f}%)")
    print(f"logs: {workdir / 'logs'}")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
