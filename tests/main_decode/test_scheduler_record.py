"""What the plugin keeps on SGLang's objects, one typed attribute each: the scheduler's
``SchedulerRecord`` (read by every Main-Decode hook), the request's ``RequestRecord``, the
server's config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sglang_pdd.config import PddServerConfig, attached_config
from sglang_pdd.main_decode.state import MainDecodeState
from sglang_pdd.patches import (
    main_abort,
    main_admission,
    main_control_ingest,
    main_decode_queue,
    main_handoff_batch,
    main_idle,
)
from sglang_pdd.patches.scheduler_init import SchedulerRecord
from sglang_pdd.request_record import RequestRecord, request_record


def _sglang(*_args, **_kwargs):
    return "sglang's"


def test_every_main_decode_hook_defers_to_sglang_on_a_scheduler_without_main_decode():
    scheduler = SimpleNamespace(_pdd=SchedulerRecord())  # what scheduler_init attaches
    assert main_idle.hook(_sglang, scheduler) == "sglang's"
    assert main_control_ingest.hook(lambda *_: ["req"], scheduler) == ["req"]
    assert main_handoff_batch.hook(_sglang, scheduler, None) == "sglang's"
    assert main_decode_queue.hook("result", scheduler) == "result"
    assert main_abort.hook(scheduler, SimpleNamespace(rid="r", abort_all=False)) is None
    assert main_admission.hook(lambda *_: 3, SimpleNamespace(scheduler=scheduler)) == 3


def test_parked_requests_count_as_active_work_on_main_decode():
    state = MainDecodeState(None)
    scheduler = SimpleNamespace(_pdd=SchedulerRecord(main=state))
    assert main_idle.hook(lambda *_: True, scheduler) is True
    assert main_admission.hook(lambda *_: 3, SimpleNamespace(scheduler=scheduler)) == 3
    state.requests.parked["r.pdd-relayed"] = object()
    assert main_idle.hook(lambda *_: True, scheduler) is False
    assert main_admission.hook(lambda *_: 3, SimpleNamespace(scheduler=scheduler)) == 4


def test_a_request_gets_one_record_on_first_use_and_keeps_it():
    req = SimpleNamespace(rid="r")  # as SGLang builds it: no record yet
    record = request_record(req)
    assert record == RequestRecord() and req._pdd is record
    record.extended_ids = 5
    assert request_record(req).extended_ids == 5
    with pytest.raises(AttributeError):  # typed: a misspelt field fails, never defaults
        record.extended = 5


def test_the_server_config_is_the_attached_one_or_the_default():
    config = PddServerConfig(seeded_sampling=True)
    assert attached_config(SimpleNamespace(_pdd=config)) is config
    assert attached_config(SimpleNamespace()) == PddServerConfig()  # built without our parser
