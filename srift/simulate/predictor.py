"""Predict one data-parallel training iteration of a profile on a cluster.

``Predictor(profile, job).predict(cluster)`` caches everything that does not depend on the cluster
(the rescaled profile per per-GPU batch, the compute times per (GPU, batch), the bucket layout, the
memory estimate), so the recommender can score thousands of clusters quickly; ``predict`` is the
one-shot form.

Iteration = data + forward + backward + exposed communication + communication interference
+ optimizer + overhead (+ K-FAC phases). Interference: on GPUs, each second of all-reduce hidden
behind backward still costs ``overlap_interference`` seconds (configs/perf/comm.json), scaled
across nodes by the share of the all-reduce the GPUs spend moving data (the rest is network
wait). Mixed clusters split the batch by speed (mixed.py) and every bucket's all-reduce waits
for the slowest worker. Spread: the p90 uses the communication model's p90 and a
compute spread (the measured coefficient of variation, or 3 % for a structural profile) at
z = 1.2816.

Data: the loader runs beside the GPUs (srift/perf/input.py), so the iteration is bounded below by
the time the slowest GPU's loader needs for its batch on the vCPUs it has (the node's vCPUs per
GPU; NCCL's socket threads take theirs on a multi-node TCP cluster); ``data`` is what exceeds the
GPU's iteration, and the bottleneck is ``input`` when there is any. ``--data-loading`` picks the
kind (default: ``tokens`` for sequence models, ``images`` otherwise); unknown vCPUs: no bound
(said in the notes). A measured profile brings its own data time (``phases.data_s``, the time its
training loop waited for batches), added as measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import math

import numpy as np

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.hardware import CPU, find_gpu, gpu as gpu_spec
from srift.job import Job, usd_per_million_samples
from srift.perf.accuracy import MEASURED_ELSEWHERE, MEASURED_HERE, typical_error
from srift.perf.comm import CommModel
from srift.perf.compute import LayerTimes, layer_times, measured_gpu
from srift.perf.input import InputTime, input_time
from srift.profile import Profile
from srift.simulate.ddp import BucketLayout, bucket_layout, bucket_ready_s, comm_end_s
from srift.simulate.kfac import KfacPlan, kfac_memory_bytes, plan_kfac
from srift.simulate.memory import fits, memory_breakdown_bytes
from srift.simulate.mixed import batches_for_fastest, split_batch
from srift.simulate.prediction import BatchShare, Prediction
from srift.simulate.spot import spot_expectation

Z90 = 1.2816
STRUCTURAL_COMPUTE_CV = 0.03
COMM_BOUND_FRACTION = 0.2  # exposed communication above this share of the iteration: comm-bound


class _Compute:
    """Compute times of one (GPU, per-GPU batch), arranged for the overlap simulation."""

    __slots__ = ("times", "forward_s", "compute_end_s", "ready_rel_s", "speed")

    def __init__(self, times: LayerTimes, batch: int, layout: BucketLayout) -> None:
        self.times = times
        self.forward_s = times.forward_s
        self.ready_rel_s, self.compute_end_s = bucket_ready_s(self.forward_s, times.bwd_s, layout)
        self.speed = batch / max(times.total_s, 1e-12)


def _layer_mismatch(a: Profile, b: Profile) -> str | None:
    """How two profiles' layers differ (count, or the first name or type that differs), or None."""
    if len(a.layers) != len(b.layers):
        return f"{len(b.layers)} layers against {len(a.layers)}"
    for i, (x, y) in enumerate(zip(a.layers, b.layers)):
        if (x.name, x.type) != (y.name, y.type):
            return f"layer {i} is '{y.name}' ({y.type}) against '{x.name}' ({x.type})"
    return None


