"""``KFACStrategy``: how ``KFACPreconditioner`` distributes its work, with the settings of that
strategy's communication planner (no torch import: the settings can be built and checked anywhere)."""

from __future__ import annotations

from dataclasses import dataclass

from srift.job import SPD, KFAC_STRATEGIES as STRATEGIES, KfacStrategy
from srift.kfac.schedule import FUSION_BUFFER_BYTES


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class KFACStrategy:
    """A distribution strategy of ``KFACPreconditioner`` (its ``strategy=``; a plain name takes
    these defaults).

    Attributes:
        name: ``naive``, ``mpd`` or ``spd`` (srift/kfac/preconditioner.py's docstring).
        fusion_buffer_bytes: ``naive``/``mpd``: the fixed fusion buffer of the factor all-reduces.
        fusion_profile_steps: ``spd``: factor steps timed before the fusion groups are planned.
        comm_alpha_s: ``spd``: all-reduce/broadcast latency for the planner (None: measured).
        comm_beta_s_per_byte: ``spd``: seconds per byte for the planner (None: measured).
        inv_flops_per_s: ``spd``: inversion speed for the placement, d^3 per second (None: measured).
        local_below: ``spd``: invert every factor smaller than this on every worker and place the
            others, whatever they cost (the SPD-KFAC code's fixed ``D_TH``, e.g. 1400); 0 (default):
            keep a factor local only when inverting it is cheaper than broadcasting its inverse.

    Raises:
        ValueError: for a setting out of its range (checked on construction).
    """

    name: KfacStrategy = SPD
    fusion_buffer_bytes: int = FUSION_BUFFER_BYTES
    fusion_profile_steps: int = 3
    comm_alpha_s: float | None = None
    comm_beta_s_per_byte: float | None = None
    inv_flops_per_s: float | None = None
    local_below: int = 0

    def __post_init__(self) -> None:
        if self.name not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.name!r}")
        if not _is_int(self.fusion_profile_steps) or self.fusion_profile_steps < 1:
            raise ValueError(f"fusion_profile_steps must be an integer >= 1, got {self.fusion_profile_steps!r}")
        if not _is_int(self.fusion_buffer_bytes) or self.fusion_buffer_bytes < 1:
            raise ValueError(f"fusion_buffer_bytes must be a positive integer, got {self.fusion_buffer_bytes!r}")
        for name, v in (("comm_alpha_s", self.comm_alpha_s), ("comm_beta_s_per_byte", self.comm_beta_s_per_byte)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0):
                raise ValueError(f"{name} must be a non-negative number or None, got {v!r}")
        rate = self.inv_flops_per_s
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0):
            raise ValueError(f"inv_flops_per_s must be a positive number or None, got {rate!r}")
        if not _is_int(self.local_below) or self.local_below < 0:
            raise ValueError(f"local_below must be an integer >= 0, got {self.local_below!r}")

    @classmethod
    def of(cls, strategy: "KfacStrategy | KFACStrategy") -> "KFACStrategy":
        """``strategy`` as a KFACStrategy (a name with the defaults)."""
        return strategy if isinstance(strategy, KFACStrategy) else cls(strategy)
