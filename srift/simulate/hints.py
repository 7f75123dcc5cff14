"""Hints: a likely choice the job left out, priced by the same simulator as the job itself.

A job that trains in fp32 on GPUs where mixed precision (``torch.autocast`` with a gradient scaler,
srift's ``amp``) is much faster gets one line saying by how much, on this cluster, so a default
nobody chose does not cost the user half their throughput in silence.
"""

from __future__ import annotations

from collections.abc import Callable

from srift.job import AMP, FP32
from srift.simulate.prediction import Prediction

#: Below this speed-up on the cluster, a precision hint is not worth a line.
MIN_HINT_SPEEDUP = 1.2


def precision_hint(precision: str, at_job: Prediction, at_amp: Callable[[], Prediction]) -> str | None:
    """The hint for a job at ``precision`` predicted as ``at_job``: ``at_amp`` predicts the same
    job on the same cluster at ``amp`` (called only for an fp32 job). None when there is nothing
    to say (not fp32, or amp does not win by ``MIN_HINT_SPEEDUP``)."""
    if precision != FP32 or at_job.throughput_samples_per_s <= 0:
        return None
    amp = at_amp()
    speedup = amp.throughput_samples_per_s / at_job.throughput_samples_per_s
    if speedup < MIN_HINT_SPEEDUP:
        return None
    return (f"--precision {AMP} (mixed precision, torch.autocast) is the usual choice on these GPUs: "
            f"{speedup:.1f}x the throughput here ({amp.throughput_samples_per_s:,.0f} against "
            f"{at_job.throughput_samples_per_s:,.0f} samples/s).")
