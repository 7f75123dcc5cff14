"""Result assembly: every ``Prediction`` is built here, from a plan either simulator priced.

The data-parallel simulator (srift/simulate/predictor.py: a profile's layers) and the layout
simulator (srift/simulate/layout_prediction.py: a decoder's blocks) each price a plan on a cluster
and hand it over as a ``PricedPlan``; ``assemble`` derives what every prediction derives the same
way (throughput, cost, tokens, MFU, the bottleneck, the allocator's share, the spot expectation)
and builds the ``Prediction``. The typical error a prediction quotes is chosen by one function,
``typical_error_of``, from the plan's validation group (``error_group``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from srift.cluster import Cluster
from srift.hardware import gpu as gpu_spec
from srift.job import Fp8Recipe, MoeDispatcher, usd_per_million_samples
from srift.perf.accuracy import (
    finetune_typical_error, layout_finetune_typical_error, moe_typical_error, sharded_typical_error, typical_error,
    with_cpu_profile_error,
)
from srift.perf.coverage import Coverage, sharded_coverage
from srift.simulate.layout.plan import Layout, load_layout_params
from srift.simulate.memory import allocated_parts
from srift.simulate.plans import PlanFigures
from srift.simulate.prediction import BatchShare, Prediction, bottleneck
from srift.simulate.spot import spot_expectation
from srift.stacks import stack_typical_error

# The validation group whose held-out figure a plan's prediction quotes: a profile's data-parallel
# plans (``dense``: DDP, by node count, link and network; ``sharded``: ZeRO-2, FSDP, HSDP;
# ``finetune``: a frozen base) and the layout simulator's (``layouts``: dense decoders, with their
# FP8 and FSDP2 subsets; ``moe``: mixtures of experts; ``layout_finetune``: LoRA under a layout).
ErrorGroup = Literal["dense", "sharded", "finetune", "layouts", "moe", "layout_finetune"]
LAYOUT_GROUPS: tuple[ErrorGroup, ...] = ("layouts", "moe", "layout_finetune")
# The group each layout group's stack figure is read from (srift.stacks.stack_typical_error).
_STACK_GROUP: dict[ErrorGroup, str] = {"layouts": "layouts", "moe": "moe", "layout_finetune": "finetune"}

_LAYOUT_BASIS = ("largest of leave-one-source- and model-out MAPE over the bf16 Megatron runs of "
                 "data/llm-parallel-layouts (3 sources: NVIDIA DGX Cloud H100 tables, the Megatron-LM README's H100 "
                 "weak scaling, BLOOM-176B on A100)")
_KFAC_BASIS = ("; for the first-order part only: K-FAC's factor, Cholesky-inverse and preconditioning kernels are within "
               "15 % of PipeFisher's per-block GPU timings with the GPU held out (factors of 768-4096; smaller and larger "
               "ones extrapolated: docs/kfac.md; scripts/validate.py --only kfac)")


@dataclass(frozen=True)
class PlanGroup:
    """What of a plan decides the figure its prediction quotes (``typical_error_of``).

    Attributes:
        cluster: Where the plan runs.
        layout: The layout simulator priced it (a decoder's blocks), else the data-parallel one.
        sharded: Parameters or gradients sharded (ZeRO-2, FSDP, HSDP; a layout's ``fsdp``/``hsdp``).
        finetune: A frozen base (the data-parallel path's fine-tuning modes; a layout's LoRA).
        moe: A mixture of experts (layouts).
        fp8: FP8 GEMMs (layouts).
        stack: The training stack whose held-out figure is quoted where wider (srift/stacks.py);
            None: none named (a layout under Megatron-Core's default).
        measured: Where the compute times come from (srift.perf.accuracy.MEASURED; data-parallel).
        net_class: The network's class (the dense group's multi-node figures; data-parallel).
        cpu_profile: The profile was measured on a CPU and nothing was measured on the target.
        kfac: A K-FAC job (its basis says what the figure covers).
        params: The model's parameters (the sharded group's coverage).
    """

    cluster: Cluster
    layout: bool = False
    sharded: bool = False
    finetune: bool = False
    moe: bool = False
    fp8: bool = False
    stack: str | None = None
    measured: str | None = None
    net_class: str | None = None
    cpu_profile: bool = False
    kfac: bool = False
    params: float = 0.0


@dataclass(frozen=True)
class TypicalError:
    """The figure a prediction quotes and what it rests on (Prediction's fields of these names).

    Attributes:
        pct: ``typical_error_pct``. basis: ``typical_error_basis``.
        compute_pct: ``compute_error_pct``. beyond: ``beyond_validated``.
    """

    pct: float | None
    basis: str
    compute_pct: float | None = None
    beyond: tuple[str, ...] = ()


def error_group(plan: PlanGroup) -> ErrorGroup:
    """The validation group of ``plan``: on CPU workers the dense group's figures (by node count)."""
    if plan.layout:
        return "moe" if plan.moe else "layout_finetune" if plan.finetune else "layouts"
    if plan.cluster.cpu_workers:
        return "dense"
    return "finetune" if plan.finetune else "sharded" if plan.sharded else "dense"


def typical_error_of(plan: PlanGroup, beyond: tuple[str, ...] = ()) -> TypicalError:
    """The typical error of ``plan``'s prediction: its group's held-out figure (``error_group``),
    widened beyond the sharded group's validated ranges, and the stack's where wider; ``beyond``:
    what else the prediction is beyond its measurements (named, not widened)."""
    cluster, group = plan.cluster, error_group(plan)
    cpu = cluster.cpu_workers
    if group in LAYOUT_GROUPS:
        meta = load_layout_params().meta.get("validation", {})
        pct, basis = layout_figure(group, meta if isinstance(meta, dict) else {}, sharded=plan.sharded, fp8=plan.fp8)
        if plan.stack is not None:  # the stack's held-out figure where wider (srift/stacks.py)
            pct, basis = stack_typical_error(plan.stack, pct, basis, _STACK_GROUP[group])
        return TypicalError(pct, basis, None, beyond)
    links = {g.intra_node for g in cluster.node_groups}
    if group == "finetune":
        pct, basis = finetune_typical_error()
    elif group == "sharded":
        pct, basis = sharded_typical_error()
    else:
        pct, basis = typical_error(cluster.nodes, cluster.gpus, cpu, plan.measured, links.pop() if len(links) == 1 else None,
                                   plan.net_class if cluster.nodes > 1 else None)
    compute_pct = typical_error(1, 1, cpu, plan.measured)[0]
    if not cpu and plan.measured is None and plan.cpu_profile:
        pct, basis, compute_pct = with_cpu_profile_error(pct, basis, compute_pct)
    if plan.kfac and pct is not None:
        # The figures come from first-order DDP runs; K-FAC's phases are checked per transformer
        # block only (scripts/validate.py --only kfac), no whole GPU K-FAC run.
        basis += _KFAC_BASIS
    # Node counts beyond the measured ones: the multi-node figure widens itself and the nodes
    # column says so (srift/perf/accuracy.py); the sharded group's ranges are checked here.
    coverage = (sharded_coverage(plan.params, cluster.gpus, [g.gpu for g in cluster.node_groups]) if plan.sharded
                else Coverage())
    if pct is not None and plan.sharded:
        pct, basis = pct * coverage.factor, basis + coverage.basis()
    if not cpu and plan.stack is not None:  # the stack's held-out figure where wider (srift/stacks.py)
        pct, basis = stack_typical_error(plan.stack, pct, basis)
    return TypicalError(pct, basis, compute_pct, coverage.beyond + beyond)


def layout_figure(group: ErrorGroup, validation: dict, sharded: bool = False, fp8: bool = False) -> tuple[float | None, str]:
    """The figure a layout prediction quotes: the MoE group's for a mixture of experts (it holds
    FP8 runs), the NeMo fine-tuning runs' for LoRA in a layout; from layouts.json's ``validation``
    (``loso_mape_pct``, ``lomo_mape_pct`` and the subsets' figures below),
    FP8 GEMMs (``fp8``) of a dense model their runs' (``fp8_mape_pct``: Megatron's Transformer
    Engine runs; under FSDP2, ``sharded``, ``fsdp_fp8_mape_pct``: torchtitan's float8 runs), FSDP
    under a layout torchtitan's bf16 runs' (``fsdp_mape_pct``); else the dense layout group's
    largest held-out figure (model or source left out); never below the dense group's, which every
    layout rests on."""
    v = validation
    held = [float(x) for x in (v.get("loso_mape_pct"), v.get("lomo_mape_pct")) if isinstance(x, (int, float))]
    dense = max(held) if held else None
    own, own_basis = (moe_typical_error() if group == "moe" else layout_finetune_typical_error()
                      if group == "layout_finetune" else (None, ""))
    key = "fsdp_fp8" if sharded else "fp8"
    if own is None and fp8 and isinstance(v.get(f"{key}_mape_pct"), (int, float)):
        own = float(v[f"{key}_mape_pct"])
        own_basis = (f"MAPE of the step time over {v.get(f'{key}_rows', '?')} "
                     + ("torchtitan FSDP2 runs with torchao's tensorwise float8 (data/llm-training-throughput)" if sharded
                        else "Megatron-Core runs with Transformer Engine FP8 GEMMs (data/llm-parallel-layouts)")
                     + f"; mean signed {v.get(f'{key}_bias_pct', '?')} % (+: predicted slow); nothing fitted on them, "
                     "scripts/validate.py --only layouts")
    if own is None and sharded and isinstance(v.get("fsdp_mape_pct"), (int, float)):
        own = float(v["fsdp_mape_pct"])
        own_basis = (f"MAPE of the step time over {v.get('fsdp_rows', '?')} torchtitan FSDP2 x TP runs "
                     f"(data/llm-training-throughput; mean signed {v.get('fsdp_bias_pct', '?')} %: predicted fast, "
                     "on 500 W HBM2e H100s srift prices as H100 SXM), out of sample, scripts/validate.py --only layouts")
    if own is not None and (dense is None or own >= dense):
        return own, own_basis
    return dense, _LAYOUT_BASIS


@dataclass(frozen=True)
class LayoutFacts:
    """What a layout plan adds to its prediction (Prediction's fields of these names)."""

    layout: Layout
    memory_stage: int
    layout_alternative: Layout | None
    params_total: int
    params_active: int
    moe_imbalance: float | None
    fp8: Fp8Recipe | None
    moe_dispatcher: MoeDispatcher | None


@dataclass(frozen=True)
class PricedPlan(PlanFigures):
    """A plan priced on a cluster by either simulator: what ``assemble`` builds a Prediction from.

    Attributes:
        parallelism, checkpointing, breakdown, p90_s, comm_cost_s, memory: ``PlanFigures``; here the
            breakdown holds the data loader's wait, and the p90 is as priced (never below the median
            in the result).
        cluster: Where it runs.
        global_batch: Samples per iteration.
        batch_split: Each node group's batch.
        grad_accum, micro_batch_size: Micro-batches per step and samples per GPU per micro-batch.
        state_bytes: What a checkpoint of the job writes per node (the spot expectation).
        notes: The prediction's remarks.
        error: The typical error (``typical_error_of``).
        precision: The job's precision (the GPUs' peak for MFU).
        seq_len: Tokens per sample (sequence models).
        tokens_per_sample: Tokens a sample counts for the token throughput (None: no tokens).
        flops_per_token: Training FLOPs per token counted for MFU (None: no MFU).
        model_flops_per_token: What the prediction reports of them (None without a sequence length).
        input_bound: The data loader is slower than the GPUs (bottleneck ``input``).
        data_loading, input_time_s: Where the batches come from, and the loader's seconds.
        memory_safe_batch: Under ``may not fit``, the micro-batch that fits for sure.
        grad_compression: DDP's communication hook, where it is used.
        stack: The training stack the plan is priced under.
        pair_group: The group whose pairs of runs give the error of a ratio of two predictions.
        layout: What a layout plan adds (None for a data-parallel plan).
    """

    cluster: Cluster
    global_batch: int
    batch_split: list[BatchShare]
    grad_accum: int
    micro_batch_size: int | None
    state_bytes: float
    error: TypicalError
    precision: str
    notes: list[str] = field(default_factory=list)
    seq_len: int | None = None
    tokens_per_sample: float | None = None
    flops_per_token: float | None = None
    model_flops_per_token: float | None = None
    input_bound: bool = False
    data_loading: str = "synthetic"
    input_time_s: float | None = None
    memory_safe_batch: int | None = None
    grad_compression: str | None = None
    stack: str | None = None
    pair_group: str | None = None
    layout: LayoutFacts | None = None


def assemble(plan: PricedPlan) -> Prediction:
    """The Prediction of ``plan``: throughput, cost, tokens, MFU, bottleneck, allocator share and
    spot expectation derived one way for every plan."""
    cluster, mem = plan.cluster, plan.memory
    iteration = plan.breakdown.total_s
    throughput = plan.global_batch / iteration
    cost = cluster.usd_per_hour
    tokens = throughput * plan.tokens_per_sample if plan.tokens_per_sample else None
    lay = plan.layout
    return Prediction(
        cluster=cluster.name,
        gpus=cluster.gpus,
        global_batch_size=plan.global_batch,
        iteration_time_s=iteration,
        p90_iteration_time_s=max(plan.p90_s, iteration),
        throughput_samples_per_s=throughput,
        cost_per_hour_usd=cost,
        usd_per_million_samples=usd_per_million_samples(cost, throughput),
        breakdown=plan.breakdown,
        bottleneck=bottleneck(mem.fits, plan.comm_cost_s, iteration, input_bound=plan.input_bound),
        fits_in_memory=mem.fits,
        memory_per_gpu_bytes=mem.per_gpu_bytes,
        memory_breakdown_bytes=dict(mem.breakdown_bytes),
        memory_allocated_bytes=sum(allocated_parts(mem.breakdown_bytes).values()),
        memory_fit=mem.state,
        memory_safe_batch=plan.memory_safe_batch,
        batch_split=plan.batch_split,
        spot=spot_expectation(cluster, plan.state_bytes, throughput, cost),
        notes=plan.notes,
        typical_error_pct=plan.error.pct,
        typical_error_basis=plan.error.basis,
        beyond_validated=plan.error.beyond,
        compute_error_pct=plan.error.compute_pct,
        pair_group=plan.pair_group,
        parallelism=plan.parallelism,
        activation_checkpointing=plan.checkpointing,
        grad_accum=plan.grad_accum,
        micro_batch_size=plan.micro_batch_size,
        seq_len=plan.seq_len,
        throughput_tokens_per_s=tokens,
        tokens_per_s_per_gpu=tokens / cluster.gpus if tokens is not None else None,
        mfu=mfu(cluster, tokens, plan.flops_per_token, plan.precision),
        model_flops_per_token=plan.model_flops_per_token,
        data_loading=plan.data_loading,
        input_time_s=plan.input_time_s,
        grad_compression=plan.grad_compression,
        stack=plan.stack,
        layout=None if lay is None else lay.layout,
        memory_stage=None if lay is None else lay.memory_stage,
        layout_alternative=None if lay is None else lay.layout_alternative,
        params_total=None if lay is None else lay.params_total,
        params_active=None if lay is None else lay.params_active,
        moe_imbalance=None if lay is None else lay.moe_imbalance,
        fp8=None if lay is None else lay.fp8,
        moe_dispatcher=None if lay is None else lay.moe_dispatcher,
    )


def mfu(cluster: Cluster, tokens_per_s: float | None, flops_per_token: float | None, precision: str) -> float | None:
    """Model FLOP/s over the cluster's dense peak at ``precision`` (None without tokens or FLOPs
    per token, or on CPU workers)."""
    if tokens_per_s is None or not flops_per_token or cluster.cpu_workers:
        return None
    peak = sum(g.gpus * gpu_spec(g.gpu).peak_flops(precision) for g in cluster.node_groups)
    return tokens_per_s * flops_per_token / peak
