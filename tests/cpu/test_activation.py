"""When the sgl_kernel stand-in switches on, and what it does for ops it does not implement."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from sglang_pdd.cpu import activation
from sglang_pdd.cpu.unsupported import UnsupportedOp, feature_of


def _run(code: str, env: dict[str, str], extra_path: str | None = None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG", "PYTHONPATH"))}
    full_env.update(env)
    if extra_path:
        full_env["PYTHONPATH"] = extra_path
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


CHECK = """
    from sglang_pdd.cpu import activation
    print("ACTIVE" if activation.activate() else "INACTIVE")
    import sgl_kernel
    print(getattr(sgl_kernel, "IS_SGLANG_PDD_STANDIN", False))
"""


def test_switch_is_off_where_a_working_sgl_kernel_loads(tmp_path):
    # A machine where sgl_kernel imports cleanly, as the native CPU/GPU builds do.
    pkg = tmp_path / "sgl_kernel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("LOADED_NATIVE = True\n")
    result = _run(CHECK, {"SGLANG_USE_CPU_ENGINE": "1"}, extra_path=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["INACTIVE", "False"]


def test_switch_is_off_without_the_cpu_engine(tmp_path):
    result = _run("from sglang_pdd.cpu import activation; print(activation.activate())", {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_switch_is_on_where_sgl_kernel_cannot_load(tmp_path):
    pkg = tmp_path / "sgl_kernel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('Could not load any common_ops library')\n")
    result = _run(CHECK, {"SGLANG_USE_CPU_ENGINE": "1"}, extra_path=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ACTIVE", "True"]


def test_unsupported_op_raises_naming_op_and_feature():
    op = UnsupportedOp("sgl_kernel.verify_tree_greedy_cpu")
    with pytest.raises(NotImplementedError, match="verify_tree_greedy_cpu.*speculative decoding"):
        op()
    assert "mixture-of-experts" in feature_of("fused_experts_cpu")


def test_standin_package_serves_implemented_and_placeholder_names(tmp_path):
    code = """
        import sys
        from sglang_pdd.cpu import activation
        sys.path.insert(0, activation.SHIM_DIR)
        import sgl_kernel
        from sgl_kernel.kvcacheio import copy_all_layer_kv_cache_cpu
        from sglang_pdd.cpu import ops
        assert copy_all_layer_kv_cache_cpu is ops.copy_all_layer_kv_cache_cpu
        try:
            sgl_kernel.build_tree_kernel_efficient_cpu()
        except NotImplementedError as exc:
            print("RAISED", "speculative" in str(exc))
        try:
            import sgl_kernel.flash_attn
        except ImportError:
            print("MISSING")
    """
    result = _run(code, {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["RAISED", "True", "MISSING"]


def test_bad_force_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(activation.FORCE_ENV, "maybe")
    with pytest.raises(ValueError, match="SGLANG_PDD_CPU_KERNELS"):
        activation.should_activate()