def measured_sources(profile: Profile, more: Sequence[Profile]) -> dict[tuple[str, str], Profile]:
    """Profiles of one job by (GPU measured on, precision): the first profile when it was measured,
    and each of ``more``, which must be measured and of the same job (layer names and types).

    Raises:
        SriftError: for a profile of ``more`` that is structural, of another job, or measured on
            the same GPU at the same precision as another.
    """
    out: dict[tuple[str, str], Profile] = {}
    for i, p in enumerate([profile, *more]):
        gpu = measured_gpu(p)
        if gpu is None:
            if i == 0:
                continue
            what = ("was measured on a device srift does not know" if p.measured else "is structural (no measured times)")
            raise SriftError(f"profile '{p.name}' {what}, so it adds nothing beside the first.",
                             "after the first, pass only profiles `srift profile` measured on a GPU in configs/gpus.yaml.")
        diff = _layer_mismatch(profile, p) if i else None
        if diff:
            raise SriftError(f"profile '{p.name}' is not of the same job as '{profile.name}': {diff}.",
                             "pass profiles of one training script, measured on different GPUs.")
        key = (gpu, p.precision)
        if key in out:
            raise SriftError(f"two profiles were measured on {gpu} at {p.precision}.",
                             "keep one profile per GPU type and precision.")
        out[key] = p
    return out


