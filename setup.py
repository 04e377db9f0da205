"""Packaging for sglang-pdd: a PDD (Prefill / Relay-Decode / Main-Decode) plugin for SGLang."""

from setuptools import find_packages, setup

setup(
    name="sglang-pdd",
    version="0.1.0",
    description="Cross-datacenter Prefill / Relay-Decode / Main-Decode serving as an SGLang plugin",
    python_requires=">=3.10",
    # The top-level ``patches/`` folder holds one module per patched SGLang target; it installs
    # as ``sglang_pdd.patches`` so the record stays visible at the repository root.
    packages=find_packages(include=["sglang_pdd", "sglang_pdd.*"]) + ["sglang_pdd.patches"],
    package_dir={"sglang_pdd.patches": "patches"},
    package_data={"sglang_pdd": ["cpu/shim/sgl_kernel/*.py", "py.typed"]},
    # No Mooncake here: a GPU SGLang environment already has its own (mooncake-transfer-engine,
    # which SGLang's PD needs), and a second wheel would shadow it. The CPU-only wheel is the
    # ``cpu`` extra, which the README's commands and CI install.
    install_requires=[
        "sglang==0.5.23",
        "torch",
        "pyzmq",
        "msgspec",
        "simpy",
        "pyyaml",
        "orjson",
        "uvloop",
    ],
    extras_require={
        "cpu": ["mooncake-transfer-engine-non-cuda"],
        "test": ["pytest", "pytest-timeout", "hypothesis", "ruff", "kubernetes-validate"],
        "plot": ["matplotlib"],
    },
    entry_points={
        "sglang.srt.plugins": ["sglang_pdd = sglang_pdd.plugin:register"],
        "console_scripts": ["sglang-pdd = sglang_pdd.cli:main"],
    },
)
