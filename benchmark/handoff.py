"""The handoff's cost, measured: the stall a client sees and the bytes it moves.

On a local P/RLD/MD cluster (CPU, generated model, emulated WAN) each case hands a request to MD
after exactly ``N`` ids of RLD (a gate holds RLD's stream at ``N``; MD's control link is stalled
until then, ``sglang_pdd/testbed/held_links.py``). For each handed-off length and context
length, One-Shot and Catch-Up, with MD idle and with MD decoding a batch of other requests, it
prints the stall (the final handoff sent to MD's first token, at the router: mean, P99,
max/mean) beside
what the alternative would cost: sending those ids' KV over the same emulated link (measured:
the bytes really go through a ``wan-link`` proxy), and the bytes each way. It writes a plot of
stall against handed-off length.

``--extend-only`` measures the extend forward alone in PyTorch (no SGLang): the layers of a named
model shape, N new tokens attending to a context, on ``--device`` (``cuda`` on a GPU machine),
beside the time to copy the same KV over links of given speeds.

    bash scripts/with-env.sh python benchmark/run.py handoff
    bash scripts/with-env.sh python benchmark/run.py handoff \
        --handed 1,100,1000 --contexts 1000,6000
    python benchmark/run.py handoff --extend-only --model llama-3-8b --device cuda
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import shared_flags  # benchmark/shared_flags.py (the script's folder)
from extend_cost import extend_table  # benchmark/extend_cost.py (the script's folder)
from tqdm import tqdm


@dataclass
class Case:
    mode: str
    load: str
    context: int
    handed: int
    stalls_s: list
    handed_actual: list
    handoff_bytes: int
    kv_bytes: int
    kv_send_s: float
    # Per stall: MD's side of it (``main_waited_s``, ``main_extend_s`` of the record) and MD's
    # ITL after it (``main_itl_s``); the link's round trip.
    waits_s: list
    extends_s: list
    main_itls_s: list
    rtt_s: float

    def bounds_s(self) -> list:
        """The goal's bound on each stall: RTT + that handoff's extend + one of MD's ITL."""
        return [
            None if extend is None or itl is None else self.rtt_s + extend + itl
            for extend, itl in zip(self.extends_s, self.main_itls_s, strict=True)
        ]

    def within(self) -> int:
        """How many stalls kept within their bound."""
        pairs = zip(self.stalls_s, self.bounds_s(), strict=True)
        return sum(bound is not None and stall <= bound for stall, bound in pairs)

    def row(self) -> str:
        mean = statistics.fmean(self.stalls_s) if self.stalls_s else float("nan")
        p99 = _pct(self.stalls_s, 0.99)
        worst = max(self.stalls_s) / mean if self.stalls_s and mean > 0 else float("nan")
        bounds = [b for b in self.bounds_s() if b is not None]
        return (
            f"{self.mode:9} {self.load:5} {self.context:7} {self.handed:6} "
            f"{len(self.stalls_s):3} {mean * 1e3:9.1f} {p99 * 1e3:8.1f} {worst:7.2f} "
            f"{_mean_ms(self.waits_s):8.1f} {_mean_ms(self.extends_s):9.1f} "
            f"{_mean_ms(bounds):8.1f} {self.within():>2}/{len(self.stalls_s):<2} "
            f"{self.kv_send_s * 1e3:10.1f} {self.handoff_bytes:9} {self.kv_bytes:10}"
        )


HEADER = (
    f"{'mode':9} {'MD':5} {'context':>7} {'handed':>6} {'n':>3} {'stall ms':>9} "
    f"{'p99 ms':>8} {'max/mn':>7} {'wait ms':>8} {'extend ms':>9} {'bound ms':>8} {'ok':>5} "
    f"{'KV-send ms':>10} {'ids B':>9} {'KV B':>10}"
)


def _mean_ms(values: list) -> float:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) * 1e3 if known else float("nan")


