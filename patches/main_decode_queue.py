"""Main-Decode's per-iteration work: park arrivals, end releases, wait when only parked."""

from __future__ import annotations

from sglang_pdd.patches import PatchRecord

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler.process_decode_queue",
    hook_type="after",
    why=(
        "A decode server puts every request whose KV arrived into its waiting queue and decodes "
        "it; Main-Decode must instead hold relayed requests until Relay-Decode hands off, then "
        "extend over the handed-off token ids before decoding on."
    ),
    how=(
        "On a --pdd-role main scheduler, after SGLang moved transferred requests to the waiting "
        "queue: insert each newly landed prompt's KV into the radix tree (SGLang would only at "
        "the request's end; concurrent requests sharing the prefix, and the KV events the "
        "router follows, then see it), move relayed ones (rid suffix .pdd-relayed) into the "
        "parked set and announce them on the control socket, end parked requests that "
        "finished on Relay-Decode (SGLang's abort caches their KV). Control messages come in "
        "through main_control_ingest; the handoffs run as batches (main_handoff_batch). With "
        "only parked work pending (no handoff ready to run), wait on the control socket briefly "
        "instead of spinning."
    ),
    remove_when="SGLang's decode scheduler supports held requests resumed by an extend.",
)


def applies() -> bool:
    return True


def hook(result, self, *args, **kwargs):
    """Drive the Main-Decode state machine once (no-op on other roles)."""
    state = self._pdd.main
    if state is None:
        return result
    state.park_arrivals(self)
    requests = state.requests
    idle_but_parked = requests.parked and self.running_batch.is_empty() and not self.waiting_queue
    # Not with a handoff ready: its extend batch is this iteration's work, and a wait here
    # would delay every handoff to an idle MD by the wait's 2 ms.
    if idle_but_parked and not requests.handoff_runnable():  # read next iteration, every rank
        state.wait_for_control(timeout_ms=2)
    state.release_finished(self)
    return result