class Predictor:
    """Predictions for one profile and job on many clusters (see module docstring).

    Args:
        profile: The job's profile (measured or structural).
        job: Batch, sequence length, precision, optimizer.
        more_profiles: The same job measured on other GPUs (``srift profile`` on each): a node
            group's compute comes from the profile measured on its GPU (at the job's precision if
            there is one), else from ``profile``. Memory, data loading and the gradient buckets
            come from ``profile``.

    Raises:
        SriftError: for a seq_len the profile cannot take, or ``more_profiles`` that do not fit
            (``measured_sources``).
    """

    def __init__(self, profile: Profile, job: Job, more_profiles: Sequence[Profile] = ()) -> None:
        self.job = job
        self.base = profile.rescale(seq_len=job.seq_len) if job.seq_len is not None else profile
        self._sources = {k: (p.rescale(seq_len=job.seq_len) if job.seq_len is not None else p)
                         for k, p in measured_sources(profile, more_profiles).items()}
        self.precision = job.precision or profile.precision
        self.ref_batch = job.batch_size or profile.batch_size
        self.layout = bucket_layout(self.base)
        self.bucket_sizes_bytes = self.layout.sizes_bytes
        self._profiles: dict[tuple[int, int], Profile] = {}
        self._compute: dict[tuple[str, int], _Compute] = {}
        self._memory: dict[int, dict[str, float]] = {}
        # Keyed by the model itself (not its id(): a freed model's id can come back for another).
        self._allreduce: dict[tuple[CommModel, float], np.ndarray] = {}
        self._gpu_side_of: dict[CommModel, float] = {}
        measured_cv = None
        ph = profile.phases
        if ph.total_s and ph.total_s_std is not None:
            measured_cv = ph.total_s_std / ph.total_s
        self.compute_cv = measured_cv if measured_cv is not None else STRUCTURAL_COMPUTE_CV
        # Activations scale with precision when the profile was taken at another one.
        self._act_factor = 0.5 if (self.precision == "amp" and profile.precision != "amp") else (
            2.0 if (profile.precision == "amp" and self.precision != "amp") else 1.0)
        self.data_loading = job.data_loading or ("tokens" if self.base.seq_len else "images")
        self._measured = profile.measured and profile.phases.data_s is not None
        self._image_size = image_side_px(profile.input_bytes_per_sample)
        self._inputs: dict[tuple[int, float], InputTime] = {}
        self._state_bytes = self.base.params * (4.0 + float(self.base.optimizer.get("state_bytes_per_param", 4)))

    # ---- cached pieces -------------------------------------------------------------------
    def profile_at(self, batch: int, source: Profile | None = None) -> Profile:
        """The job's profile (or ``source``, one of ``more_profiles``) at a per-GPU batch."""
        src = self.base if source is None else source
        key = (id(src), batch)
        p = self._profiles.get(key)
        if p is None:
            p = self._profiles[key] = src.rescale(batch_size=batch)
        return p

    def source_for(self, gpu: str) -> Profile:
        """The profile whose times a node group of ``gpu`` uses (see ``more_profiles``)."""
        key = CPU if gpu == CPU else (find_gpu(gpu) or gpu)
        hit = self._sources.get((key, self.precision))
        if hit is None:
            hit = next((p for (g, _), p in self._sources.items() if g == key), None)
        return self.base if hit is None else hit

    def compute(self, gpu: str, batch: int) -> _Compute:
        key = (gpu, batch)
        c = self._compute.get(key)
        if c is None:
            prof = self.profile_at(batch, self.source_for(gpu))
            c = self._compute[key] = _Compute(layer_times(prof, gpu, self.precision), batch, self.layout)
        return c

    def memory(self, batch: int) -> dict[str, float]:
        m = self._memory.get(batch)
        if m is None:
            m = memory_breakdown_bytes(self.profile_at(batch), self.precision)
            m["activations"] *= self._act_factor
            if self.job.kfac:
                m["kfac_factors"] = kfac_memory_bytes(self.base)
            self._memory[batch] = m
        return m

    def _allreduce_s(self, comm: CommModel, quantile: float) -> np.ndarray:
        key = (comm, quantile)
        ar = self._allreduce.get(key)
        if ar is None:
            if len(self._allreduce) > 4096:
                self._allreduce.clear()
                self._gpu_side_of.clear()
            ar = self._allreduce[key] = np.asarray(comm.allreduce_time_s(self.bucket_sizes_bytes, quantile), dtype=float)
        return ar

    def _gpu_side(self, comm: CommModel) -> float:
        f = self._gpu_side_of.get(comm)
        if f is None:
            f = self._gpu_side_of[comm] = comm.gpu_side_fraction(self.bucket_sizes_bytes)
        return f

    def input_time(self, batch: int, vcpus_per_gpu: float | None) -> InputTime | None:
        """One GPU's loader time for ``batch`` samples on ``vcpus_per_gpu`` vCPUs (None: unknown vCPUs)."""
        # A measured profile's wait for batches scales with the batch (Profile.rescale).
        measured = self.profile_at(batch).phases.data_s if self._measured and self.data_loading != "synthetic" else None
        if vcpus_per_gpu is None and measured is None and self.data_loading != "synthetic":
            return None
        key = (batch, vcpus_per_gpu or 0.0)
        t = self._inputs.get(key)
        if t is None:
            t = self._inputs[key] = input_time(self.data_loading, batch, vcpus_per_gpu or 1.0, self._image_size,
                                               self.job.seq_len or self.base.seq_len, measured)
        return t

    # ---- batches ---------------------------------------------------------------------------
    def batches(self, cluster: Cluster) -> list[int]:
        """Per-GPU batch of each node group."""
        groups = cluster.node_groups
        gpus = [g.gpus for g in groups]
        if not cluster.heterogeneous:
            if self.job.global_batch_size is None:
                return [self.ref_batch] * len(groups)
            speeds = [1.0] * len(groups)
        else:
            speeds = [self.compute(g.gpu, self.ref_batch).speed for g in groups]
            if self.job.global_batch_size is None:
                return batches_for_fastest(speeds, self.ref_batch)
        gb = self.job.global_batch_size
        if gb < cluster.gpus:
            raise SriftError(
                f"global batch {gb} is smaller than the {cluster.gpus} GPUs of {cluster.name}.",
                "raise --global-batch-size or use fewer GPUs.",
            )
        return split_batch(speeds, gpus, gb)

    # ---- the prediction --------------------------------------------------------------------
    def predict(self, cluster: Cluster) -> Prediction:
        """Predict one iteration of the job on ``cluster``."""
        groups = cluster.node_groups
        batches = self.batches(cluster)
        comps = [self.compute(g.gpu, b) for g, b in zip(groups, batches)]
        slowest = max(range(len(comps)), key=lambda i: comps[i].compute_end_s)
        crit = comps[slowest]
        compute_end = crit.compute_end_s
        comm = CommModel.for_cluster(cluster)
        ar = self._communication(cluster, comps, compute_end, comm)
        optimizer = max(c.times.optimizer_s for c in comps)
        overhead = max(c.times.overhead_s for c in comps)
        inputs = self._inputs_for(cluster, batches, comm)

        breakdown = {
            "data": 0.0,
            "forward": crit.forward_s,
            "backward": compute_end - crit.forward_s,
            "exposed_comm": ar.exposed_s,
            "comm_interference": ar.interference_s,
            "optimizer": optimizer,
            "overhead": overhead,
        }
        kfac = None
        if self.job.kfac:
            prof = self.profile_at(batches[slowest], self.source_for(groups[slowest].gpu))
            kfac = plan_kfac(prof, cluster, self.job, crit.times, comm, self.layout)
            breakdown.update(kfac.phases.as_dict())
        gpu_s = sum(breakdown.values())
        p90 = (compute_end * (1.0 + Z90 * self.compute_cv) + ar.exposed_p90_s + ar.interference_p90_s + optimizer
               + overhead + (kfac.phases_p90.total_s if kfac is not None else 0.0))
        known = [t for t in inputs if t is not None]
        loader = max(known, key=lambda t: t.time_s) if known and len(known) == len(inputs) else None
        if loader is not None and loader.kind == "measured":
            breakdown["data"] = loader.time_s  # the measured wait, as the profile saw it
            p90 += loader.time_s
        elif loader is not None:
            # The loader runs beside the GPUs: only what it needs beyond their iteration shows.
            breakdown["data"] = max(0.0, loader.time_s - gpu_s)
            p90 = max(p90, max(t.slow_time_s for t in known))
        iteration = sum(breakdown.values())
        breakdown["comm_total"] = ar.total_s

        global_batch = sum(b * g.gpus for b, g in zip(batches, groups))
        throughput = global_batch / iteration
        cost = cluster.usd_per_hour
        memory = self._memory_fit(groups, batches)
        error_pct, error_basis, compute_error_pct = self._typical_error(cluster, crit.times, comm)
        state_bytes = self._state_bytes
        return Prediction(
            cluster=cluster.name,
            gpus=cluster.gpus,
            global_batch_size=global_batch,
            iteration_time_s=iteration,
            p90_iteration_time_s=max(p90, iteration),
            throughput_samples_per_s=throughput,
            cost_per_hour_usd=cost,
            usd_per_million_samples=usd_per_million_samples(cost, throughput),
            breakdown=breakdown,
            bottleneck=bottleneck(memory.fits, ar.exposed_s + ar.interference_s, iteration,
                                  input_bound=loader is not None and loader.kind != "measured" and breakdown["data"] > 0),
            fits_in_memory=memory.fits,
            memory_per_gpu_bytes=memory.per_gpu_bytes,
            memory_breakdown_bytes=dict(memory.breakdown_bytes),
            batch_split=[BatchShare(g.label, g.gpu, b, g.gpus) for g, b in zip(groups, batches)],
            spot=spot_expectation(cluster, state_bytes, throughput, cost),
            notes=self._notes(crit.times, kfac) + comm.assumptions() + self._input_notes(loader, inputs, gpu_s),
            typical_error_pct=error_pct,
            typical_error_basis=error_basis,
            compute_error_pct=compute_error_pct,
            data_loading=loader.kind if loader is not None else self.data_loading,
            input_time_s=loader.time_s if loader is not None and loader.kind != "measured" else None,
        )

    def _inputs_for(self, cluster: Cluster, batches: list[int], comm: CommModel) -> list[InputTime | None]:
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

    def _input_notes(self, loader: InputTime | None, inputs: list[InputTime | None], gpu_s: float) -> list[str]:
        """What the data-loading figure rests on."""
        if self.data_loading == "synthetic":
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

    def _communication(self, cluster: Cluster, comps: list[_Compute], compute_end: float, comm: CommModel) -> _AllReduce:
        """The gradient all-reduce's exposed time and interference at the median and the p90."""
        ready = comps[0].ready_rel_s
        for c in comps[1:]:
            ready = np.maximum(ready, c.ready_rel_s)  # a bucket waits for its slowest worker
        ar50 = self._allreduce_s(comm, 0.5)
        ar90 = self._allreduce_s(comm, 0.9)
        if any(g.gpu == CPU for g in cluster.node_groups):
            # CPU workers: gloo's all-reduce runs on the same cores as the compute, so it takes
            # its time from the iteration instead of hiding behind backward.
            return _AllReduce(float(ar50.sum()), float(ar90.sum()), 0.0, 0.0, float(ar50.sum()))
        exposed50 = max(0.0, comm_end_s(ready, ar50) - compute_end)
        exposed90 = max(0.0, comm_end_s(ready, ar90) - compute_end)
        # The all-reduce hidden behind backward still slows it (shared SMs and memory).
        k = comm.params.overlap_interference * self._gpu_side(comm)
        return _AllReduce(exposed50, exposed90, k * max(0.0, float(ar50.sum()) - exposed50),
                          k * max(0.0, float(ar90.sum()) - exposed90), float(ar50.sum()))

    def _memory_fit(self, groups: Sequence[NodeGroup], batches: list[int]) -> _MemoryFit:
        """Whether every GPU holds its share, and the most loaded GPU's memory."""
        most, most_breakdown, ok = 0.0, {}, True
        for g, b in zip(groups, batches):
            m = self.memory(b)
            total = sum(m.values())
            if g.gpu != CPU:
                cap = g.gpu_memory_gib if g.gpu_memory_gib is not None else gpu_spec(g.gpu).memory_gib
                ok = ok and fits(total, cap)
            if total > most:
                most, most_breakdown = total, m
        return _MemoryFit(ok, most, most_breakdown)

    def _typical_error(self, cluster: Cluster, times: LayerTimes, comm: CommModel) -> tuple[float | None, str, float | None]:
        """The validation figure of this prediction, what it rests on, and the compute part's."""
        measured = (MEASURED_ELSEWHERE if times.anchored_from else MEASURED_HERE) if times.anchored else None
        links = {g.intra_node for g in cluster.node_groups}
        cpu = any(g.gpu == CPU for g in cluster.node_groups)
        pct, basis = typical_error(cluster.nodes, cluster.gpus, cpu, measured, links.pop() if len(links) == 1 else None,
                                   comm.topology.net_class if cluster.nodes > 1 else None)
        if self.job.kfac and pct is not None:
            # The figures come from first-order DDP runs; no GPU K-FAC run was there to check.
            basis += ("; for the first-order part only: K-FAC's phases have no GPU measurement to check them "
                      "(scripts/bench_kfac.py compares them on CPU workers: README, Second-order training)")
        return pct, basis, typical_error(1, 1, cpu, measured)[0]

    @staticmethod
    def _notes(times: LayerTimes, kfac: KfacPlan | None) -> list[str]:
        notes = []
        if times.anchored_from:
            notes.append(f"compute scaled from times measured on {times.anchored_from}, carrying part of their "
                         "departure from the model (a GPU's own quirks do not carry over; README: Accuracy)")
        elif times.anchored:
            notes.append("compute anchored on measured times")
        if kfac is not None and kfac.measured_kernels:
            notes.append("K-FAC kernels from the profile's measured times (srift profile --kfac)")
        return notes