def verdicts(cases: list[Case]) -> list[str]:
    """The handoff goals against the cases: One-Shot's stall within RTT + extend + one
    ITL, and Catch-Up's final stall within the same bound (no larger than One-Shot's)."""
    lines = []
    for mode in ("one-shot", "catch-up"):
        mine = [c for c in cases if c.mode == mode]
        if not mine:
            continue
        n = sum(len(c.stalls_s) for c in mine)
        ok = sum(c.within() for c in mine)
        over = [
            stall - bound
            for c in mine
            for stall, bound in zip(c.stalls_s, c.bounds_s(), strict=True)
            if bound is not None and stall > bound
        ]
        verdict = "met" if ok == n else "missed"
        worst = f"; worst {max(over) * 1e3:.1f} ms over" if over else ""
        lines.append(f"{mode}: {ok} of {n} stalls within RTT + extend + 1 ITL ({verdict}{worst})")
    return lines


def _pct(values: list, q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = shared_flags.parser(__doc__.split("\n\n")[0], raw=False)
    parser.add_argument(
        "--handed",
        type=_ints,
        default=[1, 30, 300, 1000],
        help="handed-off lengths (ids RLD made before the handoff)",
    )
    parser.add_argument(
        "--contexts",
        type=_ints,
        default=[1000, 6000],
        help="prompt lengths (up to the model's limit less the output)",
    )
    parser.add_argument("--modes", default="one-shot,catch-up")
    parser.add_argument(
        "--loads",
        default="idle,busy",
        help="idle: MD runs nothing else; busy: MD decodes --busy requests",
    )
    parser.add_argument("--busy", type=int, default=8, help="requests MD decodes when busy")
    shared_flags.repeats(parser, 2)
    parser.add_argument("--bandwidth-mbps", type=float, default=8.0)
    parser.add_argument("--delay-ms", type=float, default=100.0, help="one-way WAN delay")
    shared_flags.out_dir(parser, "folder for handoff.json and the plot", default="out")
    parser.add_argument(
        "--extend-only",
        action="store_true",
        help="PyTorch extend forward only (see --model, --device)",
    )
    parser.add_argument("--model", default="llama-3-8b", help="--extend-only: model shape")
    shared_flags.device(parser, "cpu", "--extend-only: cpu or cuda")
    parser.add_argument(
        "--link-gbps",
        type=lambda t: [float(x) for x in t.split(",")],
        default=[10.0, 100.0],
        help="--extend-only: KV copy link speeds",
    )
    args = parser.parse_args(argv)
    if args.extend_only:
        print(extend_table(args.model, args.device, args.handed, args.contexts, args.link_gbps))
        return 0
    for flag, values, allowed in (
        ("--modes", args.modes, ("one-shot", "catch-up")),
        ("--loads", args.loads, ("idle", "busy")),
    ):
        bad = [v for v in values.split(",") if v not in allowed]
        if bad:
            parser.error(f"{flag}: {bad} not in {list(allowed)}")
    if args.repeats < 1 or args.busy < 0 or not args.handed or not args.contexts:
        parser.error("--repeats >= 1, --busy >= 0, and at least one --handed and --contexts")
    cases = run_cluster(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "handoff.json").write_text(json.dumps([asdict(c) for c in cases], indent=1))
    print(f"wrote {out / 'handoff.json'}")
    plot(cases, out / "handoff_stall.png")
    print(f"wrote {out / 'handoff_stall.png'}")
    return 0


def run_cluster(args) -> list[Case]:
    """Start a local P/RLD/MD cluster behind an emulated WAN, measure every case on it and
    print the table and the verdicts."""
    from sglang_pdd.testbed.cluster import (
        PddClusterConfig,
        start_cluster,
        start_link_proxy,
        start_router,
    )
    from sglang_pdd.testbed.launcher import ServerGroup
    from sglang_pdd.testbed.relay_gate import RelayGate
    from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model
    from sglang_pdd.transfer.wan_link import WanLinkConfig

    model_cfg = TinyModelConfig(seed=0)
    check_lengths_fit(args, model_cfg)
    tmp = Path(tempfile.mkdtemp(prefix="sglang-pdd-handoff-"))
    model = write_tiny_model(tmp / "model", model_cfg)
    link = WanLinkConfig(bandwidth_mbps=args.bandwidth_mbps, one_way_delay_ms=args.delay_ms)
    kv_per_token = model_cfg.kv_bytes_per_token(dtype_bytes=4)  # the cluster runs float32
    with ServerGroup(log_dir=tmp / "logs") as group:
        print(f"starting the cluster (logs: {tmp / 'logs'}) ...", flush=True)
        cluster = start_cluster(
            group,
            PddClusterConfig(
                model_path=str(model),
                dtype="float32",
                wan=link,
                ttft_slo_s=0.0,
                max_total_tokens=65536,
                # Only new ids per chunk: SGLang's cumulative streams grow quadratically and, on
                # an 8 Mbit/s link, MD's answers queued behind each other (seconds of "stall").
                incremental_streams=True,
            ),
        )
        control = start_link_proxy(group, "held-control", cluster.mains[0].control_port, link)
        gate = RelayGate(cluster.relay.url, incremental=True)
        site = replace(cluster.mains[0], control_via_wan=control.url.replace("http", "tcp"))
        routers = start_mode_routers(group, cluster, site, gate, args.modes.split(","))
        busy_router = start_router(group, cluster, name="router-busy", ttft_slo_s=1e9).url
        kv_send = KvSender(group, link)
        cases = measure_cases(args, routers, busy_router, gate, control, kv_per_token, kv_send)
        print_cases(cases)
        return cases


def check_lengths_fit(args, model_cfg) -> None:
    """Exit when the longest context plus the longest handed-off length (and a tail) exceeds
    the model's positions."""
    longest = max(args.contexts) + max(args.handed) + 1000
    if longest > model_cfg.max_positions:
        raise SystemExit(
            f"context {max(args.contexts)} + handed {max(args.handed)} exceeds the "
            f"model's {model_cfg.max_positions} positions"
        )


def start_mode_routers(group, cluster, site, gate, modes: list[str]) -> dict[str, str]:
    """One router per handoff mode, reaching MD's control through the held link and RLD
    through the gate: mode -> its URL."""
    from sglang_pdd.testbed.cluster import start_router

    return {
        mode: start_router(
            group,
            cluster,
            name=f"router-{mode}",
            mains=[site],
            relay_url=gate.url,
            handoff_mode=mode,
            catchup_threshold=4,
            catchup_chunk=64,
            # Every case measures a handoff: a short tail would otherwise finish on RLD,
            # which the gate holds (the router's tail rule, --no-tail-on-relay).
            tail_on_relay=False,
        ).url
        for mode in modes
    }


def measure_cases(args, routers, busy_router, gate, control, kv_per_token, kv_send) -> list[Case]:
    """Every (load, context, handed, mode) case, each row printed as it is measured."""
    cases = []
    loads = args.loads.split(",")
    total = len(loads) * len(args.contexts) * len(args.handed) * len(routers)
    bar = tqdm(total=total, desc="handoff cases", unit="case")
    for load in loads:
        with MainDecodeLoad(busy_router, args.busy if load == "busy" else 0):
            for context in args.contexts:
                for handed in args.handed:
                    for mode, router in routers.items():
                        case = measure(
                            router,
                            gate,
                            control,
                            mode,
                            load,
                            context,
                            handed,
                            args.repeats,
                            kv_per_token,
                            kv_send,
                            2 * args.delay_ms / 1e3,
                        )
                        tqdm.write(case.row())
                        bar.update()
                        cases.append(case)
    bar.close()
    return cases


def print_cases(cases: list[Case]) -> None:
    """The table of every case, then the goals' verdicts."""
    print("\n" + HEADER + "\n" + "-" * len(HEADER))
    for case in cases:
        print(case.row())
    print("\n" + "\n".join(verdicts(cases)))


def measure(
    router, gate, control, mode, load, context, handed, repeats, kv_per_token, kv_send, rtt_s
) -> Case:
    """One case: ``repeats`` requests each handed to MD after exactly ``handed`` ids of RLD,
    beside the time to send those ids' KV over the link instead."""
    from sglang_pdd.wire.codec import encode
    from sglang_pdd.wire.messages import Handoff

    # A fresh prompt per case and mode (no case finds another's KV cached) and unique rids.
    rng = random.Random(f"{mode}/{load}/{context}/{handed}")
    stalls, actual, waits, extends, itls = [], [], [], [], []
    for _ in range(repeats):
        rid = f"handoff-{rng.getrandbits(48):x}"
        body = request_body(rng, rid, mode, context, handed)
        record = run_held_request(router, gate, control, mode, handed, rid, body)
        # From the final handoff to MD's first token: in service the router hands off as soon
        # as MD is ready, so this is the gap the client sees (here RLD was held at N first).
        if record["handoff_to_main_s"] is not None:
            stalls.append(record["handoff_to_main_s"])
            actual.append(record["handoff_tokens"])
            waits.append(record["main_waited_s"])
            extends.append(record["main_extend_s"])
            itls.append(record["main_itl_s"])
        else:
            print(f"  ({mode}, N={handed}: finished on {record['finished_on']}, no handoff)")
    ids = list(range(handed))
    kv_bytes = handed * kv_per_token
    return Case(
        mode,
        load,
        context,
        handed,
        stalls,
        actual,
        len(encode(Handoff(rid="r" * 40, token_ids=ids, final=True))),
        kv_bytes,
        kv_send.seconds(kv_bytes),
        waits,
        extends,
        itls,
        rtt_s,
    )


def request_body(rng: random.Random, rid: str, mode: str, context: int, handed: int) -> dict:
    """A greedy request of ``context`` random ids that decodes past ``handed`` ids."""
    return {
        "rid": rid,
        "input_ids": [rng.randrange(10, 250) for _ in range(context)],
        # Catch-Up needs RLD streaming on while MD catches up: a longer tail.
        "sampling_params": {
            "temperature": 0.0,
            "ignore_eos": True,
            "max_new_tokens": handed + (64 if mode == "one-shot" else 1000),
        },
    }


def run_held_request(router, gate, control, mode, handed, rid, body) -> dict:
    """Send ``body`` with RLD held at ``handed`` ids and MD's control link stalled until then;
    the finished request's PDD record."""
    from sglang_pdd.testbed.client import generate
    from sglang_pdd.testbed.held_links import EndedEarly, wait_for_record

    control.pause()
    gate.arm(handed)
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(generate, router, body, True, 600, True)
            while not gate.holding.wait(0.05):
                if future.done():
                    raise EndedEarly(f"ended before {handed} ids: {future.result().body}")
            control.resume()
            if not _main_ready_within(router, rid, future, MAIN_READY_S):
                # MD's KV never landed (a Mooncake TCP send to MD failed under load:
                # "queue-full rejection"): RLD, let go, finishes the request.
                print(
                    f"  ({mode}, N={handed}: Main-Decode's KV not ready within {MAIN_READY_S} s)",
                    flush=True,
                )
                gate.release()
            elif mode == "catch-up":
                # RLD streams on while MD catches up, as in service, up to a new hold:
                # on this CPU the tiny model decodes faster than 64-id chunks cross a
                # 200 ms RTT, so an unheld RLD would finish before MD ever caught up.
                wait_for_record(
                    router,
                    rid,
                    future,
                    lambda r: r["handoff_chunks"] >= 1 or r["main_tokens"] > 0,
                    "the first handoff step",
                )
                gate.advance(gate.held_ids + CATCH_UP_MORE)
            return future.result(timeout=600).body["meta_info"]["pdd"]
    finally:
        gate.release()
        control.resume()


CATCH_UP_MORE = 128  # ids RLD streams during Catch-Up before it is held again
MAIN_READY_S = 60  # a case whose MD has not reported the KV by then is counted as failed


def _main_ready_within(router: str, rid: str, future, seconds: float) -> bool:
    """Whether MD reported the request's KV ready (or the request ended) within ``seconds``."""
    from sglang_pdd.testbed.held_links import live_record

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        record = live_record(router, rid)
        if future.done() or (record is not None and record["main_ready_s"] is not None):
            return True
        time.sleep(0.05)
    return False


class MainDecodeLoad:
    """``count`` streams of long P-MD requests decoding on MD for the duration of a ``with``
    block: each stream sends its next request as soon as one ends, so MD stays busy."""

    def __init__(self, router: str, count: int) -> None:
        self.router, self.count = router, count
        self._threads: list[threading.Thread] = []
        self._first_rids: list[str] = []
        self._stop = threading.Event()

    def _stream(self, i: int) -> None:
        import requests

        n = 0
        while not self._stop.is_set():
            rid = self._first_rids[i] if n == 0 else f"busy-{i}-{n}-{time.monotonic_ns()}"
            body = {
                "rid": rid,
                "input_ids": [10 + (i + j + n) % 200 for j in range(300)],
                "sampling_params": {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 2000},
            }
            resp = requests.post(f"{self.router}/generate", json=body, timeout=3600)
            n += 1
            if resp.status_code != 200:  # MD unreachable: do not flood the cluster with retries
                self._stop.wait(5.0)

    def __enter__(self):
        self._first_rids = [f"busy-{i}-0-{time.monotonic_ns()}" for i in range(self.count)]
        for i in range(self.count):
            thread = threading.Thread(target=self._stream, args=(i,), daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.count:
            _wait_running(self.router, self._first_rids)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()  # each stream ends with the request it is on
        for thread in self._threads:
            thread.join(timeout=600)


def _wait_running(router: str, rids: list[str]) -> None:
    import requests

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        live = requests.get(f"{router}/pdd/requests", timeout=30).json()
        if all((live.get(rid) or {}).get("main_tokens", 0) > 0 for rid in rids):
            return
        time.sleep(0.2)
    raise RuntimeError("the busy requests never started decoding on Main-Decode")


class KvSender:
    """Times sending N bytes through a ``wan-link`` proxy like MD's (a TCP sink behind it)."""

    def __init__(self, group, link) -> None:
        import socket

        from sglang_pdd.testbed.cluster import start_link_proxy

        self._sink = socket.create_server(("127.0.0.1", 0))
        port = self._sink.getsockname()[1]
        self._received: dict[int, threading.Event] = {}
        threading.Thread(target=self._serve, daemon=True).start()
        self.proxy = start_link_proxy(group, "kv-link", port, link)

    def _serve(self) -> None:
        while True:
            conn, _ = self._sink.accept()
            with conn:
                header = conn.recv(8)
                want, got = int.from_bytes(header, "big"), 0
                while got < want and (chunk := conn.recv(1 << 16)):
                    got += len(chunk)
                conn.sendall(b"k")

    def seconds(self, nbytes: int) -> float:
        import socket

        with socket.create_connection((self.proxy.host, self.proxy.port)) as conn:
            start = time.monotonic()
            conn.sendall(nbytes.to_bytes(8, "big") + bytes(nbytes))
            conn.recv(1)  # the sink has it all (the ack pays one more one-way delay)
            return time.monotonic() - start


def plot(cases: list[Case], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = sorted({(c.mode, c.load, c.context) for c in cases})
    for mode, load, context in series:
        points = sorted(
            (c.handed, statistics.fmean(c.stalls_s) * 1e3)
            for c in cases
            if (c.mode, c.load, c.context) == (mode, load, context) and c.stalls_s
        )
        if points:
            ax.plot(
                *zip(*points, strict=True), marker="o", label=f"{mode}, MD {load}, ctx {context}"
            )
    kv = sorted({(c.handed, c.kv_send_s * 1e3) for c in cases})
    ax.plot(*zip(*kv, strict=True), "k--", label="send the KV instead")
    ax.set(
        xscale="log",
        xlabel="handed-off ids",
        ylabel="stall at the router (ms)",
        title="Handoff stall vs handed-off length",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
