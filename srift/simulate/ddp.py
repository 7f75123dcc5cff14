"""One DDP iteration: backward overlapped with bucketed gradient all-reduce.

As PyTorch DDP does: gradients fill buckets in the order they become ready in backward (the order
the profile recorded; DDP rebuilds its buckets to that order after the first iteration); the first
bucket holds 1 MiB, the others up to 25 MiB; a bucket's all-reduce starts when its last gradient is
ready and the previous all-reduce has finished (one communication stream); the iteration ends after
the last all-reduce and the optimizer step.

Everything here is plain numpy on small arrays, so one configuration costs microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from srift.profile import Profile

BUCKET_CAP_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 1 * 2**20


@dataclass(frozen=True)
class BucketLayout:
    """Where each gradient goes, for one profile.

    Attributes:
        sizes_bytes: Bytes per bucket, in all-reduce order.
        layer_pos: For each layer with gradients (bucket order), its position in the backward pass
            (reverse execution order), used to look up when its gradient is ready.
        starts: Index into ``layer_pos`` where each bucket begins (for ``np.maximum.reduceat``).
    """

    sizes_bytes: np.ndarray
    layer_pos: np.ndarray
    starts: np.ndarray


def bucket_layout(profile: Profile, cap_bytes: int = BUCKET_CAP_BYTES, first_bytes: int = FIRST_BUCKET_BYTES) -> BucketLayout:
    """Assign the profile's gradients to DDP buckets in gradient-ready order.

    DDP's rule (compute_bucket_assignment_by_size): add each gradient to the open bucket; once the
    bucket reaches its limit it closes; the first limit is 1 MiB (at most the cap), then the cap
    (25 MiB unless ``bucket_cap_mb`` says otherwise). A cap above all the gradients makes one bucket,
    all-reduced when backward ends.

    Args:
        profile: The profile; each layer's ``grad_bytes`` is in its parameters' dtype.
        cap_bytes: Bucket cap.
        first_bytes: The first bucket's cap.

    DDP cuts the buckets on the gradients as they are (a communication hook then compresses each:
    srift/perf/compression.py).
    """
    n = len(profile.layers)
    index = {id(layer): i for i, layer in enumerate(profile.layers)}
    sizes: list[float] = []
    pos: list[int] = []
    starts: list[int] = []
    current = 0.0
    cap = min(first_bytes, cap_bytes)
    for layer in profile.gradient_order():
        if current == 0.0:
            starts.append(len(pos))
        current += float(layer.grad_bytes)
        pos.append(n - 1 - index[id(layer)])  # backward visits layers in reverse execution order
        if current >= cap:
            sizes.append(current)
            current, cap = 0.0, cap_bytes
    if current > 0:
        sizes.append(current)
    return BucketLayout(np.asarray(sizes, dtype=float), np.asarray(pos, dtype=np.int64), np.asarray(starts, dtype=np.int64))


def bucket_ready_s(forward_s: float, bwd_s: np.ndarray, layout: BucketLayout) -> tuple[np.ndarray, float]:
    """When each bucket's last gradient is ready, and when backward ends (from iteration start).

    Args:
        forward_s: Forward seconds (backward starts then).
        bwd_s: Backward seconds per layer in execution order (backward runs them in reverse).
        layout: The bucket layout.
    """
    done = np.cumsum(bwd_s[::-1])
    end = forward_s + (float(done[-1]) if len(done) else 0.0)
    if len(layout.starts) == 0:
        return np.zeros(0), end
    return forward_s + np.maximum.reduceat(done[layout.layer_pos], layout.starts), end


def comm_end_s(ready_s: np.ndarray, allreduce_s: np.ndarray) -> float:
    """When the last all-reduce ends on one stream: end_k = max(ready_k, end_{k-1}) + c_k.

    Closed form of the recurrence: end_k = C_k + max_{j<=k}(ready_j - C_{j-1}), C = cumsum(c).
    """
    if len(ready_s) == 0:
        return 0.0
    cum = np.cumsum(allreduce_s)
    return float((cum + np.maximum.accumulate(ready_s - (cum - allreduce_s)))[-1])
