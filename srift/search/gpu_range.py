"""How many GPUs a layout search of a decoder LLM tries when ``--max-gpus`` is not given.

Data parallelism alone stops at the global batch; a layout (TP x PP x CP x DP) does not, so
`srift recommend` bounds the cluster from the job itself:

* **memory floor**: every parameter's 16 bytes (bf16 weight and gradient, fp32 master and Adam
  moments) must be spread over the GPUs, on the GPU with the most memory searched;
* **with a deadline**: the model FLOPs the job needs per second, ``tokens x FLOPs per token /
  deadline``. Fewer GPUs than at the fastest GPU's full peak (MFU 1) cannot meet it, whatever
  the layout; the most worth searching meet it at LOW_MFU on the slowest, or hold twice the
  training states on the GPU with the least memory (the larger, rounded up to a power of two).
  ``gpus_floor`` is the same bound for one GPU type: the search leaves out the counts
  below it without simulating them;
* **without one**: twice the memory floor of the GPU with the least memory searched.

The largest count is at least DEFAULT_MAX_GPUS (recommend's default for other jobs) and at most
MAX_LAYOUT_GPUS (the search's cost grows with it; ``--max-gpus`` goes to MAX_SEARCH_GPUS).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from srift.bounds import MAX_SEARCH_GPUS
from srift.search.limits import DEFAULT_MAX_GPUS

# Estimated: below what a layout on commodity networking reaches in srift's own predictions (the
# NeMo/Megatron-Core H100 runs of data/llm-parallel-layouts reach 0.3 to 0.5).
LOW_MFU = 0.25
MAX_LAYOUT_GPUS = 1024
TRAINING_STATE_BYTES_PER_PARAM = 16.0  # bf16 weight + bf16 gradient + fp32 master + two fp32 Adam moments


@dataclass(frozen=True)
class GpuRange:
    """The cluster sizes a layout search covers.

    Attributes:
        min_gpus: Fewer GPUs cannot hold the model or meet the deadline (estimated; the search
            still tries them: the bound discards them cheaply).
        max_gpus: The largest cluster searched.
        basis: How they were derived, for the output.
    """

    min_gpus: int
    max_gpus: int
    basis: str


def _pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, n))))


def needed_flops_per_s(tokens: float, flops_per_token: float, deadline_hours: float) -> float:
    """Model FLOP/s a job of ``tokens`` needs to finish within ``deadline_hours``."""
    return tokens * flops_per_token / (deadline_hours * 3600.0)


def gpus_floor(params: float, peak_flops: float, usable_memory_bytes: float, need_flops_per_s: float | None) -> int:
    """The fewest GPUs of one type that can hold a model's training states and (``need_flops_per_s``
    given) deliver that rate at their full peak: a bound no layout beats."""
    floor = math.ceil(params * TRAINING_STATE_BYTES_PER_PARAM / usable_memory_bytes)
    if need_flops_per_s is not None:
        floor = max(floor, math.ceil(need_flops_per_s / peak_flops))
    return floor


def layout_gpu_range(params: float, flops_per_token: float, peaks_flops: Sequence[float],
                     usable_memory_bytes: Sequence[float], tokens: float | None = None,
                     deadline_hours: float | None = None) -> GpuRange:
    """The GPU counts to search (module docstring) for a model of ``params`` parameters and
    ``flops_per_token`` training FLOPs per token, over GPUs of the given peaks and usable memory.

    Raises:
        ValueError: for no GPUs, or a non-positive model size or rate.
    """
    if not peaks_flops or not usable_memory_bytes:
        raise ValueError("layout_gpu_range needs at least one GPU")
    if params <= 0 or flops_per_token <= 0 or min(peaks_flops) <= 0 or min(usable_memory_bytes) <= 0:
        raise ValueError("parameters, FLOPs per token, peaks and memory must be positive")
    state = params * TRAINING_STATE_BYTES_PER_PARAM
    if tokens is not None and deadline_hours is not None:
        need_flops = needed_flops_per_s(tokens, flops_per_token, deadline_hours)
        low = gpus_floor(params, max(peaks_flops), max(usable_memory_bytes), need_flops)
        high = max(_pow2_at_least(need_flops / (LOW_MFU * min(peaks_flops))),
                   _pow2_at_least(2 * state / min(usable_memory_bytes)))
        why = (f"the deadline needs {need_flops / 1e15:,.3g} PFLOP/s: the fastest GPU at its peak "
               f"to the slowest at {LOW_MFU:.0%} MFU, and twice the GPUs the training states need on the GPU "
               "with the least memory")
    else:
        low = gpus_floor(params, max(peaks_flops), max(usable_memory_bytes), None)
        high = _pow2_at_least(2 * state / min(usable_memory_bytes))
        why = "twice the GPUs the training states need on the GPU with the least memory"
    top = max(DEFAULT_MAX_GPUS, min(high, MAX_LAYOUT_GPUS, MAX_SEARCH_GPUS))
    capped = f", capped at {MAX_LAYOUT_GPUS:,}" if high > MAX_LAYOUT_GPUS else ""
    return GpuRange(min(low, top), top, f"{why}{capped}; --max-gpus sets it")
