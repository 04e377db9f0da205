"""The part of SGLang that sglang-pdd relies on, listed once, and a check of it.

``SURFACE`` names every SGLang function, method, class, attribute and parameter name that code
in ``sglang_pdd/`` and ``patches/`` uses, with the file that uses it. ``check_surface()``
imports each one from the installed SGLang and says what is gone. Our code then reads SGLang
objects with plain attribute access: a rename fails this check (``tests/test_sglang_surface.py``)
instead of being hidden behind a ``getattr`` default. Upgrading SGLang: run that test, fix what
it names, in our code and in this table.

This module imports nothing from SGLang until ``check_surface`` runs.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

FUNCTION = "function"  # a module-level function; params: parameter names relied on
METHOD = "method"  # a method, classmethod or staticmethod; params: as for a function
CLASS = "class"  # a class; params: constructor parameters relied on
ATTR = "attr"  # an instance attribute: assigned as self.NAME in the class or a base, or a field
CLASS_ATTR = "class_attr"  # an attribute of the class object itself


@dataclass(frozen=True)
class Use:
    """One piece of SGLang our code relies on."""

    module: str  # "sglang.srt.managers.scheduler"
    name: str  # qualified name inside the module: "Scheduler.waiting_queue"
    kind: str  # FUNCTION, METHOD, CLASS, ATTR or CLASS_ATTR
    # Our files that rely on it, ", "-separated, relative to the sglang_pdd package (patches/ is
    # installed as sglang_pdd.patches).
    used_in: str
    params: tuple[str, ...] = ()
    # True: params are the leading parameters (after self/cls), in this order, because a hook
    # receives them positionally (or our code passes them so).
    positional: bool = False

    @property
    def target(self) -> str:
        return f"{self.module}.{self.name}"


def _use(kind: str, module: str, name: str, used_in: str, *params: str) -> Use:
    """An entry whose ``params`` our code passes (or reads) by name."""
    return Use(module, name, kind, used_in, params)


def _pos(kind: str, module: str, name: str, used_in: str, *params: str) -> Use:
    """An entry whose leading parameters are ``params``, in order (hook targets)."""
    return Use(module, name, kind, used_in, params, positional=True)


def _attrs(module: str, cls: str, used_in: str, *names: str) -> tuple[Use, ...]:
    """Instance attributes ``names`` of ``module.cls``."""
    return tuple(Use(module, f"{cls}.{name}", ATTR, used_in) for name in names)


def _methods(module: str, cls: str, used_in: str, *names: str) -> tuple[Use, ...]:
    """Methods ``names`` of ``module.cls``, called without keyword arguments."""
    return tuple(Use(module, f"{cls}.{name}", METHOD, used_in) for name in names)


_SCHED = "sglang.srt.managers.scheduler"
_BATCH = "sglang.srt.managers.schedule_batch"
_IO = "sglang.srt.managers.io_struct"
_ARGS = "sglang.srt.server_args"
_DECODE = "sglang.srt.disaggregation.decode"
_MOONCAKE = "sglang.srt.disaggregation.mooncake.conn"
_ENGINE = "sglang.srt.distributed.device_communicators.mooncake_transfer_engine"
_EVENTS = "sglang.srt.disaggregation.kv_events"
_HOST = "sglang.srt.mem_cache.pool_host.common"
_TREE = "sglang.srt.mem_cache.base_prefix_cache"
_ALLOC = "sglang.srt.mem_cache.allocator.base"
_POOL = "sglang.srt.mem_cache.memory_pool"
_SAMPLING = "sglang.srt.sampling.sampling_batch_info"
_PENALTY = "sglang.srt.sampling.penaltylib"
_HOOKS = "sglang.srt.plugins.hook_registry"
_OPENAI = "sglang.srt.entrypoints.openai.utils"

_STATE = "main_decode/state.py"
_PARKED = "main_decode/parked.py"
_HANDED = "main_decode/handoff_tokens.py"
_EXTEND = "main_decode/extend.py"
_PENALTIES = "main_decode/penalties.py"
_INIT = "patches/scheduler_init.py"
_TWIN = "patches/prefill_twin_hold.py"
_SEEDED = "patches/seeded_sampling.py"
_LOGPROBS = "router/api/openai_logprobs.py"
_VIEW = "cache/kv_event_view.py"

_OAI = "sglang.srt.entrypoints.openai.protocol"
_RESULTS = "sglang.srt.managers.scheduler_components.batch_result_processor"
_REASONING = "sglang.srt.parser.reasoning_parser"
_REASON = "router/api/reasoning_count.py"
_COMPLETIONS = "router/api/openai_app.py"
_CHAT = "router/api/openai_chat.py"
_SERVING_CHAT = "sglang.srt.entrypoints.openai.serving_chat"
_TM = "sglang.srt.managers.tokenizer_manager"
_RUNTIME = "sglang.srt.runtime_context"

SURFACE: tuple[Use, ...] = (
    # -- hook targets (patches/*.py RECORD.target) and the leading arguments the hooks take --
    _pos(FUNCTION, _HOST, "_cuda_host_register", "patches/cpu_host_register.py", "buffer"),
    _pos(FUNCTION, _HOST, "_cuda_host_unregister", "patches/cpu_host_unregister.py", "buffer"),
    _use(METHOD, _MOONCAKE, "MooncakeKVSender.__init__", "patches/cpu_mooncake_sender_indices.py"),
    _pos(
        FUNCTION,
        "sglang.srt.distributed.parallel_state",
        "init_model_parallel_group",
        "patches/cpu_parallel_groups.py",
        *("group_ranks", "local_rank", "backend", "use_pynccl"),  # use_pynccl: 4th or by name
    ),
    _pos(
        FUNCTION,
        "sglang.srt.entrypoints.engine",
        "_set_envs_and_config",
        "patches/cpu_fork_subprocesses.py",
        "server_args",
    ),
    _pos(METHOD, _SCHED, "Scheduler.__init__", _INIT, "server_args"),
    _pos(METHOD, _ARGS, "ServerArgs.add_cli_args", "patches/server_args_cli.py", "parser"),
    _pos(METHOD, _ARGS, "ServerArgs.from_cli_args", "patches/server_args_from_cli.py", "args"),
    _pos(
        METHOD,
        _ENGINE,
        "MooncakeTransferEngine.batch_transfer_sync",
        "patches/kv_transfer_ledger.py",
        *("session_id", "buffers", "peer_buffer_addresses", "lengths"),
    ),
    _use(METHOD, _ENGINE, "MooncakeTransferEngine.__init__", "patches/kv_wan_engine.py"),
    *_attrs(_ENGINE, "MooncakeTransferEngine", "patches/kv_wan_engine.py", "hostname"),
    *_attrs(
        _ENGINE,
        "MooncakeTransferEngine",
        "patches/kv_wan_engine.py, transfer/wan_engine.py",
        "engine",
    ),
    _pos(
        METHOD,
        _MOONCAKE,
        "MooncakeKVManager.add_transfer_request",
        "patches/kv_transfer_queue_split.py",
        "bootstrap_room",
    ),
    _use(METHOD, _SCHED, "Scheduler.get_new_batch_prefill", _TWIN),
    _use(METHOD, _SCHED, "Scheduler.process_decode_queue", "patches/main_decode_queue.py"),
    _pos(
        METHOD,
        _SCHED,
        "Scheduler.get_next_disagg_decode_batch_to_run",
        "patches/main_handoff_batch.py",
        "running_batch",
    ),
    _use(METHOD, _DECODE, "DecodePreallocQueue._active_req_count", "patches/main_admission.py"),
    _use(METHOD, _SCHED, "Scheduler._poll_timeout_aborts", "patches/main_control_ingest.py"),
    _pos(METHOD, _SCHED, "Scheduler.abort_request", f"patches/main_abort.py, {_STATE}", "recv_req"),
    _use(METHOD, _SCHED, "Scheduler.is_fully_idle", "patches/main_idle.py"),
    _pos(METHOD, _SCHED, "Scheduler.run_batch", "patches/emulated_forward.py", "batch"),
    *_attrs(
        _BATCH,
        "ScheduleBatch",
        "emulation/forward.py",
        *("forward_mode", "extend_lens", "prefix_lens"),
    ),
    _use(CLASS_ATTR, _BATCH, "Req.seqlen", "emulation/forward.py"),
    *_methods(
        "sglang.srt.model_executor.forward_batch_info",
        "ForwardMode",
        "emulation/forward.py",
        "is_decode",
        "is_extend",
    ),
    *_attrs("sglang.srt.server_args", "ServerArgs", "patches/scheduler_init.py", "enable_metrics"),
    _use(
        METHOD,
        f"{_PENALTY}.orchestrator",
        "BatchedPenalizerOrchestrator.__init__",
        "patches/penalizer_order.py",
    ),
    _pos(METHOD, _SAMPLING, "SamplingBatchInfo.from_schedule_batch", _SEEDED, "batch"),
    _pos(
        FUNCTION,
        "sglang.srt.layers.sampler",
        "multinomial_with_seed",
        "patches/cpu_seeded_sampler_eager.py",
        "logprobs",
    ),
    _pos(
        METHOD,
        "sglang.srt.layers.attention.torch_native_backend",
        "TorchNativeAttnBackend._run_sdpa_forward_extend",
        "patches/cpu_sdpa_extend_padding.py",
        "query",
    ),
    # -- the plugin machinery ---------------------------------------------------------------
    _pos(METHOD, _HOOKS, "HookRegistry.register", "plugin.py", "target", "hook", "hook_type"),
    _use(METHOD, _HOOKS, "HookRegistry.apply_hooks", "plugin.py"),
    _use(CLASS, _HOOKS, "HookType", "plugin.py"),
    # -- the scheduler ----------------------------------------------------------------------
    *_attrs(_SCHED, "Scheduler", f"{_STATE}, {_EXTEND}, {_TWIN}", "waiting_queue"),
    *_attrs(_SCHED, "Scheduler", "patches/main_decode_queue.py", "running_batch"),
    *_attrs(
        _SCHED, "Scheduler", f"{_STATE}, {_EXTEND}", "tree_cache", "token_to_kv_pool_allocator"
    ),
    *_attrs(_SCHED, "Scheduler", f"{_EXTEND}, {_INIT}", "model_config", "enable_overlap"),
    *_attrs(
        _SCHED,
        "Scheduler",
        _EXTEND,
        *("req_to_token_pool", "spec_algorithm", "last_batch", "disagg_decode_prealloc_queue"),
    ),
    *_attrs(_SCHED, "Scheduler", _INIT, "_request_dispatcher"),
    *_attrs(
        _SCHED, "Scheduler", _TWIN, "disagg_prefill_bootstrap_queue", "chunked_req", "result_queue"
    ),
    *_attrs("sglang.srt.disaggregation.prefill", "PrefillBootstrapQueue", _TWIN, "queue"),
    *_attrs(_DECODE, "DecodePreallocQueue", "patches/main_admission.py", "scheduler"),
    *_attrs(_DECODE, "DecodePreallocQueue", _EXTEND, "num_reserved_decode_tokens"),
    *_attrs("sglang.srt.configs.model_config", "ModelConfig", _INIT, "vocab_size"),
    # get_parallel()'s ParallelContext resolves pp_rank / attn_tp_rank / attn_cp_rank through
    # __getattr__ from the published config: nothing static to check (the e2e TP test runs it).
    _use(FUNCTION, "sglang.srt.runtime_context", "get_parallel", _INIT),
    _pos(CLASS, "sglang.utils", "TypeBasedDispatcher", _INIT, "mapping"),
    _use(METHOD, "sglang.utils", "TypeBasedDispatcher.__iadd__", _INIT),
    # -- server arguments (ServerArgs fields; SGLang's CLI namespace uses the same names) ---
    *_attrs(
        _ARGS,
        "ServerArgs",
        _INIT,
        *("pp_size", "dp_size", "speculative_algorithm", "page_size", "enable_dp_attention"),
    ),
    *_attrs(
        _ARGS,
        "ServerArgs",
        "patches/server_args_from_cli.py",
        *("disaggregation_mode", "disaggregation_decode_enable_radix_cache"),
    ),
    *_attrs(_ARGS, "ServerArgs", "patches/scheduler_init.py", "tp_size"),
    # -- requests ---------------------------------------------------------------------------
    *_attrs(_BATCH, "Req", f"{_STATE}, {_PARKED}, {_EXTEND}, {_TWIN}, prefill/__init__.py", "rid"),
    *_attrs(_BATCH, "Req", f"{_STATE}, {_PARKED}, {_HANDED}", "origin_input_ids"),
    *_attrs(_BATCH, "Req", f"{_PARKED}, {_HANDED}", "prefix_len"),
    *_attrs(_BATCH, "Req", _STATE, "skip_radix_cache_insert"),
    *_attrs(
        _BATCH,
        "Req",
        _HANDED,
        *("full_untruncated_fill_ids", "extend_end", "return_logprob", "logprob"),
    ),
    *_attrs(_BATCH, "Req", f"{_HANDED}, {_EXTEND}", "output_ids"),
    *_attrs(
        _BATCH,
        "Req",
        _EXTEND,
        *("inflight_middle_chunks", "logprob_start_len", "to_finish", "grammar"),
    ),
    *_attrs(_BATCH, "Req", f"{_SEEDED}, {_REASON}", "sampling_params"),
    *_methods(_BATCH, "Req", _STATE, "refresh_fill_ids"),
    *_attrs(
        _BATCH,
        "ReqLogprob",
        _HANDED,
        *("output_token_logprobs_val", "output_token_logprobs_idx"),
        *("output_top_logprobs_val", "output_top_logprobs_idx"),
        *("output_token_ids_logprobs_val", "output_token_ids_logprobs_idx"),
    ),
    *_attrs("sglang.srt.sampling.sampling_params", "SamplingParams", _SEEDED, "sampling_seed"),
    _pos(
        METHOD,
        "sglang.srt.constrained.base_grammar_backend",
        "BaseGrammarObject.accept_token",
        _EXTEND,
        "token",
    ),
    _pos(CLASS, _BATCH, "FINISH_ABORT", _EXTEND, "message"),
    _use(CLASS, _IO, "AbortReq", _STATE),
    *_attrs(_IO, "AbortReq", f"patches/main_abort.py, {_STATE}", "rid"),
    *_attrs(_IO, "AbortReq", "patches/main_abort.py", "abort_all"),
    # -- batches ----------------------------------------------------------------------------
    _use(
        METHOD,
        _BATCH,
        "ScheduleBatch.init_new",
        _EXTEND,
        *("reqs", "req_to_token_pool", "token_to_kv_pool_allocator", "tree_cache"),
        *("model_config", "enable_overlap", "spec_algorithm"),
    ),
    _use(METHOD, _BATCH, "ScheduleBatch.filter_batch", _EXTEND, "reqs_to_exclude"),
    *_methods(_BATCH, "ScheduleBatch", _EXTEND, "prepare_for_extend", "merge_batch"),
    *_methods(_BATCH, "ScheduleBatch", f"{_EXTEND}, patches/main_decode_queue.py", "is_empty"),
    *_attrs(_BATCH, "ScheduleBatch", f"{_EXTEND}, {_TWIN}, {_SEEDED}", "reqs"),
    *_attrs(_BATCH, "ScheduleBatch", _EXTEND, "sampling_info", "batch_is_full"),
    *_attrs(_BATCH, "ScheduleBatch", _SEEDED, "device"),
    _use(CLASS, _BATCH, "NextBatchPlan", "patches/main_handoff_batch.py"),
    # -- the KV-event publisher's config (what binds where) ---------------------------------
    _use(METHOD, _EVENTS, "KVEventsConfig.from_cli", "config.py"),
    *_attrs(_EVENTS, "KVEventsConfig", "config.py", "publisher", "endpoint", "bind"),
    *_attrs(_EVENTS, "KVEventsConfig", "config.py", "replay_endpoint"),
    *_attrs(_ARGS, "ServerArgs", "patches/server_args_from_cli.py", "kv_events_config"),
    *_attrs(
        _BATCH, "NextBatchPlan", "patches/main_handoff_batch.py", "batch_to_run", "running_batch"
    ),
    *_attrs(_SAMPLING, "SamplingBatchInfo", _SEEDED, "sampling_seed"),
    *_attrs(_SAMPLING, "SamplingBatchInfo", _EXTEND, "penalizer_orchestrator"),
    # -- penalizers (count_handed_off_ids writes their state tensors) -----------------------
    *_attrs(
        f"{_PENALTY}.orchestrator",
        "BatchedPenalizerOrchestrator",
        f"{_PENALTIES}, patches/penalizer_order.py",
        "penalizers",
    ),
    *_attrs(f"{_PENALTY}.orchestrator", "BatchedPenalizerOrchestrator", _PENALTIES, "device"),
    *_attrs(f"{_PENALTY}.orchestrator", "_BatchedPenalizer", _PENALTIES, "_is_prepared"),
    *_attrs(
        f"{_PENALTY}.frequency_penalty",
        "BatchedFrequencyPenalizer",
        _PENALTIES,
        *("cumulated_frequency_penalties", "frequency_penalties"),
    ),
    *_attrs(
        f"{_PENALTY}.presence_penalty",
        "BatchedPresencePenalizer",
        _PENALTIES,
        *("cumulated_presence_penalties", "presence_penalties"),
    ),
    *_attrs(
        f"{_PENALTY}.repetition_penalty",
        "BatchedRepetitionPenalizer",
        _PENALTIES,
        *("cumulated_repetition_penalties", "repetition_penalties"),
    ),
    *_attrs(
        f"{_PENALTY}.min_new_tokens",
        "BatchedMinNewTokensPenalizer",
        _PENALTIES,
        "len_output_tokens",
    ),
    # -- KV memory and the radix tree -------------------------------------------------------
    *_attrs(_TREE, "BasePrefixCache", f"{_STATE}, {_EXTEND}", "disable"),
    _use(METHOD, _TREE, "BasePrefixCache.checkpoint", _STATE, "req", "up_to"),
    *_methods(_TREE, "BasePrefixCache", _EXTEND, "evictable_size"),
    *_attrs(_ALLOC, "BaseTokenToKVPoolAllocator", _EXTEND, "size", "page_size"),
    *_methods(_ALLOC, "BaseTokenToKVPoolAllocator", _EXTEND, "available_size"),
    *_methods(_ALLOC, "BaseTokenToKVPoolAllocator", _STATE, "get_kvcache"),
    *_attrs(_POOL, "KVCache", _STATE, "size", "page_size"),
    *_methods(_POOL, "MHATokenToKVPool", _STATE, "get_kv_size_bytes"),
    # -- environment knobs the testbed sets (testbed/launcher.py CPU_ENV) -------------------
    *(
        _use(CLASS_ATTR, "sglang.srt.environ", f"Envs.{name}", "testbed/launcher.py")
        for name in ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH")
    ),
    # -- KV transfer (Mooncake) -------------------------------------------------------------
    _use(
        CLASS_ATTR,
        _MOONCAKE,
        "MooncakeKVSender.supports_host_tensor_indices",
        "patches/cpu_mooncake_sender_indices.py",
    ),
    *_attrs(
        _MOONCAKE,
        "MooncakeKVManager",
        "patches/kv_transfer_queue_split.py",
        *("transfer_queues", "transfer_infos"),
    ),
    # -- KV cache events (the router decodes them as maps keyed by these field names) -------
    *_attrs(_EVENTS, "EventBatch", "router/instances/kv_events.py", "ts", "events"),
    *_attrs(
        _EVENTS,
        "BlockStored",
        _VIEW,
        *("block_hashes", "parent_block_hash", "token_ids", "block_size"),
    ),
    *_attrs(_EVENTS, "BlockRemoved", _VIEW, "block_hashes"),
    _use(CLASS, _EVENTS, "AllBlocksCleared", _VIEW),
    # -- OpenAI logprob formatting (the router) ---------------------------------------------
    _use(
        FUNCTION,
        _OPENAI,
        "to_openai_style_logprobs",
        _LOGPROBS,
        *("output_token_logprobs", "output_top_logprobs", "tokenizer"),
    ),
    _pos(FUNCTION, _OPENAI, "_is_byte_level_tokenizer", _LOGPROBS, "tokenizer"),
    _pos(FUNCTION, _OPENAI, "token_id_to_bytes", _LOGPROBS, "tokenizer", "token_id"),
    # -- OpenAI chat: SGLang's own serving code on a stand-in TokenizerManager --
    _pos(CLASS, _SERVING_CHAT, "OpenAIServingChat", _CHAT, "tokenizer_manager", "template_manager"),
    _use(METHOD, _SERVING_CHAT, "OpenAIServingChat._validate_request", _CHAT),
    _pos(
        METHOD,
        _SERVING_CHAT,
        "OpenAIServingChat._convert_to_internal_request",
        _CHAT,
        "request",
        "raw_request",
    ),
    _pos(METHOD, _SERVING_CHAT, "OpenAIServingChat._build_chat_response", _CHAT, "request", "ret"),
    _pos(
        METHOD,
        _SERVING_CHAT,
        "OpenAIServingChat._generate_chat_stream",
        _CHAT,
        "adapted_request",
        "request",
        "raw_request",
    ),
    _use(METHOD, _SERVING_CHAT, "OpenAIServingChat._tool_call_parsing_active", _CHAT),
    _use(ATTR, _SERVING_CHAT, "OpenAIServingChat.reasoning_parser", _CHAT),
    # What the stand-in (openai_chat._Manager) supplies of SGLang's TokenizerManager.
    *_attrs(
        _TM,
        "TokenizerManager",
        _CHAT,
        *("tokenizer", "model_config", "server_args", "served_model_name", "model_path"),
        "processor",
    ),
    _pos(METHOD, _TM, "TokenizerManager.config_value", _CHAT, "name"),
    _pos(METHOD, _TM, "TokenizerManager.generate_request", _CHAT, "obj"),
    _use(CLASS, "sglang.srt.parser.template_manager", "TemplateManager", _CHAT),
    _use(
        METHOD,
        "sglang.srt.parser.template_manager",
        "TemplateManager.initialize_templates",
        _CHAT,
        *("tokenizer_manager", "model_path", "chat_template"),
    ),
    _use(
        CLASS,
        _ARGS,
        "ServerArgs",
        _CHAT,
        *("model_path", "device", "tool_call_parser", "reasoning_parser"),
        "incremental_streaming_output",
    ),
    *_attrs(_ARGS, "ServerArgs", _CHAT, "weight_version", "chat_template", "served_model_name"),
    _use(METHOD, "sglang.srt.configs.model_config", "ModelConfig.from_server_args", _CHAT),
    _use(FUNCTION, _RUNTIME, "publish", _CHAT, "role"),
    _use(FUNCTION, _RUNTIME, "get_server_args", _CHAT),
    _use(FUNCTION, _RUNTIME, "get_context", _CHAT),
    _pos(METHOD, _RUNTIME, "RuntimeContext.config_leaf", _CHAT, "name"),
    *_attrs(_IO, "GenerateReqInput", _CHAT, "input_ids", "sampling_params", "require_reasoning"),
    *_attrs(_OAI, "ChatCompletionRequest", _CHAT, "stream", "separate_reasoning"),
    _use(CLASS, "sglang.srt.entrypoints.openai.encoding_dsv32", "DS32EncodingError", _CHAT),
    _use(FUNCTION, "sglang.srt.entrypoints.openai.utils", "should_include_usage", _COMPLETIONS),
    _use(
        METHOD,
        "sglang.srt.entrypoints.openai.usage_processor",
        "UsageProcessor.calculate_token_usage",
        _COMPLETIONS,
        *("prompt_tokens", "completion_tokens", "cached_tokens"),
    ),
    _use(CLASS, _OAI, "PromptTokensDetails", _COMPLETIONS, "cached_tokens"),
    # usage.reasoning_tokens: SGLang's counting on a stand-in Req (router/api/reasoning_count.py)
    _pos(
        METHOD,
        _RESULTS,
        "SchedulerBatchResultProcessor._maybe_update_reasoning_tokens",
        _REASON,
        "req",
    ),
    _pos(METHOD, _BATCH, "Req.update_reasoning_tokens", _REASON, "token_id", "think_end_ids"),
    _pos(
        METHOD,
        _BATCH,
        "Req.update_self_opened_reasoning_tokens",
        _REASON,
        *("token_id", "think_start_ids", "think_end_ids"),
    ),
    *_attrs(
        _BATCH,
        "Req",
        _REASON,
        *("require_reasoning", "reasoning_tokens", "_is_reasoning_over"),
        *("_think_end_matcher", "_think_end_match_len", "_think_start_match_len"),
    ),
    *_attrs(
        "sglang.srt.configs.model_config",
        "ModelConfig",
        _REASON,
        *("think_end_ids", "self_opened_think_start_ids"),
        "request_selectable_think_end_id_sequences",
    ),
    _use(
        CLASS, _REASONING, "ReasoningParser", _REASON, "model_type", "stream_reasoning", "tokenizer"
    ),
    *_attrs(_REASONING, "ReasoningParser", _REASON, "detector"),
    *_methods(
        _REASONING,
        "BaseReasoningFormatDetector",
        _REASON,
        *("get_think_end_token_ids", "get_self_opened_think_start_token_ids"),
    ),
)


def check_surface(entries: Iterable[Use] = SURFACE) -> list[str]:
    """Check ``entries`` (default: ``SURFACE``) against the installed SGLang.

    Returns one human-readable line per problem (a module that does not import, a missing
    class, function, method or attribute, a parameter that is gone or moved), or ``[]``.
    Call it in a process where SGLang imports (on a CPU-only machine, after
    ``sglang_pdd.cpu.activation.activate()``)."""
    problems = []
    for use in entries:
        try:
            problem = _problem(use)
        except Exception as exc:  # e.g. an import that fails inside SGLang: a finding, not a crash
            problem = f"{type(exc).__name__}: {exc}"
        if problem is not None:
            problems.append(f"{use.target} [{use.kind}, used in {use.used_in}]: {problem}")
    return problems


def _problem(use: Use) -> str | None:
    try:
        owner = importlib.import_module(use.module)
    except ImportError as exc:
        return f"module {use.module} does not import ({exc})"
    *path, name = use.name.split(".")
    for part in path:
        if not hasattr(owner, part):
            return f"{part!r} is missing"
        owner = getattr(owner, part)
    if use.kind == ATTR:
        if not isinstance(owner, type):
            return f"{owner!r} is not a class"
        return None if _has_instance_attr(owner, name) else f"no instance attribute {name!r}"
    if not hasattr(owner, name):
        return f"{name!r} is missing"
    obj = getattr(owner, name)
    if use.kind == CLASS and not isinstance(obj, type):
        return "is not a class"
    if use.kind in (FUNCTION, METHOD) and not callable(obj):
        return "is not callable"
    return _params_problem(use, owner, name, obj) if use.params else None


def _params_problem(use: Use, owner, name: str, obj) -> str | None:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError) as exc:
        return f"no signature to check ({exc})"
    params = list(signature.parameters.values())
    # Looked up on a class, a plain method still has self; classmethods come bound.
    if use.kind == METHOD and not isinstance(
        inspect.getattr_static(owner, name), (staticmethod, classmethod)
    ):
        params = params[1:]
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    named = [p.name for p in params if p.kind not in variadic]
    gone = [p for p in use.params if p not in named]
    if gone:
        return f"parameter(s) {', '.join(gone)} gone: {name}{signature}"
    if use.positional:
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        leading = [p.name for p in params if p.kind in positional][: len(use.params)]
        if leading != list(use.params):
            return f"leading parameters are no longer {', '.join(use.params)}: {name}{signature}"
    return None


def _has_instance_attr(cls: type, name: str) -> bool:
    """Whether instances of ``cls`` get ``name``: a field (dataclass, msgspec struct, class-body
    annotation) or a ``self.NAME = ...`` in the source of ``cls`` or one of its bases."""
    for klass in inspect.getmro(cls):
        if name in klass.__dict__.get("__annotations__", {}):
            return True
        if name in getattr(klass, "__struct_fields__", ()):  # msgspec, also built dynamically
            return True
        if name in getattr(klass, "__dataclass_fields__", {}):
            return True
        if isinstance(klass.__dict__.get(name), property):
            return True
        if name in _self_assigned(klass):
            return True
    return False


@functools.cache
def _self_assigned(klass: type) -> frozenset[str]:
    """Names assigned as ``self.NAME = ...`` / ``self.NAME: T = ...`` in ``klass``'s source."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # builtins, C extensions, classes made at run time
        return frozenset()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for leaf in _leaves(target):
                if (
                    isinstance(leaf, ast.Attribute)
                    and isinstance(leaf.value, ast.Name)
                    and leaf.value.id == "self"
                ):
                    names.add(leaf.attr)
    return frozenset(names)


def _leaves(target: ast.expr):
    """The assigned expressions of one target (``self.a, self.b = ...`` has two)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _leaves(element)
    elif isinstance(target, ast.Starred):
        yield from _leaves(target.value)
    else:
        yield target
