"""The layout, its plan, its settings and its checks: ``Layout`` (the degrees and batches),
``LayoutPlan`` (one priced iteration), ``LayoutParams`` (the fitted figures), what a layout
cannot run, where its groups' ranks fall, and which stack (Megatron-Core or PyTorch) it runs.

Part of the layout simulator (srift/simulate/layouts.py: the model as a whole)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from srift.bounds import require
from srift.errors import SriftError
from srift.files import configs_dir, read_json
from srift.job import DDP, FSDP, HSDP, INTERLEAVED, LAYOUT_PARALLELISMS, PIPELINE_SCHEDULES, RecomputeModule
from srift.simulate.breakdown import Breakdown
from srift.simulate.finetune import LoraSpec
from srift.simulate.memory import fits
from srift.simulate.moe import check_ep
from srift.zoo.llm import DecoderArch


SCHEDULES = PIPELINE_SCHEDULES
DP_FLAVOURS = LAYOUT_PARALLELISMS
SHARDED_FLAVOURS = (FSDP, HSDP)  # parameters sharded per block (FSDP2 under TP/PP/CP: torchtitan)
LAYOUT_CHECKPOINTING = ("none", "selective", "full")
ADAM_STATE_BYTES = 8.0  # two fp32 moments per parameter
PARAM_BYTES = 2.0  # bf16 weights as computed
# Gradient buffers and their data-parallel reduction in bf16: NeMo's performance recipes set
# ``grad_reduce_in_fp32 = False`` (Megatron-Core's DDP then keeps the grads in the param dtype).
GRAD_BYTES = 2.0
# Layout search: micro-batch sizes and virtual stages tried (Megatron's recipes use 1-4 and 1-12).
SEARCH_MICRO_BATCHES = (1, 2, 4, 8)
SEARCH_VIRTUAL_STAGES = (1, 2, 3, 4, 6, 8, 12)
SEARCH_CONTEXT = (1, 2, 4, 8, 16, 32)
SEARCH_EXPERT = (1, 2, 4, 8, 16, 32, 64)  # Megatron-Bridge's MoE recipes run EP 8 to 64
# Transformer Engine's userbuffers (Megatron's --tp-comm-overlap, NeMo's tp_comm_overlap) overlap
# each of a block's 10 sequence-parallel collectives with a GEMM. TE's ``initialize_ub`` defaults
# (transformer_engine 2.8.0, pytorch/module/base.py: num_sm 1 for ring_exchange, 16 otherwise):
# the 4 ring-exchange ones (forward's 2 all-gathers, backward's 2 gradient all-gathers) move data
# with the copy engines and hold UB_RING_EXCHANGE_SMS; the 6 pipelined or bulk ones (forward's
# reduce-scatters, backward's input re-gathers and reduce-scatters) hold UB_PIPELINE_SMS, the GEMM
# beside them running on the other SMs (``set_sm_margin``). A compute-bound GEMM loses the SMs'
# share of its rate while the collective runs: a hidden TP second costs ``tp_overlap_share`` of a
# second, not the NCCL all-reduce interference (``overlap_interference``, fitted on eager DDP runs).
UB_RING_EXCHANGE_SMS = 1
UB_PIPELINE_SMS = 16
UB_RING_EXCHANGE_COLLECTIVES, UB_PIPELINE_COLLECTIVES = 4, 6
# NCCL runs a send/receive with one peer on NCCL_NCHANNELS_PER_NET_PEER channels (default 2), one
# CTA, so one SM, each: a hidden ring-attention step or pipeline send holds that share of the SMs
# (assumed the same for peers on NVLink), not the all-reduce interference.
P2P_CHANNELS = 2
# A hidden EP all-to-all (``ep_overlap``) holds the SMs its kernels run on: the ``alltoall``
# dispatcher's NCCL all-to-all is a send and a receive with each other rank of the EP group,
# P2P_CHANNELS channels each, at most NCCL_MAX_P2P_CHANNELS (NCCL_MAX_P2P_NCHANNELS' default,
# NCCL's 32 channels); the ``flex`` dispatcher's HybridEP kernels FLEX_DISPATCH_SMS
# (Megatron-Bridge's ``moe_hybridep_num_sms``, which its benchmark recipes set to 32).
NCCL_MAX_P2P_CHANNELS = 32
FLEX_DISPATCH_SMS = 32


# ---- the layout ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """How a job is split over its GPUs.

    Attributes:
        tp: Tensor-parallel ranks (inside a node).
        pp: Pipeline stages.
        cp: Context-parallel ranks (the sequence split ``cp`` ways).
        dp: Data-parallel replicas (the GPUs left).
        vp: Virtual stages per pipeline rank (``interleaved``; 1 otherwise).
        micro_batch: Sequences per micro-batch.
        grad_accum: Micro-batches per optimizer step per pipeline (``M``).
        schedule: One of SCHEDULES.
        ep: Expert-parallel ranks of a mixture of experts (within ``tp x cp x dp``; 1: none).
    """

    tp: int
    pp: int
    cp: int
    dp: int
    vp: int = 1
    micro_batch: int = 1
    grad_accum: int = 1
    schedule: str = "1f1b"
    ep: int = 1

    def __post_init__(self) -> None:
        for key in ("tp", "pp", "cp", "dp", "vp", "micro_batch", "grad_accum", "ep"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"layout {key} must be a positive integer, got {v!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.vp > 1 and self.schedule != INTERLEAVED:
            raise ValueError("virtual stages need the interleaved schedule")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def label(self) -> str:
        """``tp8 pp8 cp2 dp4 vp8 mb1x64``."""
        vp = f" vp{self.vp}" if self.vp > 1 else ""
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        return f"tp{self.tp} pp{self.pp} cp{self.cp} dp{self.dp}{ep}{vp} mb{self.micro_batch}x{self.grad_accum}"

    def to_dict(self) -> dict[str, int | str]:
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "dp": self.dp, "vp": self.vp,
                "micro_batch": self.micro_batch, "grad_accum": self.grad_accum, "schedule": self.schedule,
                "ep": self.ep}


def pytorch_stack(dp_flavour: str) -> bool:
    """Whether a layout under ``dp_flavour`` runs PyTorch's stack, as torchtitan does (``fsdp``,
    ``hsdp``: FSDP2, DTensor TP, compiled PyTorch kernels), rather than Megatron-Core's."""
    return dp_flavour in SHARDED_FLAVOURS


