"""Zero, not leave uninitialized, the padding rows of the CPU attention backend's extend."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target=(
        "sglang.srt.layers.attention.torch_native_backend."
        "TorchNativeAttnBackend._run_sdpa_forward_extend"
    ),
    hook_type="around",
    why=(
        "For an extend over a prefix (a chunk of a chunked prefill, a Main-Decode handoff) "
        "the torch_native backend pads each sequence's query to the whole sequence with "
        "torch.empty and discards the padding rows' output. Uninitialized memory often holds "
        "denormal floats, and the CPU's scaled_dot_product_attention then runs ~70x slower "
        "(2,170 positions: 13 ms with zeros, 930 ms with denormal rows): a Main-Decode handoff "
        "extend took 0.4-1.2 s instead of 30 ms, at random. The kept rows do not depend on the "
        "padding (each query row's attention is its own), so zeros change no result."
    ),
    how=(
        "While the original runs, the backend module's global 'torch' is a view of torch whose "
        "empty() is zeros(); everything else is torch itself. Only the CPU device is affected "
        "(the backend is the CPU testbed's; GPU servers use their own backends)."
    ),
    remove_when="SGLang's torch_native extend computes only the extend rows, or zero-pads.",
)


class _ZeroedEmpty:
    """``torch`` with ``empty`` allocating zeros (read through by every other name)."""

    def __init__(self, torch) -> None:
        self._torch = torch
        self.empty = torch.zeros

    def __getattr__(self, name):
        return getattr(self._torch, name)


def applies() -> bool:
    return True


def hook(original, self, query, *args, **kwargs):
    """Run the extend with zeroed padding rows on the CPU."""
    if query.device.type != "cpu":
        return original(self, query, *args, **kwargs)
    import sglang.srt.layers.attention.torch_native_backend as backend

    torch = backend.torch
    if isinstance(torch, _ZeroedEmpty):  # a nested call: already zeroed
        return original(self, query, *args, **kwargs)
    backend.torch = _ZeroedEmpty(torch)
    try:
        return original(self, query, *args, **kwargs)
    finally:
        backend.torch = torch
