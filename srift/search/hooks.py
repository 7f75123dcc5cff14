"""``srift recommend``'s gradient-compression tip: on the chosen configuration, would a DDP
communication hook (``--grad-compression``, srift/perf/compression.py) make the iteration faster
by more than the prediction's typical error? Then say which, by how much, the two lines that
register it, and what it costs in accuracy.

The hooks tried: the 16-bit cast PyTorch offers for the GPU (``bf16`` where every GPU has bf16
units, else ``fp16``) and PowerSGD at its default rank 1. A hook is suggested only when it wins
by more than the band (``typical_error_pct``); PowerSGD only when it also beats the 16-bit hook
by more than the band (it is lossy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from srift.cluster import Cluster
from srift.hardware import gpus
from srift.job import DDP, Job
from srift.simulate import Predictor
from srift.simulate.prediction import Prediction

# What each hook costs in accuracy, with its source.
ACCURACY = {
    "fp16": "gradients summed in fp16 (divided by the world size first to avoid overflow; PyTorch's fp16_compress_hook)",
    "bf16": "gradients summed in bf16, 8 mantissa bits (PyTorch's bf16_compress_hook)",
    "powersgd": "lossy low-rank compression with error feedback (Vogels et al., NeurIPS 2019: rank 2 matched "
                "full-precision ResNet-18 on CIFAR-10, rank 1 lost about 0.3 points); check your loss curve",
}
POWERSGD_TRIED = "powersgd:1"


@dataclass(frozen=True)
class CompressionTip:
    """A hook that would win on the chosen configuration.

    Attributes:
        hook: ``bf16``, ``fp16`` or ``powersgd:1``.
        speedup: Iteration time without it over with it.
        band_pct: The prediction's typical error (±%) the speedup exceeds.
        iteration_s: Predicted iteration without the hook.
        iteration_with_s: Predicted iteration with it.
        accuracy: What it costs in accuracy, with its source.
    """

    hook: str
    speedup: float
    band_pct: float
    iteration_s: float
    iteration_with_s: float
    accuracy: str

    def line(self) -> str:
        return (f"Register the {self.hook} DDP communication hook (--grad-compression {self.hook}): {self.speedup:.2f}x on this "
                f"configuration ({self.iteration_s * 1e3:.1f} -> {self.iteration_with_s * 1e3:.1f} ms per iteration, beyond the "
                f"±{self.band_pct:.1f} % typical error); accuracy: {ACCURACY[self.hook.partition(':')[0]]}. "
                f"`srift predict --grad-compression {self.hook} --torchrun` prints the two lines to add.")


def half_hook(cluster: Cluster) -> str:
    """``bf16`` where every GPU of the cluster has bf16 units, else ``fp16``."""
    specs = gpus()
    return "bf16" if all(g.gpu in specs and specs[g.gpu].has_bf16 for g in cluster.node_groups) else "fp16"


def compression_tip(make: Callable[[Job], Predictor], job: Job, cluster: Cluster, pred: Prediction) -> CompressionTip | None:
    """The hook to suggest for ``pred`` (the chosen configuration's prediction of ``job`` on
    ``cluster``), or None: the job sets a hook already, the plan is not DDP on several GPUs, the
    prediction has no typical error, or no hook wins by more than it."""
    if (job.compression.active or pred.parallelism != DDP or pred.gpus < 2 or pred.layout
            or pred.typical_error_pct is None):
        return None
    band = pred.typical_error_pct / 100.0
    base = pred.iteration_time_s
    best: tuple[str, float] | None = None
    for hook in (half_hook(cluster), POWERSGD_TRIED):
        with_hook = make(dataclasses.replace(job, grad_compression=hook)).predict(cluster)
        if with_hook.parallelism != DDP:
            continue
        t = with_hook.iteration_time_s
        if base / t > 1.0 + band and (best is None or best[1] / t > 1.0 + band):
            best = (hook, t)
    if best is None:
        return None
    return CompressionTip(best[0], base / best[1], pred.typical_error_pct, base, best[1], ACCURACY[best[0].partition(":")[0]])