def compute_factor_of(dp_flavour: str, compute_factor: float | None = None) -> float:
    """The factor on the compute model's seconds: ``compute_factor`` when given, else the fitted
    ``megatron_compute_factor`` for Megatron-Core's kernels and 1 for PyTorch's (the compute model
    is fitted on PyTorch FSDP runs: srift/perf/compute.py)."""
    if compute_factor is not None:
        return compute_factor
    return 1.0 if pytorch_stack(dp_flavour) else load_layout_params().megatron_compute_factor


def default_tp_overlap(dp_flavour: str) -> bool:
    """The framework's default: Megatron-Core's performance recipes overlap TP communication
    (``tp_comm_overlap``); torchtitan's async TP is off unless asked
    (``enable_async_tensor_parallel``)."""
    return not pytorch_stack(dp_flavour)


_SECONDS = ("block_f_s", "block_b_s", "attention_f_s", "attention_b_s", "first_f_s", "first_b_s", "last_f_s", "last_b_s",
            "experts_f_s", "experts_b_s", "selective_f_s", "op_sac_f_s")


@dataclass(frozen=True)
class LayoutParams:
    """Fitted figures of the layout model (configs/perf/layouts.json).

    Attributes:
        megatron_compute_factor: Megatron-Core / Transformer Engine compute seconds over the
            compute model's (fitted on eager PyTorch FSDP runs): one figure for every GPU kernel
            of a block, fitted by srift/fitting/layouts.py on data/llm-parallel-layouts.
        meta: Provenance.
    """

    megatron_compute_factor: float
    meta: dict[str, object] = field(default_factory=dict, compare=False, hash=False)


