"""Which accelerator each testbed server emulates: datacenter A's chip (P, RLD, same-DC PD's
decode server) and datacenter B's (MD, cross-DC PD's decode server), as ``--pdd-*`` flags."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChipEmulation:
    """The emulated chips of a testbed (``sglang_pdd.emulation``); the defaults are the
    brief's: chip A in datacenter A, the decode-strong chip B in datacenter B, 8 chips per
    instance, the simulator's model."""

    chip_a: str = "A"
    chip_b: str = "B"
    chips: int = 8
    token_scale: int = 1
    time_dilation: float = 1.0
    model_file: str = ""

    def __post_init__(self) -> None:
        for datacenter in ("A", "B"):  # refuses bad values, naming the flag
            self.config(datacenter)

    def config(self, datacenter: str):
        """The ``EmulationConfig`` a server in ``datacenter`` ("A" or "B") runs with."""
        from sglang_pdd.config import PddServerConfig

        return PddServerConfig(
            emulate_chip=self._chip(datacenter),
            emulate_chips=self.chips,
            token_scale=self.token_scale,
            time_dilation=self.time_dilation,
            emulate_model=self.model_file,
        ).emulation

    def kv_bytes_per_token(self) -> int:
        """The emulated model's KV bytes per testbed token (``token_scale`` model tokens): what
        each testbed token puts on a link, and what the PDD router must estimate with."""
        return round(self.config("A").model_kv_bytes(1))

    def _chip(self, datacenter: str) -> str:
        if datacenter not in ("A", "B"):
            raise ValueError(f"datacenter must be A or B, got {datacenter!r}")
        return self.chip_a if datacenter == "A" else self.chip_b

    def server_args(self, datacenter: str) -> tuple[str, ...]:
        """The ``launch_server`` flags of a server in ``datacenter`` ("A" or "B")."""
        chip = self._chip(datacenter)
        args = (
            "--pdd-emulate-chip",
            chip,
            "--pdd-emulate-chips",
            str(self.chips),
            "--pdd-token-scale",
            str(self.token_scale),
            "--pdd-time-dilation",
            str(self.time_dilation),
        )
        return args + (("--pdd-emulate-model", self.model_file) if self.model_file else ())