@dataclass(frozen=True)
class _AllReduce:
    """The gradient all-reduce of one iteration, in seconds."""

    exposed_s: float
    exposed_p90_s: float
    interference_s: float
    interference_p90_s: float
    total_s: float


@dataclass(frozen=True)
class _MemoryFit:
    fits: bool
    per_gpu_bytes: float
    breakdown_bytes: dict[str, float]


def bottleneck(fits_in_memory: bool, comm_cost_s: float, iteration_s: float, input_bound: bool = False) -> str:
    """``memory`` when the job does not fit, ``input`` when the data loader is slower than the
    GPUs, ``communication`` when the all-reduce's exposed time and interference exceed
    COMM_BOUND_FRACTION of the iteration, else ``compute``."""
    if not fits_in_memory:
        return "memory"
    if input_bound:
        return "input"
    return "communication" if comm_cost_s > COMM_BOUND_FRACTION * iteration_s else "compute"


def image_side_px(input_bytes_per_sample: float) -> int:
    """Side of a square RGB float32 input (the crop the loader produces), 224 when the profile's
    input is not one (``3 x side^2 x 4`` bytes)."""
    side = math.sqrt(input_bytes_per_sample / 12.0) if input_bytes_per_sample > 0 else 0.0
    return int(round(side)) if 32 <= side <= 2048 and abs(side - round(side)) < 0.01 else 224


def predict(profile: Profile, cluster: Cluster, job: Job | None = None, more_profiles: Sequence[Profile] = ()) -> Prediction:
    """Predict one iteration of ``profile`` trained as ``job`` on ``cluster`` (``more_profiles``:
    the same job measured on other GPUs; see ``Predictor``)."""
    return Predictor(profile, job or Job(), more_profiles).predict(cluster)