LAYOUT_PARAMS_SCHEMA = "srift.perf.layouts/v1"


@functools.lru_cache(maxsize=2)
def load_layout_params(path: str | None = None) -> LayoutParams:
    """The shipped layout parameters (or those in ``path``).

    Raises:
        SriftError: for a missing or malformed file.
    """
    p = Path(path) if path else configs_dir() / "perf" / "layouts.json"
    data = read_json(p, "layout parameters", "reinstall srift-planner, or re-run scripts/validate.py --fit-layouts.")
    if not isinstance(data, dict) or data.get("schema") != LAYOUT_PARAMS_SCHEMA:
        raise SriftError(f"{p} is not a '{LAYOUT_PARAMS_SCHEMA}' file.", "reinstall srift-planner.")
    factor = float(require(data.get("megatron_compute_factor"), f"{p}: megatron_compute_factor", 0.2, 5.0,
                           hint="reinstall srift-planner."))
    return LayoutParams(factor, {k: v for k, v in data.items() if k not in ("schema", "megatron_compute_factor")})


# ---- one layout's iteration ---------------------------------------------------------------------
@dataclass(frozen=True)
class LayoutPlan:
    """One layout's iteration on one cluster.

    Attributes:
        layout: The layout.
        iteration_s: Seconds per optimizer step.
        breakdown: Seconds by phase (srift.simulate.breakdown.LAYOUT_PHASES; they add up to
            ``iteration_s``), and the communication in all (``comm_s`` added up).
        comm_s: Communication seconds per iteration by group (``tp``, ``cp``, ``ep``, ``pp``, ``dp``),
            hidden or not.
        memory_per_gpu_bytes: The most loaded stage's bytes per GPU.
        memory_breakdown_bytes: That stage's bytes by kind.
        memory_stage: Which stage that is (0-based).
        fits: Whether it fits in the GPU's memory.
        tokens_per_s: Tokens per second of the whole job.
        checkpointing: Activation checkpointing policy.
        recompute_modules: What ``selective`` recomputes (srift/simulate/recompute.py; empty otherwise).
        dp_flavour: ``zero1`` or ``ddp``.
        memory_state: ``fits``, ``may not fit`` or ``does not fit`` (srift.simulate.memory.fit_state,
            the one fit rule; ``fits`` above holds for the first two).
    """

    layout: Layout
    iteration_s: float
    breakdown: Breakdown
    comm_s: dict[str, float]
    memory_per_gpu_bytes: float
    memory_breakdown_bytes: dict[str, float]
    memory_stage: int
    fits: bool
    tokens_per_s: float
    checkpointing: str = "none"
    dp_flavour: str = "zero1"
    notes: tuple[str, ...] = field(default=())
    recompute_modules: tuple[RecomputeModule, ...] = ()
    memory_state: str = "fits"  # srift.simulate.memory.fit_state: the data-parallel path's rule


def check_sharded(dp_flavour: str, ep: int, lora: LoraSpec | None) -> str | None:
    """Why ``fsdp``/``hsdp`` under a layout is not modelled with LoRA, or None (with expert
    parallelism it is: the routed experts over the expert data-parallel group, srift/simulate/moe.py
    ``expert_shard_of``; ``ep`` is kept for the callers)."""
    if dp_flavour not in SHARDED_FLAVOURS:
        return None
    if lora is not None:
        return f"--parallelism {dp_flavour} is modelled for pre-training and full fine-tuning; use zero1 with LoRA"
    return None


