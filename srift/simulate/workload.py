"""The workload room: everything about one profile and job that does not depend on the cluster.

``Workload(profile, job)`` holds the rescaled profile per per-GPU batch, the compute times per
(GPU, batch) arranged for the overlap simulation, the bucket layout and the FSDP units, the memory
per plan, the units' compute times, and the all-reduce and per-unit collective times per
communication model. The recommender scores thousands of clusters with one ``Workload``; every
cache is a ``BoundedCache`` (srift/cache.py). The plans (srift/simulate/plans.py) and the input loader (srift/simulate/loader.py) read
from it; ``Predictor`` (srift/simulate/predictor.py) is the facade over the three.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from srift.stacks import ddp_bucket_cap_mb, eager_kernels
from srift.cache import BoundedCache, ObjectMemo
from srift.errors import SriftError
from srift.hardware import CPU, find_gpu
from srift.job import DDP, REDUCE_BYTES_PER_ELEMENT, ZERO2, Job
from srift.perf.compression import hook_cost
from srift.perf.comm import CommModel
from srift.perf.compute import KINDS, LayerTimes, layer_arrays, layer_times, load_params as load_compute_params, measured_gpu
from srift.profile import Profile
from srift.simulate.ddp import BucketLayout, bucket_layout, bucket_ready_s
from srift.simulate.eager import eager_profile
from srift.simulate.finetune import FrozenBase, finetune_memory_bytes, finetune_profile, frozen_in_profile
from srift.simulate.kfac import kfac_memory_bytes
from srift.simulate.sequences import sequences_of
from srift.simulate.varlen import profile_with_sample_attention, sample_attention_len
from srift.simulate.offload import OffloadTimes, MemoryTricks, cpu_step_s, exposed_copy_s, offloaded_activation_bytes
from srift.simulate.memory import (
    activation_bytes, allocated_parts, compute_param_bytes, memory_breakdown_bytes, sharded_memory_bytes, with_allocator,
)
from srift.simulate.sharded import StepInputs, StepTimes, checkpoint_masks, simulate_step, unit_collective_s, unit_layout

# Pure functions of a profile, memoized across predictors (a fit predicts the same rows' profiles
# thousands of times; unit_layout memoizes itself): rescaled profiles and DDP bucket layouts.
# Bounded small: a rescaled LLM profile holds every layer.
_RESCALED: ObjectMemo[Profile] = ObjectMemo(256)
_BUCKETS: ObjectMemo[BucketLayout] = ObjectMemo(256)


def rescaled(profile: Profile, batch_size: int | None = None, seq_len: int | None = None) -> Profile:
    """``profile.rescale(batch_size, seq_len)``, memoized."""
    return _RESCALED.get(profile, (batch_size, seq_len), lambda: profile.rescale(batch_size=batch_size, seq_len=seq_len))


STRUCTURAL_COMPUTE_CV = 0.03  # the compute spread of a structural profile (no measured repeats)


class _Compute:
    """Compute times of one (GPU, per-GPU batch), arranged for the overlap simulation."""

    __slots__ = ("times", "forward_s", "compute_end_s", "ready_rel_s", "speed")

    def __init__(self, times: LayerTimes, batch: int, layout: BucketLayout) -> None:
        self.times = times
        self.forward_s = times.forward_s
        self.ready_rel_s, self.compute_end_s = bucket_ready_s(self.forward_s, times.bwd_s, layout)
        self.speed = batch / max(times.total_s, 1e-12)


UnitTimes = tuple[list[float], list[float], list[float]]


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


def profile_flops_per_token(profile: Profile) -> float:
    """Training FLOPs per token as the profile counts them: 3 x the forward FLOPs of its matmul
    and attention layers (backward twice forward) per token; 0 without a sequence length."""
    if not profile.seq_len:
        return 0.0
    arr = layer_arrays(profile)
    mask = (arr.kind_idx == KINDS.index("matmul")) | (arr.kind_idx == KINDS.index("attention"))
    return 3.0 * float(arr.fwd_flops[mask].sum()) / (profile.batch_size * profile.seq_len)


class Workload:
    """The cluster-independent side of one profile and job (see module docstring).

    Args:
        profile: The job's profile, its parallelism and checkpointing defaults already applied
            (``job_with_profile_defaults``).
        job: The job.
        more_profiles: The same job measured on other GPUs (see ``Predictor``).
        model_flops_per_token: Training FLOPs per token at a sequence length (see ``Predictor``).

    Raises:
        SriftError: for a seq_len the profile cannot take, or ``more_profiles`` that do not fit
            (``measured_sources``).
    """

    def __init__(self, profile: Profile, job: Job, more_profiles: Sequence[Profile] = (),
                 model_flops_per_token: Callable[[int], float] | None = None) -> None:
        self.job = job
        if eager_kernels(job):  # the stack runs Transformers' own element-wise code (srift/simulate/eager.py)
            profile = eager_profile(profile)
        # Samples shorter than the sequence length (srift/simulate/sequences.py): memory at the
        # longest micro-batch the data makes, each step's compute at its own length (``compute``).
        self.sequences = sequences_of(job.seq_len or profile.seq_len, job.mean_seq_len, job.lengths_file, job.packed)
        if self.sequences is not None and more_profiles:
            raise SriftError("--mean-seq-len and --lengths-file are modelled for one profile, not with more profiles.",
                             "pass one profile, or drop the sample lengths.")
        self._profile = profile
        peak = self.sequences.peak_len if self.sequences is not None else job.seq_len
        self.base = rescaled(profile, seq_len=peak) if peak is not None else profile
        if job.varlen_attention and self.sequences is not None:  # per-sample attention (srift/simulate/varlen.py)
            self.base = profile_with_sample_attention(self.base, sample_attention_len(self.sequences))
        self._sources = {k: (rescaled(p, seq_len=job.seq_len) if job.seq_len is not None else p)
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
        self.tricks = MemoryTricks.of(job)
        self.ref_batch = job.batch_size or profile.batch_size
        # DDP cuts buckets on the gradients as they are; a communication hook then compresses
        # each (srift/perf/compression.py): what goes on the wire, and the GPU work it adds.
        cap = int(ddp_bucket_cap_mb(job) * 2**20)  # --bucket-cap-mb, else the stack's (srift/stacks.py)
        self.layout = _BUCKETS.get(self.base, (cap,), lambda: bucket_layout(self.base, cap_bytes=cap))
        self.hook = hook_cost(self.base, self.layout.starts, job.compression)
        self.bucket_sizes_bytes = self.hook.wire_bytes.sum(axis=0)
        self.units = unit_layout(self.base)
        self._profiles: BoundedCache[tuple[int, int], Profile] = BoundedCache()
        self._compute: BoundedCache[tuple[str, int], _Compute] = BoundedCache()
        self._memory: BoundedCache[tuple[int, bool], dict[str, float]] = BoundedCache()
        self._sharded_memory: BoundedCache[tuple[int, str, str, int], dict[str, float]] = BoundedCache()
        self._activations: BoundedCache[tuple[int, str], float] = BoundedCache()
        self._steps: BoundedCache[tuple, StepTimes] = BoundedCache()
        self._unit_compute: BoundedCache[tuple[str, int, str], UnitTimes] = BoundedCache()
        # Keyed by the model itself (not its id(): a freed model's id can come back for another).
        self._unit_comm: BoundedCache[tuple[CommModel, str, float], UnitTimes] = BoundedCache()
        self._allreduce: BoundedCache[tuple[CommModel, float], np.ndarray] = BoundedCache()
        self._gpu_side_of: BoundedCache[CommModel, float] = BoundedCache()
        self._sharded_gpu_side_of: BoundedCache[CommModel, float] = BoundedCache()
        measured_cv = None
        ph = profile.phases
        if ph.total_s and ph.total_s_std is not None:
            measured_cv = ph.total_s_std / ph.total_s
        self.compute_cv = measured_cv if measured_cv is not None else STRUCTURAL_COMPUTE_CV
        self.seq_len = self.sequences.cap if self.sequences is not None else self.base.seq_len
        # Real tokens per sample, as tokens/s counts them (padding is not counted).
        self.tokens_per_sample = self.sequences.tokens_per_sample if self.sequences is not None else self.seq_len
        self.flops_per_token = (model_flops_per_token(self.seq_len) if model_flops_per_token is not None and self.seq_len
                                else profile_flops_per_token(self.base))

    # ---- cached pieces -------------------------------------------------------------------
    def profile_at(self, batch: int, source: Profile | None = None) -> Profile:
        """The job's profile (or ``source``, one of ``more_profiles``) at a per-GPU batch."""
        src = self._raw_base if source is None else source

        def make() -> Profile:
            p = rescaled(src, batch_size=batch)
            return finetune_profile(p, self.job)[0] if self._transform else p
        return self._profiles.get((id(src), batch), make)

    def source_for(self, gpu: str) -> Profile:
        """The profile whose times a node group of ``gpu`` uses (see ``more_profiles``)."""
        key = CPU if gpu == CPU else (find_gpu(gpu) or gpu)
        hit = self._sources.get((key, self.precision))
        if hit is None:
            hit = next((p for (g, _), p in self._sources.items() if g == key), None)
        return self._raw_base if hit is None else hit

    def step_profile(self, batch: int, source: Profile | None = None) -> Profile:
        """The profile a micro-batch of ``batch`` computes: ``profile_at``, or at the step's own
        length when the samples are shorter (``Sequences.step_len``)."""
        seq = self.sequences
        if seq is None or (source is not None and source is not self._raw_base) or seq.step_len(batch) == self.base.seq_len:
            return self.profile_at(batch, source)

        def make() -> Profile:
            p = rescaled(self._profile, batch_size=batch, seq_len=seq.step_len(batch))
            return finetune_profile(p, self.job)[0] if self._transform else p
        return self._profiles.get((-1, batch), make)

    def sequence_notes(self, batch: int) -> list[str]:
        """How the samples fill the sequences, for a prediction's notes."""
        if self.sequences is None:
            return []
        notes = [self.sequences.describe(batch)]
        if self.job.varlen_attention:
            lam, cap = sample_attention_len(self.sequences), self.sequences.cap
            notes.append(f"attention within each packed sample (--varlen-attention): E[l^2]/E[l] = {lam:,.0f} of the "
                         f"{cap:,}-token pack, {lam / cap:.0%} of the whole pack's attention")
        return notes

    def compute(self, gpu: str, batch: int) -> _Compute:
        """Compute times of ``batch`` samples per GPU on ``gpu``."""
        def make() -> _Compute:
            prof = self.step_profile(batch, self.source_for(gpu))
            return _Compute(layer_times(prof, gpu, self.precision), batch, self.layout)
        return self._compute.get((gpu, batch), make)

    def memory(self, batch: int, buckets: bool = True) -> dict[str, float]:
        """DDP's memory per GPU at a per-GPU batch (srift.simulate.memory.memory_breakdown_bytes;
        ``buckets``: DDP's gradient buckets, absent on one GPU)."""
        def make() -> dict[str, float]:
            m = memory_breakdown_bytes(self.profile_at(batch), self.precision, buckets)
            if self.job.kfac:
                m = with_allocator({**allocated_parts(m), "kfac_factors": kfac_memory_bytes(self.base)})
            return m
        return self._memory.get((batch, buckets), make)

    def plan_memory(self, batch: int, parallelism: str, checkpointing: str, shard_gpus: int,
                    buckets: bool = True) -> dict[str, float]:
        """Memory per GPU of a plan at a per-GPU micro-batch: DDP's for a profile without FSDP
        units (``memory``), fine-tuning's (``finetune_memory_bytes``), else ``sharded_memory_bytes``
        (``buckets``: DDP's, absent on one GPU)."""
        if self.units.blocks == 0 and parallelism == DDP and self.frozen is None:
            return self.memory(batch, buckets)
        key = (batch, parallelism, checkpointing, shard_gpus if parallelism != DDP else int(buckets))

        def make() -> dict[str, float]:
            acts = self._activations.get((batch, checkpointing), lambda: activation_bytes(
                self.profile_at(batch), self.precision, checkpointing, self.job.fused_loss))
            if self.frozen is not None:
                return finetune_memory_bytes(self.profile_at(batch), self.frozen, self.precision, parallelism,
                                             checkpointing, key[3], 2 if buckets else 1, self.job.fused_loss, acts,
                                             self.tricks)
            return sharded_memory_bytes(self.profile_at(batch), self.precision, parallelism, checkpointing, key[3],
                                        self.job.reduce_dtype, self.job.fused_loss, acts, buckets)
        return self._sharded_memory.get(key, make)

    def offload_times(self, gpu: str, batch: int, plan: tuple[str, str, int], forward_s: float,
                      backward_s: float) -> OffloadTimes:
        """What the memory tricks (srift/simulate/offload.py) add to one micro-batch's forward and
        backward on ``gpu`` (copies beyond the compute they overlap) and the optimizer step in
        place of the GPU's (CPU Adam), under ``plan`` (parallelism, checkpointing, shard GPUs)."""
        t = self.tricks
        if self.frozen is None or not (t.activation_offloading or t.offloads_optimizer):
            return OffloadTimes()
        parallelism, checkpointing, shard = plan
        n = float(max(1, shard)) if parallelism != DDP else 1.0
        e = compute_param_bytes(self.precision)
        down = 0.0
        if t.activation_offloading:
            prof = self.step_profile(batch)
            all_acts = activation_bytes(prof, self.precision, checkpointing, self.job.fused_loss)
            down = max(0.0, all_acts - offloaded_activation_bytes(prof, self.precision, checkpointing,
                                                                  self.job.fused_loss))
        # Parameter shards come up before each unit's all-gather, in forward and again in backward.
        up = (self.frozen.stored_bytes(self.precision) + self.base.params * e) / n if t.offloads_params else 0.0
        optimizer = cpu_step_s(self.base.params / n, e, gpu) if t.offloads_optimizer else None
        return OffloadTimes(exposed_copy_s(down + up, gpu, forward_s), exposed_copy_s(down + up, gpu, backward_s),
                            optimizer)

    def allreduce_s(self, comm: CommModel, quantile: float) -> np.ndarray:
        """Each gradient bucket's all-reduce seconds at a quantile of ``comm``: its hook's
        all-reduces one after the other (PowerSGD runs three)."""
        return self._allreduce.get((comm, quantile), lambda: np.sum(
            [np.asarray(comm.allreduce_time_s(row, quantile), dtype=float) for row in self.hook.wire_bytes], axis=0))

    def hook_s(self, gpu: str) -> np.ndarray:
        """Each bucket's communication-hook GPU seconds on ``gpu`` (0 without a hook, and on CPU
        workers, whose gloo all-reduce the compute model does not split from the hook's work)."""
        if not self.job.compression.active or gpu == CPU:
            return np.zeros(len(self.bucket_sizes_bytes))
        return self.hook.seconds(gpu, load_compute_params().launch_s)

    def gpu_side(self, comm: CommModel) -> float:
        """Share of the buckets' all-reduce time the GPUs spend moving data."""
        return self._gpu_side_of.get(comm, lambda: comm.gpu_side_fraction(self.bucket_sizes_bytes))

    # ---- sharded -----------------------------------------------------------------------------
    def unit_times(self, gpus: Sequence[str], batches: list[int], checkpointing: str) -> UnitTimes:
        """Per run of units (forward order): forward seconds, backward seconds with recompute, and
        the recompute alone; the slowest node group's (``gpus``, one per group) for each run
        (collectives wait for it)."""
        out: UnitTimes | None = None
        for gpu, b in zip(gpus, batches):
            def make() -> UnitTimes:
                times = self.compute(gpu, b).times
                starts = self.units.run_starts
                rec_layers = times.fwd_s * checkpoint_masks(self.base, checkpointing).recompute
                fwd = np.add.reduceat(times.fwd_s, starts) if len(starts) else np.zeros(0)
                rec = np.add.reduceat(rec_layers, starts) if len(starts) else np.zeros(0)
                bwd = (np.add.reduceat(times.bwd_s, starts) if len(starts) else np.zeros(0)) + rec
                return (fwd.tolist(), bwd.tolist(), rec.tolist())
            hit = self._unit_compute.get((gpu, b, checkpointing), make)
            out = hit if out is None else tuple([max(a, b) for a, b in zip(x, y)] for x, y in zip(out, hit))  # type: ignore[assignment]
        assert out is not None
        return out

    def unit_comm_s(self, comm: CommModel, parallelism: str, quantile: float) -> UnitTimes:
        """Per unit: all-gather, reduce-scatter and (hsdp) cross-node all-reduce seconds, with
        the parameters gathered in the compute dtype and gradients reduced in ``reduce_dtype``."""
        def make() -> UnitTimes:
            reduced = self.units.unit_params * float(REDUCE_BYTES_PER_ELEMENT[self.job.reduce_dtype])
            ag, rs, ar = unit_collective_s(comm, self.gathered_unit_bytes(), reduced, parallelism, quantile)
            return (ag.tolist(), rs.tolist(), ar.tolist())
        return self._unit_comm.get((comm, parallelism, quantile), make)

    def gathered_unit_bytes(self) -> np.ndarray:
        """Bytes each unit all-gathers: its parameters in the compute dtype, and under fine-tuning
        its frozen base weights as stored (NF4 under QLoRA) too."""
        gathered = self.units.unit_params * compute_param_bytes(self.precision)
        if self.frozen is not None:
            gathered = gathered + np.array([self.frozen.unit_stored_bytes(u, self.precision) for u in self.units.units])
        return gathered

    def sharded_gpu_side(self, comm: CommModel) -> float:
        """Share of the collectives' time the GPUs spend moving data (``gpu_side_fraction`` on
        the units' gathered sizes): what their interference with compute scales with."""
        def make() -> float:
            sizes = self.gathered_unit_bytes()
            return comm.gpu_side_fraction(sizes[sizes > 0])
        return self._sharded_gpu_side_of.get(comm, make)

    def step(self, comm: CommModel, parallelism: str, checkpointing: str, quantile: float,
             hardware: tuple[tuple[str, int], ...], fwd: list[float], bwd: list[float], serial: bool) -> StepTimes:
        """One sharded step's schedule (srift.simulate.sharded.simulate_step) of the units' times
        on ``hardware`` ((GPU, per-GPU batch) per node group)."""
        # The same hardware (another region, spot or on-demand) gives the same schedule.
        def make() -> StepTimes:
            ag, rs, ar = self.unit_comm_s(comm, parallelism, quantile)
            return simulate_step(StepInputs(self.units.run_unit, tuple(fwd), tuple(bwd), tuple(ag),
                                            tuple(rs), tuple(ar), regather=parallelism != ZERO2, serial=serial))
        return self._steps.get((comm, parallelism, checkpointing, quantile, hardware), make)
