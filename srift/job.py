"""Job: how a profile is trained (batch, sequence length, precision, optimizer, length), the
vocabularies of those settings, and what one run of the job takes on a configuration.

This is the one place job settings are validated: the command line and the job file
(srift/jobfile.py) both build a Job; the search's limits (srift/search/limits.py) hold only limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from srift.errors import SriftError

# fp32 means what PyTorch does by default: on GPUs with TF32 units (Ampere and newer) cuDNN runs
# convolutions in TF32 (torch.backends.cudnn.allow_tf32 defaults to True) while matmuls stay in
# FP32 (torch.backends.cuda.matmul.allow_tf32 defaults to False since PyTorch 1.12);
# fp32-strict turns TF32 off everywhere; tf32 allows it for both (srift/perf/compute.py).
PRECISIONS = ("fp32", "fp32-strict", "tf32", "amp")
# Where the training batches come from (srift/perf/input.py): tensors already on the GPU, JPEGs
# decoded and augmented on the vCPUs, or pre-tokenized text.
DATA_LOADING = ("synthetic", "images", "tokens")
OPTIMIZERS = ("sgd", "kfac")
KFAC_STRATEGIES = ("naive", "mpd", "spd")


def require_precision(precision: str) -> str:
    """``precision`` when it is one of PRECISIONS.

    Raises:
        SriftError: for any other name.
    """
    if precision not in PRECISIONS:
        raise SriftError(f"unknown precision '{precision}'.", f"use one of {', '.join(PRECISIONS)}.")
    return precision


@dataclass(frozen=True)
class JobLength:
    """How long the job trains: ``steps`` iterations, or ``epochs`` over ``dataset_size`` samples.

    Raises:
        SriftError: for both forms at once, an epoch count without a dataset size (or the
            reverse), or a non-positive number.
    """

    steps: int | None = None
    epochs: float | None = None
    dataset_size: int | None = None

    def __post_init__(self) -> None:
        if self.steps is not None and (self.epochs is not None or self.dataset_size is not None):
            raise SriftError("the job's length is given twice: as steps and as epochs.",
                             "give steps, or epochs with a dataset size; not both.")
        if (self.epochs is None) != (self.dataset_size is None):
            raise SriftError("epochs and a dataset size go together.", "give both, or give steps instead.")
        if self.steps is None and self.epochs is None:
            raise SriftError("the job's length is missing.", "give steps, or epochs with a dataset size.")
        for flag, count in (("steps", self.steps), ("dataset-size", self.dataset_size)):
            if count is not None and count < 1:
                raise SriftError(f"{flag} must be at least 1, got {count}.", f"pass --{flag} 1 or more.")
        if self.epochs is not None and not self.epochs > 0:
            raise SriftError(f"epochs must be positive, got {self.epochs}.", "pass a positive --epochs.")

    @classmethod
    def given(cls, steps: int | None = None, epochs: float | None = None,
              dataset_size: int | None = None) -> "JobLength | None":
        """The length these options give, or None when none of them is set."""
        if steps is None and epochs is None and dataset_size is None:
            return None
        return cls(steps, epochs, dataset_size)

    def steps_for(self, global_batch_size: int) -> float:
        """Iterations of the whole job at this global batch (an epoch's last batch may be partial)."""
        if self.steps is not None:
            return float(self.steps)
        return self.epochs * math.ceil(self.dataset_size / global_batch_size)  # type: ignore[operator]


def usd_per_million_samples(usd_per_hour: float | None, samples_per_s: float) -> float | None:
    """What a million samples cost at this price and throughput (None when unpriced or stalled)."""
    if usd_per_hour is None or samples_per_s <= 0:
        return None
    return usd_per_hour / (samples_per_s * 3600.0) * 1e6


@dataclass(frozen=True)
class JobRun:
    """One run of a job of known length on one configuration.

    Attributes:
        steps: Iterations of the whole job.
        hours: Wall-clock hours at the expected throughput (spot interruptions included).
        cost_usd: Dollars for those hours (None when the configuration is unpriced).
    """

    steps: float
    hours: float
    cost_usd: float | None

    @classmethod
    def estimate(cls, length: JobLength, global_batch_size: int, samples_per_s: float,
                 usd_per_hour: float | None) -> "JobRun":
        """Steps, hours and cost of ``length`` at this global batch, throughput and price."""
        steps = length.steps_for(global_batch_size)
        hours = steps * global_batch_size / max(samples_per_s, 1e-12) / 3600.0
        return cls(steps, hours, None if usd_per_hour is None else hours * usd_per_hour)


@dataclass(frozen=True)
class Job:
    """Training settings applied to a profile.

    Attributes:
        batch_size: Per-GPU batch of the fastest GPU (None: the profile's).
        seq_len: Sequence length (None: the profile's).
        precision: One of PRECISIONS (None: the profile's).
        optimizer: ``sgd`` (any first-order optimizer) or ``kfac``.
        global_batch_size: Fix the global batch across GPU counts (None: batch_size x GPUs).
        kfac_strategy: One of KFAC_STRATEGIES (K-FAC only).
        kfac_factor_steps: Factor update interval in iterations (K-FAC only).
        kfac_inv_steps: Inverse update interval in iterations (K-FAC only).
        length: How long the job trains (None: unknown; then no job hours or cost).
        data_loading: One of DATA_LOADING (None: ``images`` for image models, ``tokens`` for
            sequence models, or a measured profile's own data time).

    Raises:
        SriftError: for a setting out of its vocabulary or range.
    """

    batch_size: int | None = None
    seq_len: int | None = None
    precision: str | None = None
    optimizer: str = "sgd"
    global_batch_size: int | None = None
    kfac_strategy: str = "spd"
    kfac_factor_steps: int = 1
    kfac_inv_steps: int = 1
    length: JobLength | None = None
    data_loading: str | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "global_batch_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise SriftError(f"{name.replace('_', '-')} must be at least 1, got {v}.", f"pass --{name.replace('_', '-')} 1 or more.")
        if self.precision is not None:
            require_precision(self.precision)
        if self.data_loading is not None and self.data_loading not in DATA_LOADING:
            raise SriftError(f"unknown data loading '{self.data_loading}'.", f"use one of {', '.join(DATA_LOADING)}.")
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

    @property
    def kfac(self) -> bool:
        return self.optimizer == "kfac"

