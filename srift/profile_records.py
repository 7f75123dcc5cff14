"""The records a srift profile is made of: one leaf module (``LayerProfile``), the phase times of an
iteration, how the times were taken (``MeasurementInfo``), the measured collectives (DDP buckets, FSDP
units), peak memory per rank, the device and the optimizer (srift/profile.py holds ``Profile``,
which gathers them; srift/profile_format.py reads and checks them from a file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

@dataclass
class LayerProfile:
    """One leaf module, in execution (forward) order.

    Attributes:
        name: Qualified module name (``layer1.0.conv1``).
        type: Module class name (``Conv2d``, ``Linear``, ``LayerNorm``...).
        params: Trainable parameter count.
        param_tensors: Trainable parameter tensors the layer holds (a Conv2d without bias: 1; a
            Linear with one: 2), what ``torch.optim`` loops or batches over; None in profiles
            written before srift recorded it (srift/perf/optimizer_step.py ``param_tensor_count``
            then assumes 2).
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


KFAC_TIME_FIELDS = ("kfac_factor_a_s", "kfac_factor_g_s", "kfac_inverse_a_s", "kfac_inverse_g_s", "kfac_precondition_s")
SAVED_SCHEMAS = ("srift.saved-tensors/v1",)  # how saved_bytes were counted (srift/profiling/saved.py)
