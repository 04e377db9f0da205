"""What loading the model's tokenizer and config costs a router's start, two ways.

Each round starts a fresh Python twice: once loading them as the router does
(``sglang_pdd.router.model_files``: the plain fast backend and a local ``config.json`` read
directly when they apply), once through transformers' ``AutoTokenizer`` and ``AutoConfig``
(what the router did before, and what it still does for any other checkpoint). It prints the
median wall time and CPU of each, whether torch was imported, and checks that both give the
same class, vocabulary size and encodings.

    bash scripts/with-env.sh python benchmark/router_start.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

PROBE = "Hello from the router: 12 tokens, <|user|> and all."

WAYS = {
    "router (model_files)": (
        "from sglang_pdd.router.model_files import load_tokenizer, model_config\n"
        "tok = load_tokenizer(PATH)\n"
        "cfg = model_config(PATH)\n"
    ),
    "AutoTokenizer + AutoConfig": (
        "from transformers import AutoConfig, AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(PATH)\n"
        "cfg = AutoConfig.from_pretrained(PATH).to_dict()\n"
    ),
}


def run_once(code: str, model: str) -> dict:
    script = (
        f"import json, sys\nPATH = {model!r}\n{code}"
        f"print(json.dumps({{'cls': type(tok).__name__, 'vocab': cfg['vocab_size'], "
        f"'ids': tok.encode({PROBE!r}), 'torch': 'torch' in sys.modules}}))\n"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model-path", default=None, help="default: a generated 2-layer model")
    args = ap.parse_args()
    model = args.model_path
    if model is None:
        from sglang_pdd.testbed.tiny_model import TinyModelConfig, write_tiny_model

        model = str(write_tiny_model(Path(tempfile.mkdtemp()) / "tiny-model", TinyModelConfig()))
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    for _ in tqdm(range(args.rounds), desc="rounds", unit="round"):
        for way, code in WAYS.items():  # alternating: a drifting host affects both alike
            runs[way].append(run_once(code, model))
    print(f"{'way':28} {'wall s':>7} {'CPU s':>6} torch  class / vocab")
    for way, rows in runs.items():
        wall = statistics.median(r["wall_s"] for r in rows)
        cpu = statistics.median(r["cpu_s"] for r in rows)
        first = rows[0]
        print(
            f"{way:28} {wall:7.2f} {cpu:6.2f} {str(first['torch']):5}  {first['cls']} / "
            f"{first['vocab']}"
        )
    ours, theirs = (runs[way] for way in WAYS)
    same = all(
        (a["cls"], a["vocab"], a["ids"]) == (b["cls"], b["vocab"], b["ids"])
        for a, b in zip(ours, theirs, strict=True)
    )
    print(f"same class, vocabulary size and encodings: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
