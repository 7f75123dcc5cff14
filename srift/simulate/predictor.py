"""Predict one data-parallel training iteration of a profile on a cluster.

``Predictor(profile, job).predict(cluster)`` caches everything that does not depend on the cluster
(the rescaled profile per per-GPU batch, the compute times per (GPU, batch), the bucket layout, the
memory estimate), so the recommender can score thousands of clusters quickly; ``predict`` is the
one-shot form.

The job's ``parallelism`` picks the simulator: ``ddp`` (below), or ``zero2``, ``fsdp``, ``hsdp``
(srift/simulate/sharded.py, with activation checkpointing). ``auto`` (the default) simulates, per
cluster, every parallelism and checkpointing policy whose memory fits (sharded.py's units; hsdp
only across nodes of several GPUs) and keeps the fastest: cheapest lower bound first (compute,
recompute and optimizer, no communication), stopping once no remaining combination can win. A
profile without FSDP units (a CNN, BERT) is trained with DDP, as are K-FAC jobs and one GPU.
A profile of an FSDP script (``srift profile``) says how the script ran (``Profile.parallelism``,
``activation_checkpointing``): that is the job's default, in place of ``auto``.

DDP: iteration = data + forward + backward + exposed communication + communication interference
+ optimizer + overhead (+ K-FAC phases); with gradient accumulation the first ``grad_accum - 1``
micro-batches run without the all-reduce (``no_sync``). Interference: on GPUs, each second of all-reduce hidden
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

import math
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.hardware import CPU, find_gpu, gpu as gpu_spec
from srift.job import AUTO, CHECKPOINTING, HALF_PRECISIONS, PARALLELISMS, Job, usd_per_million_samples
from srift.perf.accuracy import (
    MEASURED_ELSEWHERE, MEASURED_HERE, finetune_typical_error, sharded_typical_error, typical_error,
)
from srift.perf.comm import CommModel
from srift.perf.compute import KINDS, LayerTimes, layer_arrays, layer_times, measured_gpu
from srift.perf.input import InputTime, input_time
from srift.profile import Profile
from srift.simulate.ddp import BucketLayout, bucket_layout, bucket_ready_s, comm_end_s
from srift.simulate.finetune import FrozenBase, finetune_memory_bytes, finetune_profile, frozen_in_profile
from srift.simulate.kfac import KfacPlan, kfac_memory_bytes, plan_kfac
from srift.simulate.memory import (
    FRAGMENTATION, activation_bytes, compute_param_bytes, fits, memory_breakdown_bytes, sharded_memory_bytes,
)
from srift.simulate.mixed import batches_for_fastest, split_batch
from srift.simulate.prediction import BatchShare, Prediction
from srift.simulate.sharded import EXPOSED_KEYS, StepInputs, StepTimes, checkpoint_masks, simulate_step, unit_layout
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
        job: Batch, sequence length, precision, optimizer, parallelism, checkpointing.
        more_profiles: The same job measured on other GPUs (``srift profile`` on each): a node
            group's compute comes from the profile measured on its GPU (at the job's precision if
            there is one), else from ``profile``. Memory, data loading and the gradient buckets
            come from ``profile``.
        model_flops_per_token: Training FLOPs per token at a sequence length, for MFU (the zoo's
            ``srift.zoo.llm.model_flops_per_token`` of the model's architecture); None: 3 x the
            forward FLOPs of the profile's matmul and attention layers, as the profile counts them.

    Raises:
        SriftError: for a seq_len the profile cannot take, ``more_profiles`` that do not fit
            (``measured_sources``), or activation checkpointing of a profile without FSDP units.
    """

    def __init__(self, profile: Profile, job: Job, more_profiles: Sequence[Profile] = (),
                 model_flops_per_token: Callable[[int], float] | None = None) -> None:
        job = job_with_profile_defaults(job, profile)
        self.job = job
        self.base = profile.rescale(seq_len=job.seq_len) if job.seq_len is not None else profile
        self._sources = {k: (p.rescale(seq_len=job.seq_len) if job.seq_len is not None else p)
                         for k, p in measured_sources(profile, more_profiles).items()}
        # Fine-tuning (srift/simulate/finetune.py) transforms each profile after it is rescaled:
        # the weight-sized bytes it adds do not scale with the batch.
        self._raw_base = self.base
        self.frozen: FrozenBase | None = frozen_in_profile(self.base)  # a profile of a LoRA script
        self._transform = job.finetune is not None
        if self._transform:
            if self.frozen is not None:
                raise SriftError(f"profile '{profile.name}' is already of a fine-tuning step (it records frozen weights).",
                                 "drop --finetune: srift predicts the profiled fine-tuning as it ran.")
            self.base, self.frozen = finetune_profile(self.base, job)
        self.precision = job.precision or profile.precision
        self.ref_batch = job.batch_size or profile.batch_size
        self.layout = bucket_layout(self.base)
        self.bucket_sizes_bytes = self.layout.sizes_bytes
        self.units = unit_layout(self.base)
        self._profiles: dict[tuple[int, int], Profile] = {}
        self._compute: dict[tuple[str, int], _Compute] = {}
        self._memory: dict[int, dict[str, float]] = {}
        self._sharded_memory: dict[tuple[int, str, str, int, int], dict[str, float]] = {}
        self._activations: dict[tuple[int, str], float] = {}
        self._steps: dict[tuple, StepTimes] = {}
        self._unit_compute: dict[tuple[str, int, str], tuple[list[float], list[float], list[float]]] = {}
        self._unit_comm: dict[tuple[CommModel, str, float], tuple[list[float], list[float], list[float]]] = {}
        # Keyed by the model itself (not its id(): a freed model's id can come back for another).
        self._allreduce: dict[tuple[CommModel, float], np.ndarray] = {}
        self._gpu_side_of: dict[CommModel, float] = {}
        measured_cv = None
        ph = profile.phases
        if ph.total_s and ph.total_s_std is not None:
            measured_cv = ph.total_s_std / ph.total_s
        self.compute_cv = measured_cv if measured_cv is not None else STRUCTURAL_COMPUTE_CV
        # Activations scale with precision when the profile was taken at another one.
        half, was_half = self.precision in HALF_PRECISIONS, profile.precision in HALF_PRECISIONS
        self._act_factor = 0.5 if (half and not was_half) else (2.0 if (was_half and not half) else 1.0)
        self.seq_len = self.base.seq_len
        self.flops_per_token = (model_flops_per_token(self.seq_len) if model_flops_per_token is not None and self.seq_len
                                else profile_flops_per_token(self.base))
        self.parallelisms, self.checkpointings = self._choices()
        self.data_loading = job.data_loading or ("tokens" if self.base.seq_len else "images")
        self._measured = profile.measured and profile.phases.data_s is not None
        self._image_size = image_side_px(profile.input_bytes_per_sample)
        self._inputs: dict[tuple[int, float], InputTime] = {}

    def _choices(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The parallelisms and checkpointing policies this job may use (``auto`` widens them)."""
        job, blocks = self.job, self.units.blocks
        if job.activation_checkpointing not in (AUTO, "none") and blocks == 0:
            raise SriftError(
                f"profile '{self.base.name}' has no FSDP units (transformer blocks), so there is nothing to checkpoint.",
                "drop --activation-checkpointing, or profile the job with its FSDP wrapping (the zoo's LLMs have units).")
        if job.kfac:
            return ("ddp",), ("none",) if job.activation_checkpointing == AUTO else (job.activation_checkpointing,)
        if job.parallelism != AUTO:
            pars: tuple[str, ...] = (job.parallelism,)
        else:
            pars = PARALLELISMS if blocks else ("ddp",)
        if job.activation_checkpointing != AUTO:
            ckpts: tuple[str, ...] = (job.activation_checkpointing,)
        else:
            ckpts = CHECKPOINTING if blocks else ("none",)
        return pars, ckpts

    # ---- cached pieces -------------------------------------------------------------------
    def profile_at(self, batch: int, source: Profile | None = None) -> Profile:
        """The job's profile (or ``source``, one of ``more_profiles``) at a per-GPU batch."""
        src = self._raw_base if source is None else source
        key = (id(src), batch)
        p = self._profiles.get(key)
        if p is None:
            p = src.rescale(batch_size=batch)
            if self._transform:
                p = finetune_profile(p, self.job)[0]
            self._profiles[key] = p
        return p

    def source_for(self, gpu: str) -> Profile:
        """The profile whose times a node group of ``gpu`` uses (see ``more_profiles``)."""
        key = CPU if gpu == CPU else (find_gpu(gpu) or gpu)
        hit = self._sources.get((key, self.precision))
        if hit is None:
            hit = next((p for (g, _), p in self._sources.items() if g == key), None)
        return self._raw_base if hit is None else hit

    def compute(self, gpu: str, batch: int) -> _Compute:
        key = (gpu, batch)
        c = self._compute.get(key)
        if c is None:
            prof = self.profile_at(batch, self.source_for(gpu))
            c = self._compute[key] = _Compute(layer_times(prof, gpu, self.precision), batch, self.layout)
        return c

    def memory(self, batch: int) -> dict[str, float]:
        """DDP's memory per GPU at a per-GPU batch (srift.simulate.memory.memory_breakdown_bytes)."""
        m = self._memory.get(batch)
        if m is None:
            m = memory_breakdown_bytes(self.profile_at(batch), self.precision)
            m["activations"] *= self._act_factor
            if self.job.kfac:
                m["kfac_factors"] = kfac_memory_bytes(self.base)
            self._memory[batch] = m
        return m

    def plan_memory(self, batch: int, parallelism: str, checkpointing: str, shard_gpus: int, gpus: int = 1) -> dict[str, float]:
        """Memory per GPU of a plan at a per-GPU micro-batch: DDP's for a profile without FSDP
        units (``memory``), fine-tuning's (``finetune_memory_bytes``; ``gpus``: the job's, for
        DDP's gradient buckets), else ``sharded_memory_bytes``."""
        if self.units.blocks == 0 and parallelism == "ddp" and self.frozen is None:
            return self.memory(batch)
        key = (batch, parallelism, checkpointing, shard_gpus if parallelism != "ddp" else 1,
               int(gpus > 1) if self.frozen is not None else 0)
        m = self._sharded_memory.get(key)
        if m is None:
            if len(self._sharded_memory) > 4096:
                self._sharded_memory.clear()
            acts_key = (batch, checkpointing)
            acts = self._activations.get(acts_key)
            if acts is None:
                acts = self._activations[acts_key] = activation_bytes(self.profile_at(batch), self.precision, checkpointing,
                                                                      self.job.fused_loss)
            if self.frozen is not None:
                m = finetune_memory_bytes(self.profile_at(batch), self.frozen, self.precision, parallelism, checkpointing,
                                          key[3], gpus, self.job.fused_loss, acts)
            else:
                m = sharded_memory_bytes(self.profile_at(batch), self.precision, parallelism, checkpointing, key[3],
                                         self.job.reduce_dtype, self.job.fused_loss, acts)
            if self._act_factor != 1.0:
                m["fragmentation"] += FRAGMENTATION * m["activations"] * (self._act_factor - 1.0)
                m["activations"] *= self._act_factor
            self._sharded_memory[key] = m
        return m

    def could_fit(self, gpu_memory_gib: float, max_gpus: int) -> bool:
        """Whether the job fits on GPUs of ``gpu_memory_gib`` at some cluster size up to
        ``max_gpus`` (the search's pre-check per instance type): at the reference batch, with the
        plan that needs least memory, its states sharded over ``max_gpus``."""
        if self.parallelisms == ("ddp",) and self.units.blocks == 0 and self.frozen is None:
            return fits(sum(self.memory(self.ref_batch).values()), gpu_memory_gib)
        n = max(1, max_gpus)
        return any(fits(sum(self.plan_memory(self.ref_batch, p, c, n, n).values()), gpu_memory_gib)
                   for p in self.parallelisms for c in self.checkpointings)

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
        """Per-GPU batch (micro-batch, with gradient accumulation) of each node group."""
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
        gb = self.job.global_batch_size // self.job.grad_accum  # per micro-batch
        if gb < cluster.gpus:
            raise SriftError(
                f"global batch {gb} is smaller than the {cluster.gpus} GPUs of {cluster.name}.",
                "raise --global-batch-size or use fewer GPUs.",
            )
        return split_batch(speeds, gpus, gb)

    # ---- the prediction --------------------------------------------------------------------
    def predict(self, cluster: Cluster) -> Prediction:
        """Predict one iteration (one optimizer step) of the job on ``cluster``."""
        groups = cluster.node_groups
        batches = self.batches(cluster)
        comps = [self.compute(g.gpu, b) for g, b in zip(groups, batches)]
        comm = CommModel.for_cluster(cluster)
        plan = self._plan(cluster, batches, comps, comm)
        breakdown = plan.breakdown
        accum = self.job.grad_accum
        inputs = self._inputs_for(cluster, [b * accum for b in batches], comm)
        gpu_s = sum(breakdown.values())
        p90 = max(plan.p90_s, gpu_s)
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
        breakdown["comm_total"] = plan.comm_total_s
        global_batch = sum(b * g.gpus for b, g in zip(batches, groups)) * accum
        throughput = global_batch / iteration
        cost = cluster.usd_per_hour
        crit = max(comps, key=lambda c: c.compute_end_s)
        error_pct, error_basis, compute_error_pct = self._typical_error(cluster, crit.times, plan.parallelism, comm)
        state_bytes = self.units.params * (4.0 + float(self.base.optimizer.get("state_bytes_per_param", 4)))
        if plan.parallelism != "ddp":
            state_bytes /= cluster.nodes  # every node writes its own shards of the checkpoint
        tokens = throughput * self.seq_len if self.seq_len else None
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
            bottleneck=bottleneck(plan.memory.fits, plan.comm_cost_s, iteration,
                                  input_bound=loader is not None and loader.kind != "measured" and breakdown["data"] > 0),
            fits_in_memory=plan.memory.fits,
            memory_per_gpu_bytes=plan.memory.per_gpu_bytes,
            memory_breakdown_bytes=dict(plan.memory.breakdown_bytes),
            batch_split=[BatchShare(g.label, g.gpu, b * accum, g.gpus) for g, b in zip(groups, batches)],
            spot=spot_expectation(cluster, state_bytes, throughput, cost),
            notes=(self._notes(crit.times, plan.kfac) + self._finetune_notes() + comm.assumptions()
                   + self._input_notes(loader, inputs, gpu_s)),
            typical_error_pct=error_pct,
            typical_error_basis=error_basis,
            compute_error_pct=compute_error_pct,
            parallelism=plan.parallelism,
            activation_checkpointing=plan.checkpointing,
            grad_accum=accum,
            micro_batch_size=batches[0] if len(set(batches)) == 1 else None,
            seq_len=self.seq_len,
            throughput_tokens_per_s=tokens,
            tokens_per_s_per_gpu=tokens / cluster.gpus if tokens is not None else None,
            mfu=self._mfu(cluster, tokens),
            model_flops_per_token=self.flops_per_token if self.seq_len else None,
            data_loading=loader.kind if loader is not None else self.data_loading,
            input_time_s=loader.time_s if loader is not None and loader.kind != "measured" else None,
        )

    def _mfu(self, cluster: Cluster, tokens_per_s: float | None) -> float | None:
        """Model FLOP/s over the cluster's dense peak at the job's precision (None without a
        sequence length or on CPU workers)."""
        if tokens_per_s is None or not self.flops_per_token or any(g.gpu == CPU for g in cluster.node_groups):
            return None
        peak = sum(g.gpus * gpu_spec(g.gpu).peak_flops(self.precision) for g in cluster.node_groups)
        return tokens_per_s * self.flops_per_token / peak

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

    # ---- plans -------------------------------------------------------------------------------
    def _plan(self, cluster: Cluster, batches: list[int], comps: list[_Compute], comm: CommModel) -> _Plan:
        """The plan the job runs with on ``cluster``: its parallelism and checkpointing, or under
        ``auto`` the fastest that fits (see the module docstring)."""
        pars, ckpts = self.parallelisms, self.checkpointings
        auto = len(pars) * len(ckpts) > 1
        if auto and self.job.parallelism == AUTO:
            if cluster.gpus == 1 or any(g.gpu == CPU for g in cluster.node_groups):
                pars = ("ddp",)  # nothing to shard over (CPU workers: DDP is what srift measures there)
            elif cluster.nodes == 1 or len({g.gpus_per_node for g in cluster.node_groups}) > 1 or min(
                    g.gpus_per_node for g in cluster.node_groups) == 1:
                pars = tuple(p for p in pars if p != "hsdp")  # hsdp = fsdp on one node; needs even nodes
            auto = len(pars) * len(ckpts) > 1
        if not auto:
            return self._evaluate(cluster, batches, comps, comm, pars[0], ckpts[0], p90=True)
        candidates = []
        for p in pars:
            for c in ckpts:
                mem = self._memory_fit(cluster, batches, p, c)
                if mem.fits:
                    candidates.append((self._lower_bound_s(comps, batches, p, c, cluster), p, c))
        if not candidates:
            # Nothing fits: show the plan that needs least memory, marked as not fitting.
            p, c = min(((p, c) for p in pars for c in ckpts),
                       key=lambda pc: self._memory_fit(cluster, batches, pc[0], pc[1]).per_gpu_bytes)
            return self._evaluate(cluster, batches, comps, comm, p, c, p90=True)
        candidates.sort()
        best: tuple[float, str, str] | None = None
        for bound, p, c in candidates:
            if best is not None and bound >= best[0]:
                break
            t = self._evaluate(cluster, batches, comps, comm, p, c, p90=False).iteration_s
            if best is None or t < best[0]:
                best = (t, p, c)
        assert best is not None
        return self._evaluate(cluster, batches, comps, comm, best[1], best[2], p90=True)

    def _lower_bound_s(self, comps: list[_Compute], batches: list[int], parallelism: str, checkpointing: str,
                       cluster: Cluster) -> float:
        """No plan runs faster than its compute, recompute and optimizer step."""
        if parallelism == "ddp":
            c = max(comps, key=lambda c: c.compute_end_s)
            return self.job.grad_accum * c.compute_end_s + c.times.optimizer_s
        fwd, bwd, rec = self._unit_times(cluster, batches, checkpointing)
        opt = max(c.times.optimizer_s for c in comps) / self._shard_gpus(cluster, parallelism)
        return self.job.grad_accum * (sum(fwd) + sum(bwd)) + opt

    def _evaluate(self, cluster: Cluster, batches: list[int], comps: list[_Compute], comm: CommModel,
                  parallelism: str, checkpointing: str, p90: bool) -> _Plan:
        if parallelism == "ddp":
            return self._ddp(cluster, batches, comps, comm, checkpointing)
        return self._sharded(cluster, batches, comps, comm, parallelism, checkpointing, p90)

    def _memory_fit(self, cluster: Cluster, batches: list[int], parallelism: str, checkpointing: str) -> _MemoryFit:
        """Whether every GPU holds its share under a plan, and the most loaded GPU's memory."""
        groups = cluster.node_groups
        shard = self._shard_gpus(cluster, parallelism)
        most, most_breakdown, ok = 0.0, {}, True
        for g, b in zip(groups, batches):
            m = self.plan_memory(b, parallelism, checkpointing, shard, cluster.gpus)
            total = sum(m.values())
            if g.gpu != CPU:
                cap = g.gpu_memory_gib if g.gpu_memory_gib is not None else gpu_spec(g.gpu).memory_gib
                ok = ok and fits(total, cap)
            if total > most:
                most, most_breakdown = total, m
        return _MemoryFit(ok, most, most_breakdown)

    @staticmethod
    def _shard_gpus(cluster: Cluster, parallelism: str) -> int:
        """GPUs the states are sharded over: all of them, one node's under hsdp, 1 under ddp."""
        if parallelism == "ddp":
            return 1
        if parallelism == "hsdp":
            return max(g.gpus_per_node for g in cluster.node_groups)
        return cluster.gpus

    # ---- DDP ---------------------------------------------------------------------------------
    def _ddp(self, cluster: Cluster, batches: list[int], comps: list[_Compute], comm: CommModel,
             checkpointing: str) -> _Plan:
        groups = cluster.node_groups
        slowest = max(range(len(comps)), key=lambda i: comps[i].compute_end_s)
        crit = comps[slowest]
        compute_end = crit.compute_end_s
        ar = self._communication(cluster, comps, compute_end, comm)
        optimizer = max(c.times.optimizer_s for c in comps)
        overhead = max(c.times.overhead_s for c in comps)
        # Gradient accumulation: the first grad_accum - 1 micro-batches run without the
        # all-reduce (no_sync), the last one as a plain iteration.
        accum = self.job.grad_accum
        recompute = 0.0
        if checkpointing != "none":
            _, _, rec = self._unit_times(cluster, batches, checkpointing)
            recompute = accum * sum(rec)
        breakdown = {
            "data": 0.0,  # the loader: added in predict()
            "forward": crit.forward_s * accum,
            "backward": (compute_end - crit.forward_s) * accum,
            "exposed_comm": ar.exposed_s,
            "comm_interference": ar.interference_s,
            "optimizer": optimizer,
            "overhead": overhead * accum,
        }
        if recompute:
            breakdown["recompute"] = recompute
        kfac = None
        if self.job.kfac:
            prof = self.profile_at(batches[slowest], self.source_for(groups[slowest].gpu))
            kfac = plan_kfac(prof, cluster, self.job, crit.times, comm, self.layout, inverse_method=self.job.kfac_inverse_method)
            breakdown.update(kfac.phases.as_dict())
        p90 = (compute_end * (1.0 + Z90 * self.compute_cv) * accum + ar.exposed_p90_s
               + ar.interference_p90_s + optimizer + overhead * accum
               + (kfac.phases_p90.total_s if kfac is not None else 0.0) + recompute)
        return _Plan("ddp", checkpointing, breakdown, ar.total_s, p90, ar.exposed_s + ar.interference_s,
                     self._memory_fit(cluster, batches, "ddp", checkpointing), kfac)

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

    # ---- sharded -----------------------------------------------------------------------------
    def _unit_times(self, cluster: Cluster, batches: list[int], checkpointing: str) -> tuple[list[float], list[float], list[float]]:
        """Per run of units (forward order): forward seconds, backward seconds with recompute, and
        the recompute alone; the slowest node group's for each run (collectives wait for it)."""
        out: tuple[list[float], list[float], list[float]] | None = None
        for g, b in zip(cluster.node_groups, batches):
            key = (g.gpu, b, checkpointing)
            hit = self._unit_compute.get(key)
            if hit is None:
                times = self.compute(g.gpu, b).times
                starts = self.units.run_starts
                rec_layers = times.fwd_s * checkpoint_masks(self.base, checkpointing).recompute
                fwd = np.add.reduceat(times.fwd_s, starts) if len(starts) else np.zeros(0)
                rec = np.add.reduceat(rec_layers, starts) if len(starts) else np.zeros(0)
                bwd = (np.add.reduceat(times.bwd_s, starts) if len(starts) else np.zeros(0)) + rec
                hit = self._unit_compute[key] = (fwd.tolist(), bwd.tolist(), rec.tolist())
            out = hit if out is None else tuple([max(a, b) for a, b in zip(x, y)] for x, y in zip(out, hit))  # type: ignore[assignment]
        assert out is not None
        return out

    def _unit_comm_s(self, comm: CommModel, parallelism: str, quantile: float) -> tuple[list[float], list[float], list[float]]:
        """Per unit: all-gather, reduce-scatter and (hsdp) cross-node all-reduce seconds, with
        the parameters gathered in the compute dtype and gradients reduced in ``reduce_dtype``."""
        key = (comm, parallelism, quantile)
        hit = self._unit_comm.get(key)
        if hit is None:
            if len(self._unit_comm) > 4096:
                self._unit_comm.clear()
            params = self.units.unit_params
            gathered = self._gathered_unit_bytes()
            reduced = params * (4.0 if self.job.reduce_dtype == "fp32" else 2.0)
            shard = comm.within_node() if parallelism == "hsdp" else comm
            ag = np.asarray(shard.all_gather_time_s(gathered, quantile), dtype=float)
            rs = np.asarray(shard.reduce_scatter_time_s(reduced, quantile), dtype=float)
            if parallelism == "hsdp":
                g = shard.topology.workers
                ar = np.asarray(comm.across_nodes().allreduce_time_s(reduced / g, quantile), dtype=float)
            else:
                ar = np.zeros_like(ag)
            hit = self._unit_comm[key] = (ag.tolist(), rs.tolist(), ar.tolist())
        return hit

    def _sharded_gpu_side(self, comm: CommModel) -> float:
        """Share of the collectives' time the GPUs spend moving data (``gpu_side_fraction`` on
        the units' gathered sizes): what their interference with compute scales with."""
        key = (comm, "gpu_side", 0.0)
        hit = self._unit_comm.get(key)
        if hit is None:
            sizes = self._gathered_unit_bytes()
            hit = self._unit_comm[key] = ([comm.gpu_side_fraction(sizes[sizes > 0])], [], [])
        return hit[0][0]

    def _gathered_unit_bytes(self) -> np.ndarray:
        """Bytes each unit all-gathers: its parameters in the compute dtype, and under fine-tuning
        its frozen base weights as stored (NF4 under QLoRA) too."""
        gathered = self.units.unit_params * compute_param_bytes(self.precision)
        if self.frozen is not None:
            gathered = gathered + np.array([self.frozen.unit_stored_bytes(u, self.precision) for u in self.units.units])
        return gathered

    def _sharded(self, cluster: Cluster, batches: list[int], comps: list[_Compute], comm: CommModel,
                 parallelism: str, checkpointing: str, p90: bool) -> _Plan:
        fwd, bwd, rec = self._unit_times(cluster, batches, checkpointing)
        cpu = any(g.gpu == CPU for g in cluster.node_groups)

        def step(quantile: float) -> StepTimes:
            # The same hardware (another region, spot or on-demand) gives the same schedule.
            key = (comm, parallelism, checkpointing, quantile, tuple((g.gpu, b) for g, b in zip(cluster.node_groups, batches)))
            hit = self._steps.get(key)
            if hit is None:
                if len(self._steps) > 8192:
                    self._steps.clear()
                ag, rs, ar = self._unit_comm_s(comm, parallelism, quantile)
                hit = self._steps[key] = simulate_step(StepInputs(self.units.run_unit, tuple(fwd), tuple(bwd), tuple(ag),
                                                                  tuple(rs), tuple(ar), regather=parallelism != "zero2",
                                                                  serial=cpu))
            return hit

        s50 = step(0.5)
        accum = self.job.grad_accum
        optimizer = max(c.times.optimizer_s for c in comps) / self._shard_gpus(cluster, parallelism)
        overhead = max(c.times.overhead_s for c in comps)
        recompute = sum(rec)
        k = 0.0 if cpu else comm.params.overlap_interference * self._sharded_gpu_side(comm)
        breakdown = {
            "data": 0.0,  # the loader: added in predict()
            "forward": sum(fwd) * accum,
            "backward": (sum(bwd) - recompute) * accum,
            "recompute": recompute * accum,
            **{key: value * accum for key, value in zip(EXPOSED_KEYS, s50.exposed_s)
               if parallelism == "hsdp" or key != "exposed_cross_node_allreduce"},
            "comm_interference": k * s50.hidden_s * accum,
            "optimizer": optimizer,
            "overhead": overhead * accum,
        }
        exposed = sum(s50.exposed_s) * accum
        p90_s = 0.0
        if p90:
            s90 = step(0.9)
            p90_s = (accum * (overhead + s90.end_s + s90.compute_s * Z90 * self.compute_cv + k * s90.hidden_s)
                     + optimizer)
        return _Plan(parallelism, checkpointing, breakdown, sum(s50.comm_s) * accum, p90_s,
                     exposed + breakdown["comm_interference"], self._memory_fit(cluster, batches, parallelism, checkpointing),
                     None)

    def _typical_error(self, cluster: Cluster, times: LayerTimes, parallelism: str,
                       comm: CommModel) -> tuple[float | None, str, float | None]:
        """The validation figure of this prediction, what it rests on, and the compute part's."""
        measured = (MEASURED_ELSEWHERE if times.anchored_from else MEASURED_HERE) if times.anchored else None
        links = {g.intra_node for g in cluster.node_groups}
        cpu = any(g.gpu == CPU for g in cluster.node_groups)
        if self.frozen is not None and not cpu:
            pct, basis = finetune_typical_error()
        elif parallelism != "ddp" and not cpu:
            pct, basis = sharded_typical_error()
        else:
            pct, basis = typical_error(cluster.nodes, cluster.gpus, cpu, measured, links.pop() if len(links) == 1 else None,
                                       comm.topology.net_class if cluster.nodes > 1 else None)
        if self.job.kfac and pct is not None:
            # The figures come from first-order DDP runs; no GPU K-FAC run was there to check.
            basis += ("; for the first-order part only: K-FAC's phases have no GPU measurement to check them "
                      "(scripts/bench_kfac.py compares them on CPU workers: README, Second-order training)")
        return pct, basis, typical_error(1, 1, cpu, measured)[0]

    def _finetune_notes(self) -> list[str]:
        """What a fine-tuning job trains and stores (srift/simulate/finetune.py)."""
        f = self.frozen
        if f is None:
            return []
        if f.unit_measured_bytes is not None:
            return [f"profiled {f.mode} fine-tuning: {f.trainable_params / 1e6:,.1f}M trainable parameters, "
                    f"{f.stored_bytes(self.precision) / 2**30:,.2f} GiB of frozen weights as the profile recorded them"]
        base = "" if f.mode == "full" else (
            f"; {f.frozen_params / 1e9:,.2f}B base weights frozen" + (" in NF4 (double quantization)" if f.mode == "qlora" else "")
            + (f", LoRA rank {self.job.lora_rank} on {self.job.lora_targets}"))
        return [f"{f.mode} fine-tuning: {f.trainable_params / 1e6:,.1f}M trainable parameters{base}; {f.optimizer} states "
                f"for them only; every tensor in {self.precision} (no fp32 master copy)"]

    @staticmethod
    def _notes(times: LayerTimes, kfac: KfacPlan | None) -> list[str]:
        notes = []
        if times.anchored_from:
            notes.append(f"compute scaled from times measured on {times.anchored_from}, carrying part of their "
                         "departure from the model (a GPU's own quirks do not carry over; README: Accuracy)")
        elif times.anchored:
            notes.append("compute anchored on measured times")
        if kfac is not None:
            notes.append("K-FAC kernels from the profile's measured times (srift profile --kfac)" if kfac.measured_kernels
                         else f"K-FAC kernels ({kfac.inverse_method}): {kfac.kernels.basis} (docs/kfac.md)")
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


