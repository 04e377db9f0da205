"""Deterministic prompts of varied lengths for the token-for-token tests."""

from __future__ import annotations

import random

_WORDS = (
    "cache prefill decode relay main token stream latency link datacenter radix extend "
    "handoff batch chunk server request model output input prefix the of and to in is"
).split()


def make_prompt(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


def varied_prompts(count: int = 20, seed: int = 7, long_every: int = 5) -> list[str]:
    """``count`` prompts from a few words to over 2,000 tokens (every ``long_every``-th)."""
    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        long = i % long_every == long_every - 1
        n_words = rng.randint(1500, 1800) if long else rng.randint(3, 300)
        prompts.append(make_prompt(rng, n_words))
    return prompts
