"""Give each scheduler process its PDD config, and log that sglang-pdd's hooks are in place."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sglang_pdd.patches import PatchRecord

if TYPE_CHECKING:
    from sglang_pdd.main_decode.state import MainDecodeState
    from sglang_pdd.prefill.ledger_service import LedgerService

RECORD = PatchRecord(
    target="sglang.srt.managers.scheduler.Scheduler.__init__",
    hook_type="around",
    why=(
        "Operators and tests need proof that the plugin loaded in the spawned scheduler "
        "subprocess (SGLang only logs plugin failures, and the scheduler imports its modules "
        "before loading plugins)."
    ),
    how=(
        "Before the scheduler is built, install server_args._pdd as the process's config and "
        "attach a SchedulerRecord as scheduler._pdd (the hooks read it); after, refuse server "
        "modes a Main-Decode cannot serve (PP/DP > 1, DP attention, page size > 1, speculative "
        "decoding: they are resolved only here; config.check_main_decode_modes), give a "
        "Main-Decode scheduler its MainDecodeState (scheduler._pdd.main; the control socket on "
        "the rank that receives requests) and register ControlMessages on its "
        "_request_dispatcher, start a Prefill's transfer ledger (--pdd-ledger-port, "
        "scheduler._pdd.ledger) on the rank that receives requests, with --pdd-emulate-chip "
        "start the emulated chip's forward pacer and KV scale, and log "
        "one line naming the pid, the role, whether the overlap scheduler runs, the hooks applied "
        "in this process, and whether the sgl_kernel stand-in is active."
    ),
    remove_when="SGLang passes plugin configuration to scheduler processes itself.",
)

MARKER = "sglang-pdd: scheduler hooks active"
logger = logging.getLogger("sglang_pdd")


@dataclass(slots=True)
class SchedulerRecord:
    """What sglang-pdd keeps per scheduler, on SGLang's ``Scheduler`` as ``scheduler._pdd``:
    attached to every scheduler before SGLang builds it, so the hooks read it plainly."""

    main: MainDecodeState | None = None  # a Main-Decode's parked requests and control socket
    ledger: LedgerService | None = None  # a Prefill's transfer ledger (--pdd-ledger-port)


def applies() -> bool:
    return True


def hook(original, self, server_args, *args, **kwargs):
    """Install the config, build the scheduler, emit the marker line."""
    from sglang_pdd import config as pdd_config
    from sglang_pdd.cpu.activation import is_active
    from sglang_pdd.plugin import applied_targets

    pdd_config.set_current(pdd_config.attached_config(server_args))
    self._pdd = SchedulerRecord()
    result = original(self, server_args, *args, **kwargs)
    config = pdd_config.current()
    if config.role == "main":
        from sglang_pdd.main_decode.state import MainDecodeState

        pdd_config.check_main_decode_modes(
            pp_size=int(server_args.pp_size or 1),
            dp_size=int(server_args.dp_size or 1),
            speculative=server_args.speculative_algorithm,
            page_size=int(server_args.page_size or 1),
            dp_attention=bool(server_args.enable_dp_attention),
        )

        vocab = self.model_config.vocab_size
        # Only the rank that pulls requests (the one _poll_timeout_aborts runs on) binds the
        # control socket; main_control_ingest broadcasts what it reads to the other ranks.
        self._pdd.main = MainDecodeState(
            config.control_port if _receives_requests() else None,
            host=config.control_host,
            vocab_size=vocab,
            ttl_s=config.parked_ttl_s,
            curve=config.control_curve(),
        )
        _dispatch_control_messages(self)
    if config.emulation is not None:
        _emulate(self, config.emulation, server_args)
    if config.role == "prefill" and config.ledger_port and _receives_requests():
        from sglang_pdd.prefill.ledger_service import LedgerService
        from sglang_pdd.transfer.ledger import ledger

        # Every TP rank writes its share of the heads; this rank measures its own.
        tp_size, transfers = server_args.tp_size, ledger()
        self._pdd.ledger = LedgerService(
            config.ledger_host,
            config.ledger_port,
            config.ledger_claim_ttl_s,
            sending=(lambda: transfers.wan_sending_bytes() * tp_size) if config.wan_hosts else None,
        )
        self._pdd.ledger.start()
    logger.warning(
        "%s pid=%d role=%s overlap_schedule=%s cpu_kernel_standin=%s targets=%s",
        MARKER,
        os.getpid(),
        pdd_config.current().role,
        bool(self.enable_overlap),
        is_active(),
        ",".join(applied_targets()),
    )
    return result


def _emulate(scheduler, emulation, server_args) -> None:
    """Pad this scheduler's forwards to the emulated chip (emulation/runtime.py)."""
    from sglang_pdd.emulation import runtime
    from sglang_pdd.main_decode.state import kv_bytes_per_token

    runtime.install(
        emulation,
        on_decode_server=server_args.disaggregation_mode == "decode",
        real_kv_bytes=kv_bytes_per_token(scheduler),
        metrics=bool(server_args.enable_metrics),
    )


def _receives_requests() -> bool:
    """The scheduler rank that pulls requests from the tokenizer (SGLang's ingest_requests)."""
    from sglang.srt.runtime_context import get_parallel

    par = get_parallel()
    return par.pp_rank == 0 and par.attn_tp_rank == 0 and par.attn_cp_rank == 0


def _dispatch_control_messages(scheduler) -> None:
    """Route ControlMessages (broadcast with the requests) to this rank's MainDecodeState."""
    from sglang.utils import TypeBasedDispatcher

    from sglang_pdd.main_decode.state import ControlMessages

    # TypeBasedDispatcher.__iadd__ adds our type to the scheduler's own dispatcher.
    scheduler._request_dispatcher += TypeBasedDispatcher(
        [(ControlMessages, scheduler._pdd.main.apply_control)]
    )
