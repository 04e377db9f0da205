"""Run SGLang's seeded sampler eagerly on the CPU."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.layers.sampler.multinomial_with_seed",
    hook_type="around",
    why=(
        "SGLang's seeded sampler is wrapped in torch.compile; on the CPU, Inductor fails to "
        "compile its uint64 arithmetic ('18446744073709551615 too big to convert to "
        "int64_t') and the scheduler dies on the first seeded sample. The same function runs "
        "correctly without compilation."
    ),
    how=(
        "When the logits are on the CPU, call the function torch.compile wrapped "
        "(_torchdynamo_orig_callable) instead of the compiled one; on other devices defer to "
        "SGLang. On the CPU the per-token hash is sglang_pdd.cpu.ops.murmur_hash32_cpu, "
        "registered by the sgl_kernel stand-in."
    ),
    remove_when="SGLang's seeded sampler compiles on the CPU (or is not compiled there).",
)


def applies() -> bool:
    return True


def hook(original, logprobs, *args, **kwargs):
    """Eager on the CPU."""
    if logprobs.device.type == "cpu":
        # torch.compile's attribute, not SGLang's: absent where SGLang did not compile it.
        eager = getattr(original, "_torchdynamo_orig_callable", original)
        return eager(logprobs, *args, **kwargs)
    return original(logprobs, *args, **kwargs)
