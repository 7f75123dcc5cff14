"""The input-loader room: the data loader's time per node group and what that figure rests on.

The loader runs beside the GPUs (srift/perf/input.py), so the iteration is bounded below by the
time the slowest GPU's loader needs for its batch on the vCPUs it has (the node's vCPUs per GPU;
NCCL's socket threads take theirs on a multi-node TCP cluster). ``--data-loading`` picks the kind
(default: ``tokens`` for sequence models, ``images`` otherwise); unknown vCPUs: no bound (said in
the notes). A measured profile brings its own data time (``phases.data_s``, the time its training
loop waited for batches), added as measured.
"""

from __future__ import annotations

import math

from srift.cache import BoundedCache
from srift.cluster import Cluster
from srift.hardware import CPU
from srift.job import SYNTHETIC
from srift.perf.comm import CommModel
from srift.perf.input import InputTime, input_time
from srift.profile import Profile
from srift.simulate.workload import Workload


def image_side_px(input_bytes_per_sample: float) -> int:
    """Side of a square RGB float32 input (the crop the loader produces), 224 when the profile's
    input is not one (``3 x side^2 x 4`` bytes)."""
    side = math.sqrt(input_bytes_per_sample / 12.0) if input_bytes_per_sample > 0 else 0.0
    return int(round(side)) if 32 <= side <= 2048 and abs(side - round(side)) < 0.01 else 224


class InputLoader:
    """The data loader of one workload (see module docstring).

    Args:
        workload: The profile and job (their profile per batch, sequence length).
        profile: The job's profile as given (its measured data time, its input size).
    """

    def __init__(self, workload: Workload, profile: Profile) -> None:
        self.w = workload
        self.data_loading = workload.job.data_loading or ("tokens" if workload.base.seq_len else "images")
        self._measured = profile.measured and profile.phases.data_s is not None
        self._image_size = image_side_px(profile.input_bytes_per_sample)
        self._inputs: BoundedCache[tuple[int, float], InputTime] = BoundedCache()

    def input_time(self, batch: int, vcpus_per_gpu: float | None) -> InputTime | None:
        """One GPU's loader time for ``batch`` samples on ``vcpus_per_gpu`` vCPUs (None: unknown vCPUs)."""
        # A measured profile's wait for batches scales with the batch (Profile.rescale).
        measured = self.w.profile_at(batch).phases.data_s if self._measured and self.data_loading != SYNTHETIC else None
        if vcpus_per_gpu is None and measured is None and self.data_loading != SYNTHETIC:
            return None
        return self._inputs.get((batch, vcpus_per_gpu or 0.0), lambda: input_time(
            self.data_loading, batch, vcpus_per_gpu or 1.0, self._image_size,
            self.w.job.seq_len or self.w.base.seq_len, measured))

    def inputs_for(self, cluster: Cluster, batches: list[int], comm: CommModel) -> list[InputTime | None]:
        """Each node group's loader time (None where its vCPUs are unknown). On a multi-node
        cluster over TCP sockets NCCL's helper threads take their vCPUs from the loader (at most
        half of the loader's share: the threads sleep while the network is idle)."""
        out = []
        for g, b in zip(cluster.node_groups, batches):
            vcpus = None
            if g.vcpus_per_node is not None and g.gpu != CPU:
                per_gpu = g.vcpus_per_node / g.gpus_per_node
                socket = comm.socket_vcpus_per_node / g.gpus_per_node
                vcpus = max(per_gpu - socket, (per_gpu + 1.0) / 2.0) if socket else per_gpu
            out.append(self.input_time(b, vcpus))
        return out

    def input_notes(self, loader: InputTime | None, inputs: list[InputTime | None], gpu_s: float) -> list[str]:
        """What the data-loading figure rests on."""
        if self.data_loading == SYNTHETIC:
            return []
        if loader is None:
            if any(t is not None for t in inputs):
                return ["data loading: the vCPUs of some node group are unknown, so its loader is not bounded"]
            return [f"data loading ({self.data_loading}): the vCPUs are unknown, so the loader is assumed to keep up "
                    "(give vcpus_per_node in the cluster file)"]
        if loader.kind == "measured":
            return [f"data loading: {loader.basis}"]
        verdict = ("the GPUs wait for it: input-bound" if loader.time_s > gpu_s
                   else f"hidden behind the GPUs' {gpu_s * 1e3:.3g} ms")
        return [f"data loading ({loader.kind}): {loader.basis} = {loader.time_s * 1e3:.3g} ms per iteration, {verdict}"]
