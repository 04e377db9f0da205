"""Use SGLang's seeded sampler without --enable-deterministic-inference."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord
from sglang_pdd.request_record import request_record

RECORD = PatchRecord(
    target="sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.from_schedule_batch",
    hook_type="after",
    why=(
        "SGLang 0.5.23 samples with a request's sampling_seed (a hash of seed and position, so "
        "any instance draws the same token at the same position) only under "
        "--enable-deterministic-inference, which refuses the CPU's torch_native attention and "
        "turns the radix cache off for backends it does not list. PDD needs seeded requests to "
        "draw the same tokens on P, Relay-Decode and Main-Decode as on one co-located server, "
        "with Main-Decode's radix cache on."
    ),
    how=(
        "On a server started with --pdd-seeded-sampling, after SGLang builds a batch's "
        "sampling info without seeds, give it the seed tensor SGLang's deterministic mode "
        "would: each request's sampling_seed, or for a request without one a random seed drawn "
        "once per request (so its sampling stays random). Every batch then carries seeds, "
        "which keeps SGLang's merge and filter of the tensor aligned."
    ),
    remove_when="SGLang honours sampling_seed without deterministic inference.",
)


def applies() -> bool:
    return True


def hook(info, cls, batch, *args, **kwargs):
    """Fill in the per-request seeds."""
    from sglang_pdd.config import current

    if info.sampling_seed is None and current().seeded_sampling:
        import torch

        seeds = [request_seed(req) for req in batch.reqs]
        info.sampling_seed = torch.tensor(seeds, dtype=torch.int64, device=batch.device)
    return info


def request_seed(req) -> int:
    """The request's sampling_seed, or a random seed kept on the request for its lifetime."""
    seed = req.sampling_params.sampling_seed
    if seed is not None:
        return int(seed)
    record = request_record(req)
    if record.seed is None:
        import random

        record.seed = random.getrandbits(63)
    return record.seed
