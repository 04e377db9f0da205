"""Make each forward last as long as the emulated accelerator takes (--pdd-emulate-chip)."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler.run_batch",
    hook_type="around",
    why=(
        "A testbed on a few CPU cores must measure the design on the brief's chips (P and RLD "
        "on chip A, MD on a decode-strong chip B), not the host's cores: every forward has to "
        "take the emulated chip's time for its batch, while SGLang's scheduler, radix cache, "
        "transfers and every output token stay real. run_batch is the one call every event "
        "loop (co-located, PD prefill, PD decode) makes per forward."
    ),
    how=(
        "Read the batch's shape (extends with their cached prefixes, decode batch and its "
        "context) before the forward, run it for real, then sleep until the duration the "
        "simulator's step-time model gives for that shape on the emulated chip has passed; "
        "count an overrun when the real forward took longer, and the scheduler thread's CPU "
        "between forwards. Prebuilt (PD placeholder) and idle batches are not padded."
    ),
    remove_when="SGLang's simulator (tools/sglang-simulator) ships a blocking-mode forward hook.",
)


def applies() -> bool:
    return True


def hook(original, self, batch, *args, **kwargs):
    """Run the forward, then wait out the emulated chip's remaining time."""
    from sglang_pdd.emulation import runtime

    pacer = runtime.pacer()
    if pacer is None:
        return original(self, batch, *args, **kwargs)
    from sglang_pdd.emulation.forward import shape_of

    shape = shape_of(batch)  # before the forward, which advances the batch's lengths
    started = pacer.begin()
    result = original(self, batch, *args, **kwargs)
    runtime.after_forward(shape, pacer.end(started, shape))
    return result
