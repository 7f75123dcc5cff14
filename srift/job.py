"""Job: how a profile is trained (batch, sequence length, precision, optimizer)."""

from __future__ import annotations

from dataclasses import dataclass

from srift.errors import SriftError
from srift.profile import PRECISIONS

OPTIMIZERS = ("sgd", "kfac")
KFAC_STRATEGIES = ("naive", "mpd", "spd")


@dataclass(frozen=True)
class Job:
    """Training settings applied to a profile.

    Attributes:
        batch_size: Per-GPU batch of the fastest GPU (None: the profile's).
        seq_len: Sequence length (None: the profile's).
        precision: fp32, tf32 or amp (None: the profile's).
        optimizer: ``sgd`` (any first-order optimizer) or ``kfac``.
        global_batch_size: Fix the global batch across GPU counts (None: batch_size x GPUs).
        kfac_strategy: naive, mpd or spd (K-FAC only).
        kfac_factor_steps: Factor update interval in iterations (K-FAC only).
        kfac_inv_steps: Inverse update interval in iterations (K-FAC only).
    """

    batch_size: int | None = None
    seq_len: int | None = None
    precision: str | None = None
    optimizer: str = "sgd"
    global_batch_size: int | None = None
    kfac_strategy: str = "spd"
    kfac_factor_steps: int = 1
    kfac_inv_steps: int = 1

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "global_batch_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise SriftError(f"{name.replace('_', '-')} must be at least 1, got {v}.", f"pass --{name.replace('_', '-')} 1 or more.")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise SriftError(f"unknown precision '{self.precision}'.", f"use one of {', '.join(PRECISIONS)}.")
        if self.optimizer not in OPTIMIZERS:
            raise SriftError(f"unknown optimizer '{self.optimizer}'.", f"use one of {', '.join(OPTIMIZERS)}.")
        if self.kfac_strategy not in KFAC_STRATEGIES:
            raise SriftError(f"unknown K-FAC strategy '{self.kfac_strategy}'.", f"use one of {', '.join(KFAC_STRATEGIES)}.")
        if self.kfac_factor_steps < 1 or self.kfac_inv_steps < 1:
            raise SriftError("K-FAC update intervals must be at least 1.", "pass --kfac-factor-steps/--kfac-inv-steps 1 or more.")
        if self.kfac_inv_steps % self.kfac_factor_steps:
            raise SriftError(
                f"--kfac-inv-steps {self.kfac_inv_steps} is not a multiple of --kfac-factor-steps {self.kfac_factor_steps}.",
                "make the inverse interval a multiple of the factor interval.",
            )
