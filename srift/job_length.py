"""How long a job trains (``JobLength``: steps, epochs, samples or tokens) and what one run of it
takes on a configuration (``JobRun``: steps, hours, cost).

``srift.job`` re-exports these names.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from srift.bounds import MAX_DATASET_SIZE, MAX_EPOCHS, MAX_SAMPLES, MAX_SEQ_LEN, MAX_STEPS, MAX_TOKENS, require
from srift.errors import SriftError


@dataclass(frozen=True)
class JobLength:
    """How long the job trains, in one of the units people think in.

    * ``epochs`` over ``dataset_size`` samples, ``samples`` or ``tokens`` (sequence models: tokens
      = samples x sequence length): a fixed amount of data, so more GPUs mean fewer steps;
    * ``steps`` iterations: the data a step takes grows with the GPU count unless the global batch
      is fixed, so a search needs ``--global-batch-size`` with it (``srift.search.limits``).

    ``seq_len`` (tokens per sample) is set by ``with_seq_len`` once the job's sequence length is
    known; a ``tokens`` length needs it before it can count steps.

    Raises:
        SriftError: for no form or several at once, an epoch count without a dataset size (or the
            reverse), or a non-positive number.
    """

    steps: int | None = None
    epochs: float | None = None
    dataset_size: int | None = None
    samples: int | None = None
    tokens: int | None = None
    seq_len: int | None = None

    def __post_init__(self) -> None:
        if (self.epochs is None) != (self.dataset_size is None):
            raise SriftError("epochs and a dataset size go together.",
                             "give both (--epochs E --dataset-size N), or give --samples N, --tokens N or --steps N instead.")
        forms = [name for name, on in (("steps", self.steps is not None), ("epochs", self.epochs is not None),
                                       ("samples", self.samples is not None), ("tokens", self.tokens is not None)) if on]
        if len(forms) > 1:
            raise SriftError(f"the job's length is given more than once: as {' and as '.join(forms)}.",
                             "give one of steps, epochs with a dataset size, samples or tokens.")
        if not forms:
            raise SriftError("the job's length is missing.", "give steps, epochs with a dataset size, samples or tokens.")
        for flag, count, high in (("steps", self.steps, MAX_STEPS), ("dataset-size", self.dataset_size, MAX_DATASET_SIZE),
                                  ("samples", self.samples, MAX_SAMPLES), ("tokens", self.tokens, MAX_TOKENS),
                                  ("seq-len", self.seq_len, MAX_SEQ_LEN)):
            if count is not None:
                require(count, f"--{flag}", 1, high, integer=True, hint=f"pass --{flag} from 1 to {high:,}.")
        if self.epochs is not None:
            require(self.epochs, "--epochs", 0, MAX_EPOCHS, low_open=True, hint=f"pass --epochs above 0 and at most {MAX_EPOCHS:,.0f}.")

    @classmethod
    def given(cls, steps: int | None = None, epochs: float | None = None, dataset_size: int | None = None,
              samples: int | None = None, tokens: int | None = None) -> "JobLength | None":
        """The length these options give, or None when none of them is set."""
        if all(v is None for v in (steps, epochs, dataset_size, samples, tokens)):
            return None
        return cls(steps, epochs, dataset_size, samples, tokens)

    def with_seq_len(self, seq_len: int | None) -> "JobLength":
        """The same length, knowing the job's tokens per sample (needed by a ``tokens`` length).

        Raises:
            SriftError: for a ``tokens`` length and a model without a sequence length.
        """
        if self.tokens is not None and seq_len is None:
            raise SriftError("--tokens counts tokens, but this model has no sequence length.",
                             "give the length as --samples N or --epochs E --dataset-size N for this model.")
        return self if seq_len == self.seq_len else dataclasses.replace(self, seq_len=seq_len)

    @property
    def fixed_data(self) -> bool:
        """True when the length is an amount of data (epochs, samples, tokens), not a step count."""
        return self.steps is None

    @property
    def data_samples(self) -> int | None:
        """Samples the length names when it is an amount of data (tokens rounded up to whole
        samples), None for a step count: the least data any configuration trains on."""
        if self.epochs is not None and self.dataset_size is not None:
            return math.ceil(self.epochs * self.dataset_size)
        if self.samples is not None:
            return self.samples
        if self.tokens is not None:
            if self.seq_len is None:
                raise SriftError("a length in tokens needs the sequence length.", "give --seq-len, or the length in samples.")
            return math.ceil(self.tokens / self.seq_len)
        return None

    def steps_for(self, global_batch_size: int) -> float:
        """Iterations of the whole job at this global batch.

        An epoch's last batch may be partial (it still takes one iteration), so epochs take
        ``epochs x ceil(dataset_size / global batch)`` iterations; samples and tokens take
        ``ceil(samples / global batch)``.
        """
        if self.steps is not None:
            return float(self.steps)
        if self.epochs is not None and self.dataset_size is not None:
            return self.epochs * math.ceil(self.dataset_size / global_batch_size)
        samples = self.data_samples
        assert samples is not None
        return float(math.ceil(samples / global_batch_size))

    def describe(self) -> str:
        """``90 epochs of 1,281,167 samples``, ``1e+09 tokens``, ``20,000 steps``: for headers."""
        if self.steps is not None:
            return f"{self.steps:,} steps"
        if self.epochs is not None:
            return f"{self.epochs:g} epochs of {self.dataset_size:,} samples"
        if self.samples is not None:
            return f"{self.samples:,} samples"
        return f"{self.tokens:,} tokens" + (f" ({self.data_samples:,} samples of {self.seq_len:,})" if self.seq_len else "")


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