@dataclass(frozen=True)
class _Plan:
    """One way of running the job on a cluster, simulated.

    Attributes:
        parallelism, checkpointing: The plan.
        breakdown: Seconds per phase of one iteration (they add up to it).
        comm_total_s: Communication seconds per iteration, exposed or not.
        p90_s: The iteration's p90 (0 when not asked for).
        comm_cost_s: Exposed communication and interference (the bottleneck test).
        memory: Memory per GPU.
        kfac: The K-FAC plan (K-FAC jobs).
    """

    parallelism: str
    checkpointing: str
    breakdown: dict[str, float]
    comm_total_s: float
    p90_s: float
    comm_cost_s: float
    memory: _MemoryFit
    kfac: KfacPlan | None

    @property
    def iteration_s(self) -> float:
        return sum(self.breakdown.values())


def job_with_profile_defaults(job: Job, profile: Profile) -> Job:
    """``job`` with the parallelism and checkpointing the profiled script ran (an FSDP script's
    profile records them) where the job leaves them to ``auto``; K-FAC jobs keep DDP."""
    parallelism, checkpointing = job.parallelism, job.activation_checkpointing
    if parallelism == AUTO and profile.parallelism is not None and not job.kfac:
        parallelism = profile.parallelism
    if checkpointing == AUTO and profile.activation_checkpointing is not None:
        checkpointing = profile.activation_checkpointing
    if (parallelism, checkpointing) == (job.parallelism, job.activation_checkpointing):
        return job
    return dataclasses.replace(job, parallelism=parallelism, activation_checkpointing=checkpointing)


def profile_flops_per_token(profile: Profile) -> float:
    """Training FLOPs per token as the profile counts them: 3 x the forward FLOPs of its matmul
    and attention layers (backward twice forward) per token; 0 without a sequence length."""
    if not profile.seq_len:
        return 0.0
    arr = layer_arrays(profile)
    mask = (arr.kind_idx == KINDS.index("matmul")) | (arr.kind_idx == KINDS.index("attention"))
    return 3.0 * float(arr.fwd_flops[mask].sum()) / (profile.batch_size * profile.seq_len)


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


def predict(profile: Profile, cluster: Cluster, job: Job | None = None, more_profiles: Sequence[Profile] = (),
            model_flops_per_token: Callable[[int], float] | None = None) -> Prediction:
    """Predict one iteration of ``profile`` trained as ``job`` on ``cluster`` (``more_profiles``:
    the same job measured on other GPUs; see ``Predictor``)."""
    return Predictor(profile, job or Job(), more_profiles, model_flops_per_token).predict(cluster)