def check_layout(arch: DecoderArch, layout: Layout, seq_len: int, gpus_per_node: int) -> str | None:
    """Why ``layout`` cannot run ``arch`` at ``seq_len`` on nodes of ``gpus_per_node``, or None. Tensor
    parallelism across nodes runs (its collectives priced over the network: ``tp_ranks_per_node``)."""
    if layout.tp > gpus_per_node and layout.tp % gpus_per_node:
        return (f"tp={layout.tp} spans nodes of {gpus_per_node} GPUs unevenly (tensor parallelism beyond a node "
                f"or its NVLink domain takes whole ones: a multiple of {gpus_per_node})")
    if arch.heads % layout.tp:
        return f"tp={layout.tp} does not divide the {arch.heads} attention heads"
    if arch.kv_heads % layout.tp and layout.tp % arch.kv_heads:
        return f"tp={layout.tp} and the {arch.kv_heads} key/value heads do not divide one another"
    if layout.pp > arch.n_layers:
        return f"pp={layout.pp} is more stages than the {arch.n_layers} layers"
    if layout.pp * layout.vp > arch.n_layers + 2:
        return f"pp={layout.pp} x {layout.vp} virtual stages is more than the {arch.n_layers} layers"
    why_ep = check_ep(arch, layout.ep, layout.tp * layout.cp * layout.dp)
    if why_ep:
        return why_ep
    if layout.cp > 1 and seq_len % (2 * layout.cp):
        return f"cp={layout.cp} needs a sequence length divisible by {2 * layout.cp} (2 chunks per rank)"
    if layout.schedule == INTERLEAVED and layout.pp > 1 and layout.grad_accum % layout.pp:
        return (f"the interleaved schedule needs the micro-batches per step ({layout.grad_accum}) "
                f"divisible by pp={layout.pp}")
    return None


def tp_ranks_per_node(gpus_per_node: int, tp: int) -> int:
    """Ranks of a tensor-parallel group (``tp`` consecutive ranks) on each node it spans: all of
    them within a node (or NVLink domain); beyond it, whole nodes (``check_layout``), whose
    collectives cross the network."""
    return min(tp, gpus_per_node)


def dp_ranks_per_node(gpus_per_node: int, tp: int, cp: int, pp: int, dp: int) -> int:
    """Ranks of a CP x DP group on each node it spans, evenly (``_even_ranks_per_node``: a pipeline
    depth that does not divide the node spreads a group 3, 3, 2 of 8)."""
    return _even_ranks_per_node(_group_ranks_per_node(gpus_per_node, tp, cp, tp * cp * pp, dp), cp * dp)


def state_shard(dp_flavour: str, gpus_per_node: int, tp: int, cp: int, pp: int, dp: int) -> int:
    """Ranks a stage's optimizer states are sharded over: the CP x DP group under ``zero1`` and
    ``fsdp``, its ranks on one node under ``hsdp`` (sharded within a node, replicated across
    nodes), none under ``ddp``."""
    if dp_flavour == DDP:
        return 1
    if dp_flavour == HSDP:
        return dp_ranks_per_node(gpus_per_node, tp, cp, pp, dp)
    return cp * dp


def _group_ranks_per_node(gpus_per_node: int, stride: int, size: int, outer_stride: int = 0, outer: int = 1) -> int:
    """Members of a group (``size`` ranks ``stride`` apart, times ``outer`` copies ``outer_stride``
    apart) that share rank 0's node."""
    count = 0
    for j in range(outer):
        base = j * outer_stride
        if base >= gpus_per_node:
            break
        for c in range(size):
            if base + c * stride < gpus_per_node:
                count += 1
    return max(1, count)


def _even_ranks_per_node(members: int, size: int) -> int:
    """Ranks per node of a group of ``size`` whose rank 0 shares its node with ``members`` of them
    (``_group_ranks_per_node``), cut to the most that divides the group: a group spread unevenly
    (3, 3, 2 of 8) is counted at an even share on each node, since the network carries the most
    when the fewest share a node."""
    per_node = min(members, size)
    return max(k for k in range(1, per_node + 1) if size % k == 0)


def ep_ranks_per_node(ep: int, gpus_per_node: int) -> int:
    """Ranks of an expert-parallel group (``ep`` consecutive ranks) on one node (an NVLink domain,
    srift/perf/comm.py ``topology``) for the worst-placed group: ``gcd(ep, g)``, ``min(ep, g)``
    when one divides the other (a 16-rank group in 72-GPU domains straddles two, 8 and 8)."""
    return math.gcd(ep, gpus_per_node)
