"""Profile and LayerProfile: what srift knows about one training job, and its YAML format.

A profile is written by ``srift profile`` (measured, from a user's script) or made from a zoo model
(structural: FLOPs, bytes, parameters, order; no timings). Every prediction starts from one.
The file format is ``schema: srift.profile/v1`` (see docs/profile-schema.md).

FLOPs and bytes are per iteration at the profile's ``batch_size`` (per GPU) and ``seq_len``.
``rescale`` changes both: every term scales linearly with the batch, ``*_seq2`` terms scale with
the square of the sequence length (attention scores), the rest linearly with it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from srift.stacks import DetectedStack
from srift.bounds import (
    MAX_BATCH_SIZE, MAX_GPUS, MAX_ITERS, MAX_KFAC_DIM, MAX_KFAC_SPATIAL, MAX_LAYER_BYTES, MAX_LAYER_FLOPS, MAX_LAYER_PARAMS,
    MAX_LAYER_S, MAX_LAYERS, MAX_NAME_CHARS, MAX_NOTE_CHARS, MAX_NOTES, MAX_PROFILE_BYTES, MAX_SAMPLE_BYTES, MAX_SEQ_LEN, MAX_STATE_BYTES_PER_PARAM, shown,
)
from srift.errors import SriftError
from srift.files import read_yaml, write_yaml
from srift.profile_ratio import check_backward_ratio
from srift.text import inert
from srift.job import CHECKPOINTING, PARALLELISMS, PRECISIONS, Checkpointing, Parallelism

SCHEMA = "srift.profile/v1"
MIN_MEASURED_S = 1e-6  # a measured iteration's layer times add up to at least this


@dataclass
class LayerProfile:
    """One leaf module, in execution (forward) order.

    Attributes:
        name: Qualified module name (``layer1.0.conv1``).
        type: Module class name (``Conv2d``, ``Linear``, ``LayerNorm``...).
        params: Trainable parameter count.
        param_tensors: Trainable parameter tensors the layer holds (a Conv2d without bias: 1; a
            Linear with one: 2), what ``torch.optim`` loops or batches over; None in profiles
            written before srift recorded it (srift/perf/compute.py ``layer_arrays`` then assumes 2).
        grad_bytes: Bytes of the gradients this layer produces (what DDP all-reduces).
        fwd_flops: Forward FLOPs per iteration (FlopCounterMode's count: 2 per multiply-add).
        bwd_flops: Backward FLOPs per iteration.
        fwd_bytes: Bytes the forward pass moves through memory (inputs + outputs + weights).
        bwd_bytes: Bytes the backward pass moves.
        activation_bytes: Bytes of the output activation kept for backward.
        fwd_flops_seq2: Part of ``fwd_flops`` that grows with seq_len squared (attention).
        bwd_flops_seq2: Part of ``bwd_flops`` that grows with seq_len squared.
        activation_bytes_seq2: Part of ``activation_bytes`` that grows with seq_len squared.
        fwd_s: Measured mean forward seconds (None in a structural profile).
        fwd_s_std: Standard deviation of the forward seconds over measured iterations.
        bwd_s: Measured mean backward seconds.
        bwd_s_std: Standard deviation of the backward seconds.
        grad_ready_order: Position in which this layer's gradients became ready in backward
            (0 = first ready); None for layers without trainable parameters.
        kfac_a_dim: K-FAC factor A dimension (d_in [+1 for bias]) for Linear/Conv2d, else None;
            of one group for a grouped Conv2d (``C_in/groups * k_h * k_w`` [+1]).
        kfac_g_dim: K-FAC factor G dimension (d_out; ``C_out/groups`` for a grouped Conv2d,
            which has ``groups`` K-FAC blocks) for Linear/Conv2d, else None.
        kfac_spatial: Rows per sample in the factor computation (H_out*W_out for Conv2d, tokens
            for a Linear applied to a sequence, 1 otherwise).
        kfac_factor_a_s: Measured seconds to compute factor A at this batch (``srift profile
            --kfac``; None otherwise). ``kfac_factor_g_s`` likewise for factor G.
        kfac_inverse_a_s: Measured seconds of the damped Cholesky inverse of a factor of A's
            dimension; ``kfac_inverse_g_s`` likewise for G.
        kfac_precondition_s: Measured seconds of ``G^-1 grad A^-1`` for this layer.
        saved_bytes: Bytes of the storages autograd saves for backward in this layer's forward at
            fp32 (srift/profiling/saved.py: shared storages once, parameters left out); None when
            not measured (activation_bytes, the layer's output, stands in).
        saved_bytes_seq2: Part of ``saved_bytes`` that grows with seq_len squared.
        saved_half_bytes: The same under autocast (fp16/bf16: matmul and convolution inputs in 16
            bits, what autocast runs in fp32 in fp32); None when not measured.
        saved_half_bytes_seq2: Part of ``saved_half_bytes`` that grows with seq_len squared.
        unit: The FSDP wrapping unit the layer belongs to (a transformer block's module name,
            ``model.layers.3``): its parameters are all-gathered and its gradients reduce-scattered
            together. None: the root unit (embeddings, final norm, head) or not known.
        frozen_bytes: Bytes of the layer's parameters that do not train (``requires_grad=False``:
            a LoRA/QLoRA base weight), as stored (a quantized weight at its packed size); not in
            ``params`` or ``grad_bytes``.
    """

    name: str
    type: str
    params: int = 0
    param_tensors: int | None = None
    grad_bytes: int = 0
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    activation_bytes: float = 0.0
    fwd_flops_seq2: float = 0.0
    bwd_flops_seq2: float = 0.0
    activation_bytes_seq2: float = 0.0
    fwd_s: float | None = None
    fwd_s_std: float | None = None
    bwd_s: float | None = None
    bwd_s_std: float | None = None
    grad_ready_order: int | None = None
    kfac_a_dim: int | None = None
    kfac_g_dim: int | None = None
    kfac_spatial: int | None = None
    kfac_factor_a_s: float | None = None
    kfac_factor_g_s: float | None = None
    kfac_inverse_a_s: float | None = None
    kfac_inverse_g_s: float | None = None
    kfac_precondition_s: float | None = None
    unit: str | None = None
    frozen_bytes: float = 0.0
    saved_bytes: float | None = None
    saved_bytes_seq2: float = 0.0
    saved_half_bytes: float | None = None
    saved_half_bytes_seq2: float = 0.0


@dataclass
class PhaseTimes:
    """Measured mean seconds per iteration of each phase (None in a structural profile)."""

    # The data iterator's next() calls (srift.measurement/v4; before: the time from the previous
    # step to the first forward, host work included), zero_grad's calls and the other host time
    # before the first forward (logging, the lr schedule): srift/profiling/host.py.
    data_s: float | None = None
    zero_grad_s: float | None = None
    host_s: float | None = None
    forward_s: float | None = None
    backward_s: float | None = None
    optimizer_s: float | None = None
    total_s: float | None = None
    total_s_std: float | None = None
    # Seconds per iteration the training thread spent inside FSDP's collectives (``srift profile``
    # of an FSDP script on CPU workers, where gloo's collectives block it): part of ``total_s``
    # but not compute, so the compute model's measured overhead leaves it out.
    collectives_s: float | None = None
    # Seconds of srift's unhooked steps (timed whole after the measured ones, the leaf hooks taken
    # out; their interquartile mean): the script's own step, without srift's per-layer hooks; None
    # when not measured (FSDP, torchrun, compiled models, the script ended first).
    total_s_unhooked: float | None = None
    # DDP over several processes: seconds from the end of the backward pass to the optimizer step,
    # mostly DDP's wait for its last all-reduces (exposed communication, which the communication
    # model predicts): part of ``total_s``, left out of the compute model's measured overhead.
    comm_wait_s: float | None = None
    # Forward + backward of srift's analysed step on the profiled micro-batch and on half of it
    # (srift/profiling/batch_timing.py): the two points ``Profile.batch_fixed_fraction`` comes from.
    analysed_s: float | None = None
    analysed_half_s: float | None = None


@dataclass
class RankMemory:
    """Peak CUDA memory of one rank over the measured steps (``srift profile`` on a GPU).

    Attributes:
        rank: The rank that measured it (0 without torchrun).
        max_allocated_bytes: ``torch.cuda.max_memory_allocated`` on the model's device.
        max_reserved_bytes: ``torch.cuda.max_memory_reserved`` (the caching allocator's pool).
    """

    rank: int
    max_allocated_bytes: int
    max_reserved_bytes: int


# Executed attention FLOPs of a causal (decoder) mask relative to the full, non-causal 4 b s^2 h d
# of QK^T and PV: how srift's profiles count them (zoo LLMs, and fused kernels a script profile sees).
CAUSAL_FRACTION = 0.5
TIMING_MODES = ("layers", "step")  # per leaf module, or whole steps (compiled models: leaves untimed)

# How ``srift profile`` turns measured steps into times (docs/profiling.md), recorded per profile.
# v1: profiles without a ``measurement`` field (means over the steps, wall clock); v2: the CPU
# clock less run-queue waits and interquartile means; v3: v2 with srift's hooks' cost measured
# (unhooked steps) and taken out of the layers (``hook_overhead_s``); v4: v3 with ``data_s`` only the
# data iterator's calls, ``zero_grad_s`` and ``host_s`` apart (srift/profiling/host.py).
MeasurementMethod = Literal["srift.measurement/v1", "srift.measurement/v2", "srift.measurement/v3",
                            "srift.measurement/v4"]
MEASUREMENT_METHODS: tuple[MeasurementMethod, ...] = get_args(MeasurementMethod)
MEASUREMENT_METHOD: MeasurementMethod = MEASUREMENT_METHODS[-1]
# Clocks: plain wall time; wall time less the training thread's wait for a core (Linux schedstat;
# CPU profiles); CUDA events on the model's device.
Clock = Literal["wall", "wall-less-run-queue", "cuda-events"]
CLOCKS: tuple[Clock, ...] = get_args(Clock)
WALL, WALL_LESS_RUN_QUEUE, CUDA_EVENTS = CLOCKS
# Aggregates over the measured steps: the mean (v1), the interquartile mean (v2).
Aggregate = Literal["mean", "interquartile-mean"]
AGGREGATES: tuple[Aggregate, ...] = get_args(Aggregate)
MEAN, INTERQUARTILE_MEAN = AGGREGATES
MAX_THREADS = 1 << 16  # torch intra-op threads of a profiled process


@dataclass(frozen=True)
class MeasurementInfo:
    """How a measured profile's times were taken and aggregated (the file's ``measurement``
    mapping; docs/profiling.md). Profiles written before it have none: ``v1``.

    Attributes:
        method: One of MEASUREMENT_METHODS.
        clock: One of CLOCKS.
        aggregate: One of AGGREGATES: per layer and per phase, over the measured steps.
        threads: ``torch.get_num_threads()`` of the profiled process (compare plain runs with as many).
        run_queue_s: Mean seconds per measured step the training thread waited for a core (other
            processes' load), left out of every time; None when not read (CUDA, not Linux).
        hooked_step_s: The measured step with srift's per-leaf hooks, before their cost was taken
            out (``phases.total_s`` is after); None when srift ran no unhooked steps.
        hook_overhead_s: Seconds per step taken out of the layers and the step for srift's hooks:
            the interquartile mean of the differences within srift's pairs of steps without and
            with them, 0 when that is not positive (noise).
        unhooked_steps: How many such pairs were timed.
    """

    method: MeasurementMethod = MEASUREMENT_METHOD
    clock: Clock = WALL
    aggregate: Aggregate = INTERQUARTILE_MEAN
    threads: int | None = None
    run_queue_s: float | None = None
    hooked_step_s: float | None = None
    hook_overhead_s: float | None = None
    unhooked_steps: int | None = None


@dataclass
class AllReduceBucket:
    """One DDP all-reduce bucket measured through a communication hook: ``time_s`` its own time
    (queueing behind the bucket before it left out), ``ready_to_done_s`` from ready to done."""

    rank: int
    index: int
    size_bytes: int
    time_s: float
    ready_to_done_s: float | None = None


COLLECTIVE_KINDS = ("all_gather", "reduce_scatter", "all_reduce")
COLLECTIVE_PHASES = ("forward", "backward")


@dataclass
class UnitCollective:
    """One FSDP unit's collective of one kind and phase, measured on one rank by ``srift profile``.

    Attributes:
        rank: The rank that measured it.
        unit: The FSDP unit (``LayerProfile.unit``; None: the root unit).
        kind: ``all_gather`` (parameters), ``reduce_scatter`` (gradients) or ``all_reduce`` (HSDP's
            replica all-reduce of a gradient shard).
        phase: ``forward`` or ``backward``.
        size_bytes: Bytes of one call: the unsharded (gathered) size for all-gather and
            reduce-scatter, the shard for all-reduce.
        calls: Calls per iteration (mean over the measured iterations).
        time_s: Mean seconds of one call (issue to completion; see docs/profile-schema.md).
    """

    rank: int
    unit: str | None
    kind: str
    phase: str
    size_bytes: int
    calls: float
    time_s: float


@dataclass(frozen=True)
class DeviceInfo:
    """The device a profile was measured on (the file's ``device`` mapping).

    Attributes:
        name: The device's own name (``NVIDIA A10G``, the CPU's), or what stands in for one in a
            profile with no device (``none (structural)``).
        kind: ``cuda``, ``cpu`` or ``none`` (structural or analytic: nothing was measured).
        gpu: Its key in configs/gpus.yaml; None off a GPU or for a GPU srift does not know.
    """

    name: str = "none"
    kind: str = "none"
    gpu: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "gpu": self.gpu}


@dataclass(frozen=True)
class OptimizerInfo:
    """The optimizer of a profile (the file's ``optimizer`` mapping).

    Attributes:
        type: Its class name (``SGD``, ``AdamW``).
        state_bytes_per_param: Bytes of state it keeps per trainable parameter (SGD momentum 4,
            Adam 8; measured by `srift profile`).
    """

    type: str = "SGD"
    state_bytes_per_param: float = 4

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "state_bytes_per_param": self.state_bytes_per_param}


@dataclass
class Profile:
    """A training job's profile (see module docstring).

    Attributes:
        name: Model or job name.
        batch_size: Per-GPU (per-process) batch size the numbers refer to.
        precision: ``fp32``, ``tf32`` or ``amp``.
        layers: Leaf modules in execution order.
        seq_len: Sequence length for sequence models, else None.
        device: Where it was measured.
        framework: Versions (``torch``, ``python``, ``srift``...).
        optimizer: The optimizer and the state it keeps per parameter.
        phases: Measured phase totals per iteration.
        iterations: Number of measured iterations (0 for a structural profile).
        world_size: Processes in the measured run (1 unless run under torchrun).
        allreduce: Measured DDP buckets (distributed runs only).
        input_bytes_per_sample: Bytes of one input sample (for data-loading estimates).
        notes: Free-form remarks the profiler recorded (warnings, what was detected).
        parallelism: How the profiled script spread the model (one of PARALLELISMS: ``fsdp``,
            ``zero2``, ``hsdp`` for an FSDP script); None when not known (DDP and single-process
            scripts, structural profiles). The predictor takes it as the job's default.
        activation_checkpointing: What the profiled script recomputed (one of CHECKPOINTING), when
            known; the predictor's default checkpointing.
        fsdp: How FSDP was set up, as detected (``api``, ``sharding_strategy``, ``param_dtype``,
            ``reduce_dtype``...): a record for readers; empty for other jobs.
        collectives: Measured FSDP collectives per unit (distributed or not; see UnitCollective).
        saved_tensors: The method (a schema name, ``srift.saved-tensors/v1``) the layers'
            ``saved_bytes`` were counted with; None when they were not.
        timing: How ``srift profile`` timed the run (one of TIMING_MODES): ``layers`` (per leaf) or
            ``step`` (whole steps: a compiled model, whose leaves are left untimed); None when not
            measured.
        peak_memory: Measured peak CUDA memory per rank (see RankMemory); empty off CUDA.
        measurement: How the times were taken and aggregated (MeasurementInfo); None when not
            measured or measured before srift recorded it (``srift.measurement/v1``).
        stack: The training stack ``srift profile`` saw in the script (srift/stacks.py
            ``DetectedStack``: name, version, evidence); None when not profiled or none seen.
            Predictions from the profile are priced under it unless ``--stack`` says otherwise.
    """

    name: str
    batch_size: int
    precision: str
    layers: list[LayerProfile]
    seq_len: int | None = None
    device: DeviceInfo = field(default_factory=DeviceInfo)
    framework: dict[str, str] = field(default_factory=dict)
    optimizer: OptimizerInfo = field(default_factory=OptimizerInfo)
    phases: PhaseTimes = field(default_factory=PhaseTimes)
    iterations: int = 0
    world_size: int = 1
    allreduce: list[AllReduceBucket] = field(default_factory=list)
    input_bytes_per_sample: float = 0.0
    notes: list[str] = field(default_factory=list)
    parallelism: Parallelism | None = None
    activation_checkpointing: Checkpointing | None = None
    fsdp: dict[str, str] = field(default_factory=dict)
    collectives: list[UnitCollective] = field(default_factory=list)
    saved_tensors: str | None = None
    timing: str | None = None
    peak_memory: list[RankMemory] = field(default_factory=list)
    measurement: MeasurementInfo | None = None
    stack: DetectedStack | None = None

    # ---- derived totals -------------------------------------------------------------------
    @property
    def batch_fixed_fraction(self) -> float:
        """Share of a measured time that does not grow with the batch (per-call costs: launches,
        dispatch, weight reads), from ``phases.analysed_s`` and ``analysed_half_s`` under
        ``t(b) = a + c * b``: ``2 * t(B/2) / t(B) - 1``, clipped to [0, 1]; 0 (time proportional
        to the work) when they were not measured."""
        full, half = self.phases.analysed_s, self.phases.analysed_half_s
        if not full or half is None:
            return 0.0
        return min(max(2.0 * half / full - 1.0, 0.0), 1.0)

    @property
    def measured(self) -> bool:
        """True when the layers carry measured forward/backward times, or the whole step was timed."""
        return any(layer.fwd_s is not None for layer in self.layers) or (self.timing == "step" and bool(self.phases.total_s))

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def grad_bytes(self) -> int:
        return sum(layer.grad_bytes for layer in self.layers)

    @property
    def fwd_flops(self) -> float:
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def bwd_flops(self) -> float:
        return sum(layer.bwd_flops for layer in self.layers)

    @property
    def activation_bytes(self) -> float:
        return sum(layer.activation_bytes for layer in self.layers)

    def gradient_order(self) -> list[LayerProfile]:
        """Layers with gradients in the order their gradients become ready during backward.

        Uses the recorded ``grad_ready_order`` where present; otherwise reverse execution order
        (what DDP assumes).
        """
        with_grads = [layer for layer in self.layers if layer.grad_bytes > 0]
        if with_grads and all(layer.grad_ready_order is not None for layer in with_grads):
            return sorted(with_grads, key=lambda layer: layer.grad_ready_order)  # type: ignore[arg-type,return-value]
        return list(reversed(with_grads))

    # ---- rescaling ------------------------------------------------------------------------
    def rescale(self, batch_size: int | None = None, seq_len: int | None = None) -> "Profile":
        """Return a copy for another per-GPU batch size and/or sequence length.

        FLOPs, bytes and activations scale linearly with the batch; with the sequence length
        linearly, except the ``*_seq2`` parts, which scale with its square, and the weights' share
        of the bytes (read once in forward, read and gradient-written in backward: ``grad_bytes``
        and twice that), which does not scale. A measured time keeps its fixed share
        (``batch_fixed_fraction``: per-call costs) and scales the rest like the layer's FLOPs:
        ``t' = t * (f + (1 - f) * FLOP ratio)``; the optimizer and collectives do not scale.

        Raises:
            SriftError: for a non-positive size, or a seq_len on a profile without one.
        """
        b_new = self.batch_size if batch_size is None else int(batch_size)
        if b_new <= 0:
            raise SriftError(f"batch size must be positive, got {batch_size}.", "pass --batch-size 1 or more.")
        s_old = self.seq_len
        s_new = s_old if seq_len is None else int(seq_len)
        if seq_len is not None:
            if s_old is None:
                raise SriftError(
                    f"profile '{self.name}' has no sequence length, so --seq-len {seq_len} cannot apply.",
                    "drop --seq-len for this model.",
                )
            if seq_len <= 0:
                raise SriftError(f"sequence length must be positive, got {seq_len}.", "pass --seq-len 1 or more.")
        if b_new == self.batch_size and s_new == s_old:
            return self
        rb = b_new / self.batch_size
        rs = (s_new / s_old) if (s_old and s_new) else 1.0

        def scale(total: float, quad: float) -> float:
            return (total - quad) * rb * rs + quad * rb * rs * rs

        def scale_bytes(total: float, weights: float) -> float:
            fixed = min(total, weights)
            return (total - fixed) * rb * rs + fixed

        fixed_share = self.batch_fixed_fraction

        def timed(work_ratio: float) -> float:  # measured-time ratio for a work ratio (fixed share kept)
            return fixed_share + (1.0 - fixed_share) * work_ratio

        layers = []
        for layer in self.layers:
            fwd = scale(layer.fwd_flops, layer.fwd_flops_seq2)
            bwd = scale(layer.bwd_flops, layer.bwd_flops_seq2)
            fr = timed(fwd / layer.fwd_flops if layer.fwd_flops else rb * rs)
            br = timed(bwd / layer.bwd_flops if layer.bwd_flops else rb * rs)
            layers.append(
                dataclasses.replace(
                    layer,
                    fwd_flops=fwd,
                    bwd_flops=bwd,
                    fwd_flops_seq2=layer.fwd_flops_seq2 * rb * rs * rs,
                    bwd_flops_seq2=layer.bwd_flops_seq2 * rb * rs * rs,
                    fwd_bytes=scale_bytes(layer.fwd_bytes, layer.grad_bytes + layer.frozen_bytes),
                    bwd_bytes=scale_bytes(layer.bwd_bytes, 2.0 * (layer.grad_bytes + layer.frozen_bytes)),
                    activation_bytes=scale(layer.activation_bytes, layer.activation_bytes_seq2),
                    activation_bytes_seq2=layer.activation_bytes_seq2 * rb * rs * rs,
                    saved_bytes=None if layer.saved_bytes is None else scale(layer.saved_bytes, layer.saved_bytes_seq2),
                    saved_bytes_seq2=layer.saved_bytes_seq2 * rb * rs * rs,
                    saved_half_bytes=None if layer.saved_half_bytes is None
                    else scale(layer.saved_half_bytes, layer.saved_half_bytes_seq2),
                    saved_half_bytes_seq2=layer.saved_half_bytes_seq2 * rb * rs * rs,
                    fwd_s=None if layer.fwd_s is None else layer.fwd_s * fr,
                    fwd_s_std=None if layer.fwd_s_std is None else layer.fwd_s_std * fr,
                    bwd_s=None if layer.bwd_s is None else layer.bwd_s * br,
                    bwd_s_std=None if layer.bwd_s_std is None else layer.bwd_s_std * br,
                    # Factor rows grow with the batch and the sequence; inverses and
                    # preconditioning depend on the factor dimensions only.
                    kfac_factor_a_s=None if layer.kfac_factor_a_s is None else layer.kfac_factor_a_s * rb * rs,
                    kfac_factor_g_s=None if layer.kfac_factor_g_s is None else layer.kfac_factor_g_s * rb * rs,
                    # A Linear applied to every token has the sequence as its factor rows per sample.
                    kfac_spatial=s_new if (layer.kfac_spatial is not None and layer.kfac_spatial == s_old)
                    else layer.kfac_spatial,
                )
            )
        ratio_flops = (sum(l.fwd_flops + l.bwd_flops for l in layers) / max(self.fwd_flops + self.bwd_flops, 1e-30))
        ph = self.phases
        data_s = None if ph.data_s is None else ph.data_s * rb
        total_s = None
        if ph.total_s is not None:
            # The measured time no layer accounts for (loss, functional ops, launch gaps) scales with
            # the work, like the compute model's cross-GPU path scales it; collectives and the
            # optimizer do not change with the batch.
            def layer_sum(ls: list[LayerProfile]) -> float:
                return sum((l.fwd_s or 0.0) + (l.bwd_s or 0.0) for l in ls)

            # Nor do zero_grad (the parameters') and the host's own Python (srift.profiling.host).
            fixed = ((ph.optimizer_s or 0.0) + (ph.collectives_s or 0.0) + (ph.comm_wait_s or 0.0)
                     + (ph.zero_grad_s or 0.0) + (ph.host_s or 0.0))
            rest = max(ph.total_s - (ph.data_s or 0.0) - layer_sum(self.layers) - fixed, 0.0)
            total_s = (data_s or 0.0) + layer_sum(layers) + fixed + rest * timed(ratio_flops)
        phases = dataclasses.replace(
            ph,
            data_s=data_s,
            forward_s=None if ph.forward_s is None else ph.forward_s * timed(ratio_flops),
            backward_s=None if ph.backward_s is None else ph.backward_s * timed(ratio_flops),
            total_s=total_s,
            total_s_std=None if ph.total_s_std is None or ph.total_s is None or total_s is None
            else ph.total_s_std * total_s / max(ph.total_s, 1e-30),
            total_s_unhooked=None if ph.total_s_unhooked is None or ph.total_s is None or total_s is None
            else ph.total_s_unhooked * total_s / max(ph.total_s, 1e-30),
            # The same fixed seconds are a smaller (larger) share of a larger (smaller) batch's time.
            **self._rescaled_analysed(timed(ratio_flops)),
        )
        return dataclasses.replace(
            self,
            batch_size=b_new,
            seq_len=s_new,
            layers=layers,
            phases=phases,
            input_bytes_per_sample=self.input_bytes_per_sample * rs,
            notes=self.notes + [f"rescaled from batch {self.batch_size}, seq_len {s_old}"],
        )

    def _rescaled_analysed(self, time_ratio: float) -> dict[str, float | None]:
        """``analysed_s`` and ``analysed_half_s`` at a batch whose time is ``time_ratio`` times this
        one's, keeping the fixed seconds ``a`` (``t(B/2) = (t(B) + a) / 2``)."""
        ph = self.phases
        if not ph.analysed_s or ph.analysed_half_s is None:
            return {}
        fixed_s = self.batch_fixed_fraction * ph.analysed_s
        full = ph.analysed_s * time_ratio
        return {"analysed_s": full, "analysed_half_s": (full + fixed_s) / 2.0}

    # ---- serialization --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict in file order (``schema`` first), ready for YAML or JSON."""
        return {
            "schema": SCHEMA,
            "name": self.name,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "precision": self.precision,
            "device": self.device.to_dict(),
            "framework": dict(self.framework),
            "optimizer": self.optimizer.to_dict(),
            "iterations": self.iterations,
            "world_size": self.world_size,
            "input_bytes_per_sample": self.input_bytes_per_sample,
            "totals": {
                "params": self.params,
                "grad_bytes": self.grad_bytes,
                "fwd_flops": self.fwd_flops,
                "bwd_flops": self.bwd_flops,
                "flops_unit": "FLOP (2 per multiply-add, torch FlopCounterMode)",
            },
            "phases": dataclasses.asdict(self.phases),
            "allreduce": [dataclasses.asdict(b) for b in self.allreduce],
            **self._sharding_dict(),
            **self._measured_dict(),
            "notes": list(self.notes),
            "layers": [_layer_to_dict(layer) for layer in self.layers],
        }

    def _sharding_dict(self) -> dict[str, Any]:
        """The FSDP fields, only when set (profiles of other jobs stay as they were)."""
        out: dict[str, Any] = {}
        if self.parallelism is not None:
            out["parallelism"] = self.parallelism
        if self.activation_checkpointing is not None:
            out["activation_checkpointing"] = self.activation_checkpointing
        if self.fsdp:
            out["fsdp"] = dict(self.fsdp)
        if self.collectives:
            out["collectives"] = [dataclasses.asdict(c) for c in self.collectives]
        if self.saved_tensors is not None:
            out["saved_tensors"] = self.saved_tensors
        return out

    def _measured_dict(self) -> dict[str, Any]:
        """How the run was timed and its peak memory, only when measured (structural profiles stay as
        they were; readers that predate these fields ignore them)."""
        out: dict[str, Any] = {}
        if self.timing is not None:
            out["timing"] = self.timing
        if self.peak_memory:
            out["peak_memory"] = [dataclasses.asdict(m) for m in self.peak_memory]
        if self.measurement is not None:
            out["measurement"] = dataclasses.asdict(self.measurement)
        if self.stack is not None:
            out["stack"] = self.stack.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "profile") -> "Profile":
        """Build and validate a Profile from a parsed YAML/JSON document.

        Every number is checked against what srift models (srift/bounds.py): finite, not
        negative, and within its bound, so that nothing a prediction derives from it can
        overflow or come out negative.

        Raises:
            SriftError: naming the first field that is missing or wrong.
        """
        if not isinstance(data, dict):
            raise _bad(source, "the file is not a mapping of fields")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise _bad(source, f"'schema' is {shown(schema)}, expected '{SCHEMA}'")
        for key in ("name", "batch_size", "precision", "layers"):
            if key not in data:
                raise _bad(source, f"required field '{key}' is missing")
        name = _text(data["name"], "name", source)
        batch = _int(data["batch_size"], "batch_size", source, MAX_BATCH_SIZE, low=1)
        seq = data.get("seq_len")
        if seq is not None:
            seq = _int(seq, "seq_len", source, MAX_SEQ_LEN, low=1)
        precision = data["precision"]
        if not isinstance(precision, str) or precision not in PRECISIONS:
            raise _bad(source, f"'precision' must be one of {', '.join(PRECISIONS)}, got {shown(precision)}")
        raw_layers = data["layers"]
        if not isinstance(raw_layers, list) or not raw_layers:
            raise _bad(source, "'layers' must be a non-empty list")
        if len(raw_layers) > MAX_LAYERS:
            raise _bad(source, f"'layers' has {len(raw_layers):,} entries; srift models at most {MAX_LAYERS:,}")
        layers = [_layer_from_dict(item, i, source) for i, item in enumerate(raw_layers)]
        phases_raw = _mapping(data.get("phases"), "phases", source)
        phase_fields = {f.name for f in dataclasses.fields(PhaseTimes)}
        phases = PhaseTimes(**{k: _opt_float(v, f"phases.{k}", source) for k, v in phases_raw.items() if k in phase_fields})
        raw_buckets = data.get("allreduce") or []
        if not isinstance(raw_buckets, list):
            raise _bad(source, "'allreduce' must be a list of buckets")
        buckets = [_bucket(b, i, source) for i, b in enumerate(raw_buckets)]
        parallelism = data.get("parallelism")
        if parallelism is not None and parallelism not in PARALLELISMS:
            raise _bad(source, f"'parallelism' must be one of {', '.join(PARALLELISMS)} or null, got {shown(parallelism)}")
        checkpointing = data.get("activation_checkpointing")
        if checkpointing is not None and checkpointing not in CHECKPOINTING:
            raise _bad(source, f"'activation_checkpointing' must be one of {', '.join(CHECKPOINTING)} or null, "
                               f"got {shown(checkpointing)}")
        fsdp = _scalars(data.get("fsdp"), "fsdp", source)
        raw_collectives = data.get("collectives") or []
        if not isinstance(raw_collectives, list):
            raise _bad(source, "'collectives' must be a list")
        if len(raw_collectives) > MAX_LAYERS:
            raise _bad(source, f"'collectives' has {len(raw_collectives):,} entries; srift reads at most {MAX_LAYERS:,}")
        collectives = [_collective_from_dict(c, i, source) for i, c in enumerate(raw_collectives)]
        timing = data.get("timing")
        if timing is not None and timing not in TIMING_MODES:
            raise _bad(source, f"'timing' must be one of {', '.join(TIMING_MODES)} or null, got {shown(timing)}")
        raw_memory = data.get("peak_memory") or []
        if not isinstance(raw_memory, list) or len(raw_memory) > MAX_GPUS:
            raise _bad(source, f"'peak_memory' must be a list of at most {MAX_GPUS:,} ranks")
        peak_memory = [_rank_memory(m, i, source) for i, m in enumerate(raw_memory)]
        measurement = _measurement(data.get("measurement"), source)
        device = _scalars(data.get("device") or {}, "device", source)
        for key in ("name", "kind", "gpu"):
            if device.get(key) is not None and not isinstance(device[key], str):
                raise _bad(source, f"'device.{key}' must be a string, got {shown(device[key])}")
        optimizer = _scalars(data.get("optimizer") or {}, "optimizer", source)
        if "state_bytes_per_param" in optimizer:
            _num(optimizer["state_bytes_per_param"], "optimizer.state_bytes_per_param", source, MAX_STATE_BYTES_PER_PARAM)
        if optimizer.get("type") is not None and not isinstance(optimizer["type"], str):
            raise _bad(source, f"'optimizer.type' must be a string, got {shown(optimizer['type'])}")
        notes = data.get("notes") or []
        if not isinstance(notes, list) or any(isinstance(n, (list, dict)) for n in notes):
            raise _bad(source, "'notes' must be a list of strings")
        profile = cls(
            name=name,
            batch_size=batch,
            precision=precision,
            layers=layers,
            seq_len=seq,
            device=DeviceInfo(name=device.get("name") or "none", kind=device.get("kind") or "none", gpu=device.get("gpu")),
            framework={str(k): str(v) for k, v in _scalars(data.get("framework"), "framework", source).items()},
            optimizer=OptimizerInfo(type=optimizer.get("type") or "SGD",
                                    state_bytes_per_param=optimizer.get("state_bytes_per_param", 4)),
            phases=phases,
            iterations=_int(data.get("iterations") or 0, "iterations", source, MAX_ITERS),
            world_size=_int(data.get("world_size") or 1, "world_size", source, MAX_GPUS, low=1),
            allreduce=buckets,
            input_bytes_per_sample=_num(data.get("input_bytes_per_sample") or 0.0, "input_bytes_per_sample", source,
                                        MAX_SAMPLE_BYTES),
            notes=[inert(n, MAX_NOTE_CHARS) for n in notes[:MAX_NOTES]],  # shown to people: one bounded line each
            parallelism=parallelism,
            activation_checkpointing=checkpointing,
            fsdp={str(k): str(v) for k, v in fsdp.items()},
            collectives=collectives,
            saved_tensors=_saved_schema(data.get("saved_tensors"), source),
            timing=timing,
            peak_memory=peak_memory,
            measurement=measurement,
            stack=None if data.get("stack") is None else DetectedStack.from_dict(data["stack"], source),
        )
        # An iteration of no work takes no time: every throughput would divide by zero.
        if profile.measured:
            measured_s = sum((l.fwd_s or 0.0) + (l.bwd_s or 0.0) for l in layers) + (phases.total_s or 0.0)
            if measured_s < MIN_MEASURED_S:
                raise _bad(source, f"its measured times add up to {measured_s:g} s, less than the {MIN_MEASURED_S:g} s "
                                   "of any real iteration")
        elif not any(l.fwd_flops or l.bwd_flops or l.fwd_bytes or l.bwd_bytes for l in layers):
            raise _bad(source, "its layers do no work (every FLOP and byte count is zero)")
        check_backward_ratio(layers, source)
        return profile

    def save(self, path: str | Path, overwrite: bool = True) -> Path:
        """Write the profile as YAML, atomically (``overwrite=False``: FileExistsError, and nothing
        written, when the file exists)."""
        return write_yaml(path, self.to_dict(), overwrite)

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """Read and validate a profile file (YAML or JSON)."""
        return cls.from_dict(read_yaml(path, "profile", MAX_PROFILE_BYTES), source=str(path))


# Upper bound of each numeric layer field (srift/bounds.py); integers are those of _INT_FIELDS.
_LAYER_BOUNDS: dict[str, float] = {
    "params": MAX_LAYER_PARAMS, "param_tensors": MAX_LAYER_PARAMS, "grad_bytes": MAX_LAYER_BYTES, "grad_ready_order": MAX_LAYERS,
    "kfac_a_dim": MAX_KFAC_DIM, "kfac_g_dim": MAX_KFAC_DIM, "kfac_spatial": MAX_KFAC_SPATIAL,
    "fwd_flops": MAX_LAYER_FLOPS, "bwd_flops": MAX_LAYER_FLOPS, "fwd_flops_seq2": MAX_LAYER_FLOPS,
    "bwd_flops_seq2": MAX_LAYER_FLOPS, "fwd_bytes": MAX_LAYER_BYTES, "bwd_bytes": MAX_LAYER_BYTES,
    "activation_bytes": MAX_LAYER_BYTES, "activation_bytes_seq2": MAX_LAYER_BYTES, "frozen_bytes": MAX_LAYER_BYTES,
    "saved_bytes": MAX_LAYER_BYTES, "saved_bytes_seq2": MAX_LAYER_BYTES,
    "saved_half_bytes": MAX_LAYER_BYTES, "saved_half_bytes_seq2": MAX_LAYER_BYTES,
}
_INT_FIELDS = {"params", "param_tensors", "grad_bytes", "grad_ready_order", "kfac_a_dim", "kfac_g_dim", "kfac_spatial"}
KFAC_TIME_FIELDS = ("kfac_factor_a_s", "kfac_factor_g_s", "kfac_inverse_a_s", "kfac_inverse_g_s", "kfac_precondition_s")
_OPTIONAL = {"param_tensors", "fwd_s", "fwd_s_std", "bwd_s", "bwd_s_std", "grad_ready_order", "kfac_a_dim", "kfac_g_dim", "kfac_spatial",
             "unit", "saved_bytes", "saved_half_bytes", *KFAC_TIME_FIELDS}
# A part that grows with seq_len squared is part of its total: rescaling relies on total >= part.
_SEQ2_OF = {"fwd_flops_seq2": "fwd_flops", "bwd_flops_seq2": "bwd_flops", "activation_bytes_seq2": "activation_bytes",
            "saved_bytes_seq2": "saved_bytes", "saved_half_bytes_seq2": "saved_half_bytes"}


def _layer_to_dict(layer: LayerProfile) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(LayerProfile):
        value = getattr(layer, f.name)
        # Keep files small: omit optional fields that are unset and seq2 parts that are zero.
        if value is None and f.name in _OPTIONAL:
            continue
        if (f.name.endswith("_seq2") or f.name == "frozen_bytes") and not value:
            continue
        out[f.name] = value
    return out


def _layer_from_dict(item: Any, index: int, source: str) -> LayerProfile:
    if not isinstance(item, dict):
        raise _bad(source, f"layers[{index}] must be a mapping")
    known = {f.name for f in dataclasses.fields(LayerProfile)}
    for key in ("name", "type"):
        if key not in item:
            raise _bad(source, f"layers[{index}] is missing '{key}'")
    kwargs: dict[str, Any] = {"name": _text(item["name"], f"layers[{index}].name", source),
                              "type": _text(item["type"], f"layers[{index}].type", source)}
    for key, value in item.items():
        if key in ("name", "type") or key not in known:
            continue  # unknown per-layer keys are tolerated: newer profilers may add fields
        where = f"layers[{index}].{key}"
        if key == "unit":
            if value is not None and not isinstance(value, str):
                raise _bad(source, f"{where} must be a module name or null, got {shown(value)}")
            kwargs[key] = None if value is None else _text(value, where, source)
        elif value is None and key in _OPTIONAL:
            kwargs[key] = None
        elif key in _INT_FIELDS:
            kwargs[key] = _int(value, where, source, _LAYER_BOUNDS[key], integral_float=True)
        else:
            kwargs[key] = _num(value, where, source, _LAYER_BOUNDS.get(key, MAX_LAYER_S))
    layer = LayerProfile(**kwargs)
    for part, total in _SEQ2_OF.items():
        if getattr(layer, part) > (getattr(layer, total) or 0.0):
            raise _bad(source, f"layers[{index}].{part} ({getattr(layer, part):g}) is more than its total {total} "
                               f"({getattr(layer, total) or 0.0:g})")
    return layer


SAVED_SCHEMAS = ("srift.saved-tensors/v1",)  # how saved_bytes were counted (srift/profiling/saved.py)


def _saved_schema(value: Any, source: str) -> str | None:
    if value is not None and value not in SAVED_SCHEMAS:
        raise _bad(source, f"'saved_tensors' must be one of {', '.join(SAVED_SCHEMAS)} or null, got {shown(value)}")
    return value


def _bucket(item: Any, index: int, source: str) -> AllReduceBucket:
    if not isinstance(item, dict) or not all(k in item for k in ("rank", "index", "size_bytes", "time_s")):
        raise _bad(source, f"allreduce[{index}] needs rank, index, size_bytes and time_s")
    where = f"allreduce[{index}]"
    return AllReduceBucket(_int(item["rank"], f"{where}.rank", source, MAX_GPUS),
                           _int(item["index"], f"{where}.index", source, MAX_LAYERS),
                           _int(item["size_bytes"], f"{where}.size_bytes", source, MAX_LAYER_BYTES),
                           _num(item["time_s"], f"{where}.time_s", source, MAX_LAYER_S),
                           None if item.get("ready_to_done_s") is None
                           else _num(item["ready_to_done_s"], f"{where}.ready_to_done_s", source, MAX_LAYER_S))


def _rank_memory(item: Any, index: int, source: str) -> RankMemory:
    where = f"peak_memory[{index}]"
    keys = ("rank", "max_allocated_bytes", "max_reserved_bytes")
    if not isinstance(item, dict) or not all(k in item for k in keys):
        raise _bad(source, f"{where} needs {', '.join(keys)}")
    return RankMemory(_int(item["rank"], f"{where}.rank", source, MAX_GPUS),
                      _int(item["max_allocated_bytes"], f"{where}.max_allocated_bytes", source, MAX_LAYER_BYTES),
                      _int(item["max_reserved_bytes"], f"{where}.max_reserved_bytes", source, MAX_LAYER_BYTES))


def _measurement(item: Any, source: str) -> MeasurementInfo | None:
    """The ``measurement`` mapping (None when absent: a v1 profile, or not measured)."""
    if item is None:
        return None
    raw = _scalars(item, "measurement", source)
    for key, allowed in (("method", MEASUREMENT_METHODS), ("clock", CLOCKS), ("aggregate", AGGREGATES)):
        if raw.get(key) not in allowed:
            raise _bad(source, f"'measurement.{key}' must be one of {', '.join(allowed)}, got {shown(raw.get(key))}")
    threads, wait = raw.get("threads"), raw.get("run_queue_s")
    hooked, cost, steps = raw.get("hooked_step_s"), raw.get("hook_overhead_s"), raw.get("unhooked_steps")
    return MeasurementInfo(raw["method"], raw["clock"], raw["aggregate"],
                           None if threads is None else _int(threads, "measurement.threads", source, MAX_THREADS, low=1),
                           None if wait is None else _num(wait, "measurement.run_queue_s", source, MAX_LAYER_S),
                           None if hooked is None else _num(hooked, "measurement.hooked_step_s", source, MAX_LAYER_S),
                           None if cost is None else _num(cost, "measurement.hook_overhead_s", source, MAX_LAYER_S),
                           None if steps is None else _int(steps, "measurement.unhooked_steps", source, MAX_ITERS))


def _collective_from_dict(item: Any, index: int, source: str) -> UnitCollective:
    where = f"collectives[{index}]"
    keys = ("rank", "kind", "phase", "size_bytes", "calls", "time_s")
    if not isinstance(item, dict) or not all(k in item for k in keys):
        raise _bad(source, f"{where} needs rank, unit, kind, phase, size_bytes, calls and time_s")
    kind, phase, unit = item["kind"], item["phase"], item.get("unit")
    if kind not in COLLECTIVE_KINDS:
        raise _bad(source, f"{where}.kind must be one of {', '.join(COLLECTIVE_KINDS)}, got {shown(kind)}")
    if phase not in COLLECTIVE_PHASES:
        raise _bad(source, f"{where}.phase must be one of {', '.join(COLLECTIVE_PHASES)}, got {shown(phase)}")
    if unit is not None and not isinstance(unit, str):
        raise _bad(source, f"{where}.unit must be a module name or null, got {shown(unit)}")
    return UnitCollective(_int(item["rank"], f"{where}.rank", source, MAX_GPUS),
                          None if unit is None else _text(unit, f"{where}.unit", source), kind, phase,
                          _int(item["size_bytes"], f"{where}.size_bytes", source, MAX_LAYER_BYTES),
                          _num(item["calls"], f"{where}.calls", source, MAX_ITERS * MAX_LAYERS),
                          _num(item["time_s"], f"{where}.time_s", source, MAX_LAYER_S * MAX_ITERS))


def _num(value: Any, where: str, source: str, high: float) -> float:
    """A finite number in ``[0, high]``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= high:
        # (NaN fails the comparison; an int too large for a float compares exactly)
        raise _bad(source, f"{where} must be a number from 0 to {high:g}, got {shown(value)}")
    return float(value)


def _int(value: Any, where: str, source: str, high: float, low: int = 0, integral_float: bool = False) -> int:
    """An integer in ``[low, high]`` (with ``integral_float``, a float with no fraction counts)."""
    if integral_float and isinstance(value, float) and value.is_integer():
        value = int(value) if low <= value <= high else value
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _bad(source, f"{where} must be an integer from {low} to {high:,.0f}, got {shown(value)}")
    return value


def _opt_float(value: Any, where: str, source: str) -> float | None:
    return None if value is None else _num(value, where, source, MAX_LAYER_S)


def _text(value: Any, where: str, source: str) -> str:
    """A one-line printable name (numbers are taken as their text)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS or not value.isprintable():
        raise _bad(source, f"{where} must be a one-line name of at most {MAX_NAME_CHARS} characters, got {shown(value)}")
    return value


def _mapping(value: Any, where: str, source: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(source, f"'{where}' must be a mapping")
    return value


def _scalars(value: Any, where: str, source: str) -> dict[str, Any]:
    """A mapping of plain values (text, numbers, booleans, null): nothing nested."""
    out = _mapping(value, where, source)
    for key, v in out.items():
        if not isinstance(key, str) or not (v is None or isinstance(v, (str, int, float, bool))):
            raise _bad(source, f"'{where}' must map names to plain values, got {shown(key)}: {shown(v)}")
    return dict(out)


def _bad(source: str, what: str) -> SriftError:
    return SriftError(
        f"{source} is not a valid srift profile: {what}.",
        "re-create it with `srift profile`, or fix the field (schema in docs/profile-schema.md).",
    )
