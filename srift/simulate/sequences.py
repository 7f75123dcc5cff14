"""Sequences as fine-tuning recipes feed them: packed to the sequence length, or padded per batch.

Pure arithmetic (no torch). A dataset's samples are shorter than ``--seq-len`` (the recipe's
``max_seq_len``, where longer samples are truncated). Recipes feed them one of two ways:

- **packed** (``--packed``: torchtune's ``packed: True``, TRL's ``packing=True``, XTuner's packed
  datasets): samples are concatenated into sequences of exactly ``--seq-len`` tokens. Every step
  computes ``--seq-len`` tokens per sample, all of them real (the padding of a pack's tail is
  ignored); attention is priced over the whole pack (a document mask that skips attention across
  samples, flex or variable-length attention, would cost less: not modelled).
- **padded** (the default with a length distribution: torchtune's ``padded_collate_sft``, Hugging
  Face's ``DataCollatorForSeq2Seq`` and ``DataCollatorWithPadding``, which pad to the longest sample
  of the batch): a micro-batch of ``B`` samples computes ``B x L_B`` tokens, ``L_B`` its longest
  sample. srift prices a step at the expected ``L_B`` (``expected_longest``: from the lengths of a
  ``--lengths-file``; with ``--mean-seq-len`` alone ``L_1`` is the mean and for ``B`` > 1 the
  distribution is unknown, so ``--seq-len`` bounds it), linear in the length, which slightly
  underestimates attention's quadratic part. Memory is sized at the longest micro-batch the data
  can make (a file's longest sample, else ``--seq-len``): a run must survive its worst batch.

Tokens per second count real tokens, not padding: samples per second x the mean sample length
(torchtune's ``tokens_per_second_per_gpu`` counts the tokens whose label is not
``ignore_index``, recipes/full_finetune_single_device.py, 0.6.1; under packing every token of a pack).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from srift.bounds import ascii_integer
from srift.errors import SriftError

MAX_LENGTHS_FILE_BYTES = 64 * 2**20  # a lengths file is a list of integers, not a dataset


@dataclass(frozen=True)
class Sequences:
    """How a job's samples fill its sequences (module docstring).

    Attributes:
        cap: ``--seq-len``: the longest sample (truncation) and the pack length.
        packed: Samples packed to ``cap``.
        lengths: The samples' lengths (capped), sorted, or None when only the mean is known.
        mean: The mean sample length (capped).
    """

    cap: int
    packed: bool
    lengths: np.ndarray | None
    mean: float

    def step_len(self, batch: int) -> int:
        """Tokens per sample a micro-batch of ``batch`` computes: ``cap`` packed, else the expected
        longest sample of the batch (``cap`` when the distribution is unknown and ``batch`` > 1)."""
        if self.packed:
            return self.cap
        if self.lengths is not None:
            return max(1, int(round(expected_longest(self.lengths, batch))))
        return max(1, int(round(self.mean))) if batch == 1 else self.cap

    @property
    def peak_len(self) -> int:
        """Tokens per sample of the longest micro-batch (memory)."""
        if self.packed or self.lengths is None:
            return self.cap
        return int(self.lengths[-1])

    @property
    def tokens_per_sample(self) -> float:
        """Real tokens per sample, as tokens/s counts them."""
        return float(self.cap) if self.packed else self.mean

    def describe(self, batch: int) -> str:
        """One line for a prediction's notes."""
        if self.packed:
            return f"sequences packed to {self.cap:,} tokens: every token counted"
        what = (f"the expected longest of {batch} samples of the lengths file" if self.lengths is not None
                else ("the mean sample" if batch == 1 else f"--seq-len (the lengths of {batch} samples are unknown: "
                                                           "a bound; --lengths-file gives them)"))
        return (f"padded per batch: a step computes {self.step_len(batch):,} tokens per sample ({what}), memory at "
                f"{self.peak_len:,}; tokens/s counts the {self.mean:,.0f} real tokens of a mean sample")


def expected_longest(sorted_lengths: np.ndarray, batch: int) -> float:
    """The expected longest of ``batch`` samples drawn from ``sorted_lengths`` (with replacement):
    ``sum_k l_k ((k/n)^B - ((k-1)/n)^B)``."""
    n = len(sorted_lengths)
    k = np.arange(1, n + 1, dtype=float)
    weights = (k / n) ** batch - ((k - 1) / n) ** batch
    return float(np.dot(sorted_lengths, weights))


def read_lengths(path: str, cap: int) -> np.ndarray:
    """Sample lengths from a text file (integers separated by whitespace or commas), capped at ``cap``, sorted.

    Raises:
        SriftError: for a missing, oversized or empty file, or a value that is not a positive integer.
    """
    p = Path(path)
    fix = "give a text file of sample lengths in tokens, one positive integer per line."
    if not p.is_file():
        raise SriftError(f"lengths file {path!r} does not exist.", fix)
    if p.stat().st_size > MAX_LENGTHS_FILE_BYTES:
        raise SriftError(f"lengths file {path!r} is larger than {MAX_LENGTHS_FILE_BYTES // 2**20} MiB.", fix)
    words = p.read_text(encoding="utf-8", errors="replace").replace(",", " ").split()
    if not words:
        raise SriftError(f"lengths file {path!r} has no lengths.", fix)
    lengths = [ascii_integer(w) for w in words]
    bad = next((w for w, n in zip(words, lengths) if not n), None)  # None (not ASCII digits) or 0
    if bad is not None:
        raise SriftError(f"lengths file {path!r} has {bad[:20]!r}, not a positive integer (digits 0-9).", fix)
    return np.sort(np.minimum(np.array(lengths, dtype=float), cap))


def sequences_of(cap: int | None, mean_seq_len: int | None, lengths_file: str | None, packed: bool) -> Sequences | None:
    """The job's ``Sequences``, or None when every sample is ``cap`` tokens (no length given).

    Raises:
        SriftError: for a length without a sequence length to cap it, or a bad lengths file.
    """
    if mean_seq_len is None and lengths_file is None:
        return None
    if cap is None:
        raise SriftError("--mean-seq-len and --lengths-file describe a sequence model's samples; this job has no "
                         "sequence length.", "pass --seq-len (a decoder LLM), or drop them.")
    if lengths_file is not None:
        lengths = read_lengths(lengths_file, cap)
        return Sequences(cap, packed, lengths, float(lengths.mean()))
    assert mean_seq_len is not None
    return Sequences(cap, packed, None, float(min(mean_seq_len, cap)))
