"""Mixed clusters: split the global batch over GPUs of different speeds."""

from __future__ import annotations

import math


def split_batch(speeds: list[float], gpus: list[int], global_batch: int) -> list[int]:
    """Per-GPU batch of each group, proportional to its speed, summing to ``global_batch``.

    Args:
        speeds: Samples per second of one GPU of each group (at a common reference batch).
        gpus: GPUs in each group.
        global_batch: Samples per iteration over the whole cluster.

    Returns:
        Integer per-GPU batches b_g (each at least 1) with sum(b_g * gpus_g) == global_batch when
        that is reachable; leftover samples go to the fastest groups first (largest remainder).
    """
    if len(speeds) != len(gpus) or not speeds:
        raise ValueError("speeds and gpus must be non-empty lists of the same length")
    if global_batch < sum(gpus):
        raise ValueError(f"global batch {global_batch} is smaller than the {sum(gpus)} GPUs")
    total_speed = sum(s * n for s, n in zip(speeds, gpus))
    ideal = [global_batch * s / total_speed for s in speeds]
    batches = [max(1, math.floor(x)) for x in ideal]
    left = global_batch - sum(b * n for b, n in zip(batches, gpus))
    order = sorted(range(len(speeds)), key=lambda i: (ideal[i] - batches[i], speeds[i]), reverse=True)
    # Hand out whole per-GPU increments while they fit (a group of n GPUs takes n samples at a time).
    progressed = True
    while left > 0 and progressed:
        progressed = False
        for i in order:
            if gpus[i] <= left:
                batches[i] += 1
                left -= gpus[i]
                progressed = True
                if left == 0:
                    break
    return batches


def batches_for_fastest(speeds: list[float], fastest_batch: int) -> list[int]:
    """Per-GPU batches when the fastest GPU takes ``fastest_batch`` and the others keep pace."""
    top = max(speeds)
    return [max(1, round(fastest_batch * s / top)) for s in speeds]
