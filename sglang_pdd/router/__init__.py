"""The PDD router: one SGLang-compatible HTTP front for Prefill, Relay-Decode and Main-Decode."""
