"""Emulated accelerators: real SGLang servers on the CPU whose forwards take a chip's time.

Every forward still runs for real on the CPU (every output token is the real model's); the
scheduler then waits until the emulated chip would have finished the same batch
(``patches/emulated_forward.py``). The duration comes from the simulator's step-time model
(``sglang_pdd.sim.chips.InstancePerf.forward_time``): one function for the simulator and the
servers. KV sent by an emulated Prefill is charged on its links at the emulated model's size
(``kv_scale``). ``--pdd-token-scale`` lets one testbed token stand for several model tokens and
``--pdd-time-dilation`` stretches every emulated duration (docs/testbed.md says what each
distorts).
"""
