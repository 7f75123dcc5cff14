"""How large a global batch stays statistically efficient: the per-family defaults of
``--max-global-batch``, from published large-batch results, and the gradient-accumulation
choices a search tries within a fixed global batch.

A larger cluster at a fixed per-GPU batch trains a larger global batch; past a model family's
published limit, more samples are needed to reach the same accuracy (statistical efficiency falls),
so throughput in samples/s overstates progress. srift does not model that loss: it keeps the search
within the limit (fewer GPUs) and says so. Defaults (``default_max_global_batch``):

* image classifiers: 8,192 images, Goyal et al. 2017 ("Accurate, Large Minibatch SGD: Training
  ImageNet in 1 Hour": ResNet-50 matched its small-batch accuracy up to 8k, and lost accuracy beyond);
* sequence models with a sequence length (decoder LLMs, GPT-2, BERT, a profile with ``seq_len``):
  4,194,304 tokens per step (Llama 2's published 4M-token batch, Touvron et al. 2023; GPT-3 175B
  used 3.2M, Brown et al. 2020), as sequences of the job's length.

Within a fixed global batch, gradient accumulation (micro-batches per optimizer step) changes how
fast a step runs but not what it computes, so the search tries ``ACCUMULATION_CHOICES``.
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGE_MAX_GLOBAL_BATCH = 8192
IMAGE_SOURCE = "image classifiers: Goyal et al. 2017 trained ResNet-50 to 8,192 without loss"
MAX_TOKENS_PER_STEP = 4_194_304
TOKENS_SOURCE = "LLMs: Llama 2 trained at 4M tokens per step (Touvron et al. 2023; GPT-3: 3.2M)"
#: Micro-batches per optimizer step a search tries when the global batch is fixed.
ACCUMULATION_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True)
class GlobalBatchLimit:
    """The largest global batch a search keeps to.

    Attributes:
        samples: Largest global batch, in samples (sequences for a sequence model).
        basis: Where it comes from (the flag, or the published result of the family).
    """

    samples: int
    basis: str


def default_max_global_batch(seq_len: int | None) -> GlobalBatchLimit:
    """The family default (module docstring): 8,192 images, or 4M tokens as sequences of ``seq_len``."""
    if seq_len:
        return GlobalBatchLimit(max(1, MAX_TOKENS_PER_STEP // seq_len), f"{TOKENS_SOURCE}, at sequence length {seq_len:,}")
    return GlobalBatchLimit(IMAGE_MAX_GLOBAL_BATCH, IMAGE_SOURCE)


def accumulation_choices(global_batch_size: int | None, grad_accum: int) -> tuple[int, ...]:
    """The micro-batches per step to search: ``ACCUMULATION_CHOICES`` that divide a fixed global
    batch when the user left ``--grad-accum`` at 1; else just ``grad_accum`` (the global batch
    would change with it, or the user fixed it)."""
    if global_batch_size is None or grad_accum != 1:
        return (grad_accum,)
    return tuple(n for n in ACCUMULATION_CHOICES if global_batch_size % n == 0)
