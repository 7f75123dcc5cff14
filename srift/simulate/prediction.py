"""Prediction: the simulator's answer for one (profile, cluster, job)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from srift.job import Fp8Recipe, JobLength, JobRun, MoeDispatcher
from srift.simulate.breakdown import Breakdown
from srift.simulate.layout.plan import Layout
from srift.simulate.spot import SpotExpectation

COMM_BOUND_FRACTION = 0.2  # exposed communication above this share of the iteration: comm-bound
# The breakdown adds up to the iteration: the two are computed as one sum, so they differ by float
# rounding at most.
BREAKDOWN_SUM_REL_TOL = 1e-9


def bottleneck(fits_in_memory: bool, comm_cost_s: float, iteration_s: float, input_bound: bool = False) -> str:
    """``memory`` when the job does not fit, ``input`` when the data loader is slower than the
    GPUs, ``communication`` when the all-reduce's exposed time and interference exceed
    COMM_BOUND_FRACTION of the iteration, else ``compute``."""
    if not fits_in_memory:
        return "memory"
    if input_bound:
        return "input"
    return "communication" if comm_cost_s > COMM_BOUND_FRACTION * iteration_s else "compute"


@dataclass(frozen=True)
class BatchShare:
    """The batch one node group takes.

    Attributes:
        group: The group's label (``g5.xlarge:4``, or ``2 x (8 x A100-40GB)`` for a cluster file).
        gpu: Its GPU (canonical name, or ``cpu``).
        per_gpu_batch: Samples per GPU per iteration.
        gpus: GPUs in the group.
    """

    group: str
    gpu: str
    per_gpu_batch: int
    gpus: int


@dataclass
class Prediction:
    """Predicted iteration of a data-parallel job on a cluster.

    Attributes:
        cluster: Cluster label (instance spec or cluster file name).
        gpus: Total GPUs (workers).
        global_batch_size: Samples per iteration over the whole cluster.
        iteration_time_s: Median (p50) iteration time.
        p90_iteration_time_s: 90th percentile (network and run-to-run spread).
        throughput_samples_per_s: Whole-cluster samples per second (p50, no interruptions).
        cost_per_hour_usd: Whole-cluster price per hour (None when unpriced).
        usd_per_million_samples: Cost of one million samples (None when unpriced).
        breakdown: Seconds per phase of one iteration (the phases each plan has:
            srift/simulate/breakdown.py), and the communication exposed, hidden and in all; the
            phases add up to ``iteration_time_s`` (communication appears among them only as far as
            it is exposed; checked on construction). Empty for a speed model without phases
            (``srift.testing.SpeedModel``).
        bottleneck: ``compute``, ``communication``, ``input`` (the data loader is slower than the
            GPUs) or ``memory``.
        fits_in_memory: False when some GPU certainly needs more memory than it has (its median
            reserved peak is over the usable memory); True for ``may not fit`` too.
        memory_per_gpu_bytes: Predicted peak memory the caching allocator reserves on the most
            loaded GPU (what decides an out-of-memory error; srift/simulate/memory.py).
        memory_breakdown_bytes: weights, gradients, optimizer_state, activations (+ gathered_weights
            when sharded, kfac_factors) and allocator (reserved beyond allocated): they add up to
            ``memory_per_gpu_bytes``.
        memory_allocated_bytes: What PyTorch allocates at the peak (the breakdown less ``allocator``).
        memory_fit: ``fits`` (the p90 of the reserved peak is under the usable memory), ``may not
            fit`` (within the prediction's typical error of it) or ``does not fit``.
        memory_safe_batch: Under ``may not fit``/``does not fit``, the largest per-GPU micro-batch
            that fits for sure (None otherwise, or when even 1 does not).
        batch_split: The batch of each node group.
        spot: Expected values with interruptions (None for on-demand clusters).
        notes: Remarks (anchoring, extrapolation, etc).
        typical_error_pct: How far such predictions have been from measurements (leave-one-GPU-out
            MAPE of the matching validation group, srift/perf/accuracy.py); None where unvalidated.
        typical_error_basis: What that figure rests on.
        beyond_validated: What the prediction is beyond its validation group's measurements
            (``405B > 70B``; srift/perf/coverage.py), empty inside them.
        pair_group: The validation group whose pairs of runs give the error of the ratio of two of
            its predictions (``layouts``, ``moe``: srift.perf.accuracy.pair_typical_error), or None.
        compute_error_pct: How far the compute part alone has been from measurements: the
            single-GPU figure for where this prediction's compute times come from. It is what
            separates two GPU types' predictions (on the same GPUs the errors are shared).
        parallelism: How the job is spread: ``ddp``, ``zero2``, ``fsdp`` or ``hsdp`` (what
            ``auto`` chose, when it was asked to choose).
        activation_checkpointing: ``none``, ``selective`` or ``full``.
        grad_accum: Micro-batches per iteration (optimizer step).
        micro_batch_size: Samples per GPU per micro-batch (None when node groups differ).
        grad_compression: DDP's communication hook (``bf16``, ``powersgd:4``) when the plan is DDP
            on more than one GPU and the job sets one; None otherwise.
        seq_len: Tokens per sample (sequence models), else None.
        throughput_tokens_per_s: Whole-cluster tokens per second (sequence models; p50, no
            interruptions), else None.
        tokens_per_s_per_gpu: ``throughput_tokens_per_s`` over the GPUs.
        mfu: Model FLOPs utilisation: ``tokens/s x model_flops_per_token`` over the GPUs' dense
            peak FLOP/s at the job's precision (None without a sequence length or on CPU workers).
        model_flops_per_token: Training FLOPs per token counted for MFU (``6 N + 12 L H s`` for the
            zoo's LLMs: srift.zoo.llm.model_flops_per_token).

        data_loading: Where the batches come from: ``synthetic``, ``images``, ``tokens`` or
            ``measured`` (a profile's own data time).
        input_time_s: Seconds the slowest GPU's data loader needs per iteration (it runs beside the
            GPU: only what exceeds the GPU's iteration shows as ``data``); None when unknown (no
            vCPU count) or for ``measured``.
        layout: A decoder LLM laid out with tensor/pipeline/context parallelism: its ``Layout``
            (srift/simulate/layout/plan.py: ``tp``, ``pp``, ``cp``, ``dp``, ``vp``, ``micro_batch``,
            ``grad_accum``, ``schedule``, ``ep``; the same keys in JSON); None otherwise.
        memory_stage: The pipeline stage whose memory ``memory_per_gpu_bytes`` is (layouts).
        layout_alternative: When the layout does not fit, the fastest one that does (its ``layout``).
        params_total: A --layout job's parameters (every expert of a mixture of experts).
        params_active: Of which one token uses (its top-k routed experts); MFU counts these.
        moe_imbalance: The routing imbalance a mixture of experts was predicted at (the busiest
            expert-parallel rank's tokens over the mean; ``--moe-imbalance``); None for a dense model.
        fp8: The FP8 recipe of a layout's GEMMs (``--fp8``), None for bf16 GEMMs.
        moe_dispatcher: A mixture of experts' token dispatcher (``--moe-dispatcher``); None for a
            dense model.
        stack: The training stack the prediction is priced under (``--stack``, a profile's
            detected stack, or the default: srift/stacks.py); its note says what of it is priced.
    """

    cluster: str
    gpus: int
    global_batch_size: int
    iteration_time_s: float
    p90_iteration_time_s: float
    throughput_samples_per_s: float
    cost_per_hour_usd: float | None
    usd_per_million_samples: float | None
    breakdown: Breakdown
    bottleneck: str
    fits_in_memory: bool
    memory_per_gpu_bytes: float
    memory_breakdown_bytes: dict[str, float] = field(default_factory=dict)
    batch_split: list[BatchShare] = field(default_factory=list)
    spot: SpotExpectation | None = None
    notes: list[str] = field(default_factory=list)
    typical_error_pct: float | None = None
    typical_error_basis: str = ""
    beyond_validated: tuple[str, ...] = ()
    compute_error_pct: float | None = None
    pair_group: str | None = None
    parallelism: str = "ddp"
    activation_checkpointing: str = "none"
    grad_accum: int = 1
    micro_batch_size: int | None = None
    seq_len: int | None = None
    throughput_tokens_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    model_flops_per_token: float | None = None
    data_loading: str = "synthetic"
    input_time_s: float | None = None
    memory_allocated_bytes: float = 0.0
    memory_fit: str = "fits"
    memory_safe_batch: int | None = None
    layout: Layout | None = None
    memory_stage: int | None = None
    layout_alternative: Layout | None = None
    params_total: int | None = None
    params_active: int | None = None
    moe_imbalance: float | None = None
    fp8: Fp8Recipe | None = None
    moe_dispatcher: MoeDispatcher | None = None
    grad_compression: str | None = None
    stack: str | None = None

    def __post_init__(self) -> None:
        total = self.breakdown.total_s
        if self.breakdown and not math.isclose(total, self.iteration_time_s, rel_tol=BREAKDOWN_SUM_REL_TOL):
            raise ValueError(f"the breakdown adds up to {total!r} s, not the iteration's {self.iteration_time_s!r} s")

    @property
    def expected_throughput_samples_per_s(self) -> float:
        """Samples per second over a long run: spot interruptions included."""
        return self.spot.expected_throughput_samples_per_s if self.spot else self.throughput_samples_per_s

    @property
    def expected_throughput_tokens_per_s(self) -> float | None:
        """Tokens per second over a long run (sequence models): spot interruptions included."""
        return None if self.seq_len is None else self.expected_throughput_samples_per_s * self.seq_len

    @property
    def plan_label(self) -> str:
        """Short name of the plan: ``ddp``, ``fsdp+sel``, ``hsdp+full``, ``zero2``; a layout's
        ``tp8 pp4 cp1 dp2 vp5`` (+ its checkpointing)."""
        short = {"none": "", "selective": "+sel", "full": "+full"}
        ckpt = short.get(self.activation_checkpointing, "+" + self.activation_checkpointing)
        if self.layout:
            lay = self.layout
            vp = f" vp{lay.vp}" if lay.vp > 1 else ""
            ep = f" ep{lay.ep}" if lay.ep > 1 else ""
            return f"tp{lay.tp} pp{lay.pp} cp{lay.cp} dp{lay.dp}{ep}{vp} mb{lay.micro_batch}{ckpt}"
        return self.parallelism + ckpt

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPUs the job runs on (sorted names)."""
        return tuple(sorted({share.gpu for share in self.batch_split}))

    def job_run(self, length: JobLength) -> JobRun:
        """Steps, hours and cost of a job of ``length`` at the expected throughput."""
        return JobRun.estimate(length, self.global_batch_size, self.expected_throughput_samples_per_s, self.cost_per_hour_usd)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["breakdown"] = self.breakdown.to_json()
        return out
