"""sglang-pdd: cross-datacenter Prefill / Relay-Decode / Main-Decode serving for SGLang."""

__version__ = "0.1.0"
