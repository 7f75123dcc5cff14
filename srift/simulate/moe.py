"""Mixture-of-experts blocks under expert parallelism (EP): token dispatch and combine, the
experts' grouped GEMMs, and the experts' memory (no torch).

Expert parallelism as Megatron-Core places it ("MoE parallel folding"): the routed experts of a
block are split ``ep`` ways over the ranks of ``tp x cp x dp`` (expert tensor parallelism 1 with
``ep > 1``: an expert is not split; without EP, ``expert_tp`` below), the EP group innermost, so an EP group of up to a node's GPUs talks over
NVLink and a larger one crosses the network. Everything else (attention, norms, the router, the
shared experts, dense blocks) is laid out as a dense model's (srift/simulate/layouts.py).

Per MoE block and micro-batch, each rank:

- **routes** its ``T`` tokens (its sequence-parallel shard: ``micro_batch x seq / (cp x tp)``) to
  ``k`` experts each: ``T x k`` rows (the router's GEMM, ``hidden x experts``, is part of the block);
- **dispatches** them: an all-to-all in the EP group whose send buffer is ``T x k x hidden x bytes``
  (``(ep - 1) / ep`` of it leaves the GPU under balanced routing), and after the experts
  **combines** them with the same volume back; backward runs both again on the gradients: four
  all-to-alls per block (``CommModel.all_to_all_time_s``). The ``alltoall`` dispatcher sends each
  routed row to its expert's rank; ``flex`` (DeepEP, HybridEP) sends a token once to each other
  node that holds one of its experts and forwards it there over NVLink (``node_dedup_fraction``).
  HybridEP (the ``flex`` backend of Megatron-Bridge's recipes) permutes the tokens inside its
  dispatch and combine kernels (megatron-core 0.16.1 ``_HybridEPManager``): no separate
  permutation passes (``permute_traffic_bytes``) around its experts.
  They are exposed, unless the job overlaps them with another micro-batch's compute (Megatron's
  ``overlap_moe_expert_parallel_comm``: ``plan_layout(ep_overlap=True)``), where what the block's
  compute covers is hidden and costs the interference every hidden collective does;
- runs its ``experts / ep`` local experts as a grouped GEMM: each local expert multiplies
  ``T x k x ep / experts`` rows on average (balanced routing), ``imbalance`` times that on the
  busiest rank, whom the others wait for. Each expert's gate, up and down GEMMs are timed by the
  compute model (srift/perf/compute.py) at that row count: efficiency falls as the rows per expert
  shrink (below the GPU's FLOP-to-byte ratio a GEMM reads its expert's weights for few rows and is
  memory-bound), and the tensor cores run each expert's rows in whole instructions of
  ``mma_rows`` (64 on Hopper and Blackwell), the last one padded (``mma_padded``);
- keeps for backward the permuted input rows (``T k x hidden``), the gate and up outputs and their
  product (``3 x T k x expert_width``) and the router's fp32 probabilities (``T x experts``): the
  dispatch buffers and the active experts' activations. Megatron-Core multiplies the routing
  probabilities in the experts' activation (its weighted SwiGLU), so the combine's unpermutation
  is a plain scatter-add that keeps nothing. FP8 GEMMs keep their FP8 copy of their inputs (the
  rows, the product) instead of the bf16 one.

Element-wise glue around the experts that Megatron-Core runs as separate memory-bound passes
(counted from megatron-core 0.16.1, ``transformer/moe/experts.py`` ``TEGroupedMLP`` and
``fusions/fused_bias_geglu.py``; each applies to any model with the feature):

- a **clamped** gated activation (``DecoderArch.glu_clamp``: GPT-OSS's ``swiglu_limit``, which
  Megatron-Bridge maps to ``activation_func_clamp_value``): before the fused activation kernel,
  ``weighted_bias_quick_geglu_impl`` clamps the two halves of the ``rows x 2 width`` gate/up output
  and concatenates them again (``CLAMP_FWD_PASSES``); backward runs each clamp's masked gradient
  and the concatenation of the two halves' gradients (``CLAMP_BWD_PASSES``). The clamp runs inside
  the activation, so ``moe_act`` recompute runs it again;
- **expert biases** (``"mlp"`` in ``DecoderArch.biases`` of a MoE model: GPT-OSS): the down
  projection's bias is added weighted by the routing probability after the grouped GEMM,
  ``TEGroupedMLP._apply_bias``: per local expert ``t + b * p`` with fp32 probabilities (so fp32
  results), a ``torch.cat`` and a cast back (``EXPERT_BIAS_FWD_BYTES`` per output element); backward
  casts the gradient, reduces it into the bias and probability gradients and casts it back
  (``EXPERT_BIAS_BWD_BYTES``).

Routing imbalance: ``BALANCED_ROUTING`` 1.0 is the force-balanced routing of published benchmarks
(Megatron-Bridge's: "we force-balance the token distribution among experts"); ``REAL_ROUTING``
1.25 is the default for trained routers, *estimated*: the capacity factor GShard (Lepikhin et al.,
2020) and the Switch Transformer (Fedus et al., 2021) provision for the busiest expert, i.e. the
headroom over the mean that trained routers were found to need. It is not validated; a job sets
its own with ``--moe-imbalance``.

Memory: each rank holds ``experts / ep`` experts of each of its stage's MoE blocks; their bf16
weights and gradients whole, their fp32 master weights and Adam moments sharded over the expert
data-parallel group (``tp x cp x dp / (ep x etp)`` ranks) under the distributed optimizer.

Expert tensor parallelism (``etp``, ``expert_tp``): megatron-core 0.16.1
``model_parallel_config.py`` defaults ``expert_tensor_parallel_size`` to
``tensor_model_parallel_size``. srift takes that default where there is no expert parallelism
(``ep`` 1: each expert's gate/up columns and down rows split ``tp`` ways like a dense MLP's) and
an expert tensor parallelism of 1 with ``ep > 1`` (whole experts, as above), which every MoE recipe
of Megatron-Bridge sets (megatron-bridge 0.3.1 ``recipes/``: ``qwen/qwen3_moe.py``,
``deepseek/deepseek_v3.py``, ``gpt_oss/gpt_oss.py``, ``kimi/kimi_k2.py``, ``glm/glm45.py``, ...:
``expert_tensor_parallel_size = 1``); a run with EP that leaves Megatron-Core's default (experts
split over TP as well) is not modelled. With ``etp > 1`` the
all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``, ``transformer/moe/token_dispatcher.py``)
all-gathers the routed rows over the TP group after the dispatch
(``gather_from_sequence_parallel_region``) and reduce-scatters the experts' output before the
combine: each rank multiplies the TP group's ``etp x T k`` rows at ``1 / etp`` of the width and
keeps the gathered rows for backward, whose gradients cross the same collectives the other way.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from srift.hardware import gpu as gpu_spec
from srift.job import (BALANCED_MOE_IMBALANCE, DEFAULT_MOE_IMBALANCE, FLEX, HALF_PRECISIONS, MOE_DISPATCHERS, Fp8Recipe,
                       MoeDispatcher)
from srift.perf.comm import CommModel
from srift.perf.compute import kernel_rates, layer_kind, layer_times
from srift.perf.fp8 import fp8_times
from srift.profile import Profile
from srift.zoo.llm import GATED_MLPS, MLP_BIAS, DecoderArch, dense_mlp_params, expert_profile

BALANCED_ROUTING = BALANCED_MOE_IMBALANCE
REAL_ROUTING = DEFAULT_MOE_IMBALANCE  # --moe-imbalance's default (srift/job.py says where it comes from)
ALL_TO_ALLS_PER_BLOCK = 4  # dispatch and combine, forward and backward
ROUTER_PROB_BYTES = 4.0  # fp32 router probabilities
# Element-wise passes over the gate/up output of a clamped gated activation (module docstring),
# in elements of the ``rows x width`` half, each read or written once: forward two clamps (read and
# write a half each: 4) and the concatenation (read and write both halves: 4); backward two masked
# clamp gradients (read gradient and input, write: 6) and the concatenation of their gradients (4).
CLAMP_FWD_PASSES = 8
CLAMP_BWD_PASSES = 10
# Bytes per element of the ``rows x hidden`` down-projection output that ``_apply_bias`` moves:
# forward ``b * p`` (write fp32: 4), ``t + b p`` (read bf16 and fp32, write fp32: 10), cat (read and
# write fp32: 8), cast (read fp32, write bf16: 6); backward the cast's gradient (read 2, write 4),
# the bias gradient ``sum(g p)`` and the probability gradient ``sum(g b)`` (each writes and reads
# an fp32 product after reading the gradient: 12 each) and the cast back to bf16 (read 4, write 2).
EXPERT_BIAS_FWD_BYTES = 28.0
EXPERT_BIAS_BWD_BYTES = 36.0


@dataclass(frozen=True)
class MoeBlockShape:
    """One MoE block's routing on one rank, per micro-batch.

    Attributes:
        tokens: Tokens this rank routes (its sequence-parallel shard of the micro-batch).
        routed_rows: ``tokens x top-k``: rows it dispatches (and, balanced, receives).
        local_experts: Routed experts on this rank (``experts / ep``).
        rows_per_expert: Rows each local expert multiplies on the busiest rank.
        dispatch_bytes: One all-to-all's send buffer per rank (``routed_rows x hidden x bytes``).
        dispatch_off_gpu_bytes: Of which leaves the GPU under balanced routing (``(ep - 1) / ep``).
        expert_gemms: ``(rows, in, out)`` of each local expert's gate, up and down GEMMs (a plain,
            ungated MLP expert: up and down).
        permute_bytes: Bytes the token permutations around the experts read and write, per pass
            (forward; backward moves the same gradients): ``permute_traffic_bytes``.
        glue_f_bytes, glue_b_bytes: Bytes the element-wise glue of a clamped activation and of
            expert biases moves forward and backward (``expert_glue_bytes``).
        clamp_f_bytes: Of ``glue_f_bytes``, the clamp's (inside the activation: recomputed with it).
        etp: Expert tensor parallelism (``expert_tp``): each expert's width split ``etp`` ways.
        etp_gather_bytes: With ``etp > 1``, the TP group's gathered routed rows
            (``etp x routed_rows x hidden x bytes``) that the dispatcher all-gathers and the combine
            reduce-scatters; 0 with ``etp`` 1.
    """

    tokens: int
    routed_rows: int
    local_experts: int
    rows_per_expert: int
    dispatch_bytes: float
    dispatch_off_gpu_bytes: float
    expert_gemms: tuple[tuple[int, int, int], ...]
    permute_bytes: float = 0.0
    glue_f_bytes: float = 0.0
    glue_b_bytes: float = 0.0
    clamp_f_bytes: float = 0.0
    etp: int = 1
    etp_gather_bytes: float = 0.0


def expert_tp(tp: int, ep: int) -> int:
    """Expert tensor parallelism of a layout (module docstring): ``tp`` without expert
    parallelism (megatron-core 0.16.1's default, ``expert_tensor_parallel_size = None`` ->
    ``tensor_model_parallel_size``), 1 with ``ep > 1`` (Megatron-Bridge's MoE recipes' setting)."""
    return tp if ep == 1 else 1


def expert_dp(tp: int, cp: int, dp: int, ep: int) -> int:
    """Ranks of the expert data-parallel group: ``tp x cp x dp / (ep x etp)``."""
    return tp * cp * dp // (ep * expert_tp(tp, ep))


def expert_shard_of(shard: int, tp: int, ep: int) -> int:
    """Ranks the routed experts' sharded states are spread over when the dense parts' are spread
    over ``shard`` ranks of the CP x DP group (``state_shard``): ``shard x tp / (ep x etp)``, at
    least 1. Under ``zero1`` and ``fsdp`` (``shard`` = CP x DP) that is the expert data-parallel
    group, ``expert_dp``: torchtitan 0.3.0 (``distributed/parallel_dims.py``) shards the routed
    experts over its ``efsdp`` mesh of ``dp_shard x cp x tp / ep`` ranks and the rest over
    ``fsdp`` = ``dp_shard x cp`` (``distributed/fsdp.py`` ``apply_fsdp_to_decoder``: the experts'
    ``shard_placement_fn`` puts them on the ``edp_mesh``); under ``hsdp`` the node's ranks of it."""
    return max(1, shard * tp // (ep * expert_tp(tp, ep)))


def expert_width(arch: DecoderArch, etp: int) -> int:
    """One expert's width on one rank under expert tensor parallelism ``etp`` (rounded up)."""
    return -(-arch.expert_intermediate // etp)


def check_ep(arch: DecoderArch, ep: int, tp_cp_dp: int) -> str | None:
    """Why ``ep`` cannot split ``arch``'s experts over ``tp_cp_dp`` ranks, or None."""
    if ep == 1:
        return None
    if not arch.is_moe:
        return f"ep={ep} needs a mixture-of-experts model; {arch.name} is dense"
    if arch.experts % ep:
        return f"ep={ep} does not divide the {arch.experts} experts"
    if tp_cp_dp % ep:
        return f"ep={ep} does not divide tp x cp x dp = {tp_cp_dp} (experts are split within them)"
    return None


@functools.lru_cache(maxsize=4096)
def with_expert_width(arch: DecoderArch, width: int) -> DecoderArch:
    """``arch`` with each routed expert ``width`` wide (one expert-TP rank's; cached: a search asks
    it of every split)."""
    return dataclasses.replace(arch, expert_intermediate=width)


def moe_block_shape(arch: DecoderArch, tokens: int, ep: int, element_bytes: float,
                    imbalance: float = BALANCED_ROUTING, dispatcher: MoeDispatcher = "alltoall",
                    etp: int = 1) -> MoeBlockShape:
    """``MoeBlockShape`` of ``tokens`` routed on one rank of an EP group of ``ep`` under ``dispatcher``
    with expert tensor parallelism ``etp`` (``expert_tp``)
    (``flex`` with ``ep > 1``: HybridEP permutes inside its dispatch and combine kernels, so no
    separate permutation passes: ``permute_bytes`` 0).

    Raises:
        ValueError: for a dense model, ``ep`` not dividing the experts, or an imbalance below 1.
    """
    if not arch.is_moe or ep < 1 or arch.experts % ep:
        raise ValueError(f"ep={ep} must divide the experts of a mixture-of-experts model")
    if not imbalance >= 1.0:
        raise ValueError(f"routing imbalance must be at least 1, got {imbalance!r}")
    routed = tokens * arch.experts_per_token
    local = arch.experts // ep
    # Imbalance is between ranks: with every expert on one rank (ep 1) its rows are all its tokens'.
    rows = max(1, math.ceil(routed * etp * (imbalance if ep > 1 else 1.0) / local))
    size = float(routed * arch.hidden * element_bytes)
    w, d = expert_width(arch, etp), arch.hidden
    clamp_f, glue_f, glue_b = expert_glue_bytes(with_expert_width(arch, w), rows * local,
                                                element_bytes)
    gemms = ((rows, d, w), (rows, d, w), (rows, w, d)) if arch.mlp in GATED_MLPS else ((rows, d, w), (rows, w, d))
    return MoeBlockShape(tokens, routed, local, rows, size, size * (ep - 1) / ep, gemms,
                         0.0 if dispatcher == FLEX and ep > 1 else
                         permute_traffic_bytes(tokens, routed, rows * local, d, ep, element_bytes),
                         glue_f, glue_b, clamp_f, etp, etp * size if etp > 1 else 0.0)


def expert_glue_bytes(arch: DecoderArch, rows: int, element_bytes: float) -> tuple[float, float, float]:
    """Bytes Megatron-Core's separate element-wise passes around ``rows`` expert rows move on one
    rank (module docstring): ``(clamp forward, all forward, all backward)``. A clamped activation
    (``arch.glu_clamp``) costs ``CLAMP_*_PASSES`` over ``rows x expert width`` elements of
    ``element_bytes``; expert biases (``"mlp"`` in ``arch.biases``) cost ``EXPERT_BIAS_*_BYTES`` per
    element of the ``rows x hidden`` output. Zero for a model with neither."""
    half = float(rows * arch.expert_intermediate * element_bytes)
    clamp_f = CLAMP_FWD_PASSES * half if arch.glu_clamp > 0 else 0.0
    clamp_b = CLAMP_BWD_PASSES * half if arch.glu_clamp > 0 else 0.0
    out = float(rows * arch.hidden)
    bias_f = EXPERT_BIAS_FWD_BYTES * out if MLP_BIAS in arch.biases else 0.0
    bias_b = EXPERT_BIAS_BWD_BYTES * out if MLP_BIAS in arch.biases else 0.0
    return clamp_f, clamp_f + bias_f, clamp_b + bias_b


def permute_traffic_bytes(tokens: int, routed_rows: int, received_rows: int, hidden: int, ep: int,
                          element_bytes: float) -> float:
    """Bytes one forward pass of Megatron-Core's all-to-all token dispatcher moves through memory
    around the experts on one rank: the permutation (reads the ``tokens`` rows, writes the
    ``routed_rows`` copies grouped by destination) and the unpermutation (reads them back, writes the
    weighted sum per token); with ``ep > 1`` also the sort of the ``received_rows`` by local expert
    after the dispatch and its inverse before the combine (each a read and a write). Backward
    moves the same bytes of gradients. Memory-bound copies, timed at the compute model's memory
    rate."""
    rows = 2 * (tokens + routed_rows) + (4 * received_rows if ep > 1 else 0)
    return float(rows * hidden * element_bytes)


@dataclass(frozen=True)
class MoeBlockTimes:
    """Seconds of one MoE block's routed experts and token exchange on one rank, per micro-batch.

    Attributes:
        experts_f_s, experts_b_s: The local experts' grouped GEMMs (the busiest rank's) and the
            token permutations around them (``permute_traffic_bytes``).
        all_to_all_s: One dispatch (or combine) all-to-all.
        exposed_f_s, exposed_b_s: All-to-alls forward (dispatch, combine) and backward (both again).
        act_f_s: Of ``experts_f_s``, the local experts' activation (what ``moe_act`` recompute
            runs again).
    """

    experts_f_s: float
    experts_b_s: float
    all_to_all_s: float
    exposed_f_s: float
    exposed_b_s: float
    act_f_s: float = 0.0


def moe_block_times(arch: DecoderArch, shape: MoeBlockShape, gpu: str, precision: str,
                    ep_comm: CommModel | None, quantile: float = 0.5, fp8: Fp8Recipe | None = None,
                    one_kernel: bool = False) -> MoeBlockTimes:
    """``MoeBlockTimes`` of ``shape`` on ``gpu``; ``ep_comm`` is the EP group's CommModel (None: ep 1);
    ``fp8``: the experts' GEMMs in FP8 under that recipe (srift/perf/fp8.py); ``one_kernel``: each
    op of the local experts is one kernel and one framework call (PyTorch's stack: ``grouped_s``),
    else each expert's op costs the compute model's fixed cost per pass (Megatron-Core, as the MoE
    group validates it)."""
    prof = mma_padded(expert_profile(with_expert_width(arch, shape.expert_gemms[0][2]),
                                     shape.rows_per_expert, precision), shape.rows_per_expert, gpu, precision)
    times = layer_times(prof, gpu, precision)
    fwd_s, bwd_s = fp8_times(prof, times, gpu, fp8, fused_fc1=True) if fp8 else (times.fwd_s, times.bwd_s)
    rates = kernel_rates(gpu, precision)
    mem_rate = rates.memory_bytes_per_s
    n, launch = shape.local_experts, rates.launch_s if one_kernel else 0.0
    f_ops = sum(1 for layer in prof.layers if layer.fwd_flops > 0 or layer.fwd_bytes > 0)
    b_ops = sum(1 for layer in prof.layers if layer.bwd_flops > 0 or layer.bwd_bytes > 0)
    f = grouped_s(float(fwd_s.sum()), f_ops, n, launch) + shape.permute_bytes / mem_rate + shape.glue_f_bytes / mem_rate
    b = grouped_s(float(bwd_s.sum()), b_ops, n, launch) + shape.permute_bytes / mem_rate + shape.glue_b_bytes / mem_rate
    a2a = float(ep_comm.all_to_all_time_s(shape.dispatch_bytes, quantile)) if ep_comm is not None else 0.0
    acts = [float(fwd_s[i]) for i, layer in enumerate(prof.layers) if layer_kind(layer.type) == "elementwise"]
    return MoeBlockTimes(f, b, a2a, 2.0 * a2a, 2.0 * a2a, grouped_s(sum(acts), len(acts), n, launch)
                         + shape.clamp_f_bytes / mem_rate)


def grouped_s(one_expert_s: float, ops: int, experts: int, launch_s: float) -> float:
    """Seconds of ``ops`` ops run over ``experts`` local experts, given one expert's seconds of them
    (``one_expert_s``, the compute model's fixed cost per pass in each): the work ``experts``
    times and the fixed ``launch_s`` once per op, where an op is one kernel over every local
    expert's rows (torchtitan 0.3.0 ``GroupedExperts``: one ``torch._grouped_mm`` per projection,
    ``models/common/moe.py``); ``launch_s`` 0: the fixed cost per expert, all of it ``experts``
    times (Megatron-Core's ``TEGroupedMLP``, as the MoE group of scripts/validate.py prices it:
    removing it there moved that group from 14.7 % to 31.5 %, predicted fast)."""
    return max(0.0, one_expert_s - ops * launch_s) * experts + ops * launch_s


def mma_rows(gpu: str) -> int:
    """Rows one tensor-core matrix instruction multiplies on ``gpu`` (its M), by CUDA compute
    capability (NVIDIA's PTX ISA, the instructions' shapes): 64 on Hopper and datacenter Blackwell
    (sm_90 ``wgmma.mma_async`` m64nNk16; sm_100/sm_103 ``tcgen05.mma``, M 64 or 128), 16 on
    Turing, Ampere, Ada and consumer Blackwell (``mma.sync`` m16n8k16), 8 on Volta (``mma.sync``
    m8n8k4); 1 without tensor cores."""
    cc = gpu_spec(gpu).compute_capability
    if not cc:
        return 1
    major, minor = (int(x) for x in cc.split(".")[:2])
    if major in (9, 10):
        return 64
    if major > 7 or (major == 7 and minor >= 5):
        return 16
    return 8 if major == 7 else 1


def mma_padded(prof: Profile, rows: int, gpu: str, precision: str) -> Profile:
    """``prof`` (one expert's GEMMs on ``rows`` rows: ``expert_profile``) with its matmuls' FLOPs at
    the rows the tensor cores run (half precision): each expert's group of rows is cut into
    instructions of ``mma_rows`` rows, the last one padded, so a grouped GEMM of few rows per
    expert does ``ceil(rows / m) x m`` rows of work (tile quantisation on M). Forward and the
    input-gradient GEMM run on the padded rows; the weight-gradient GEMM reduces over the rows
    (its M and N are the weight's), so backward pads half its FLOPs. Bytes are the real rows'. Where
    the rows are few the GEMM reads its expert's weights for them and is memory-bound anyway
    (srift/perf/compute.py's roofline); the padding shows where the FLOPs bind."""
    m = mma_rows(gpu) if precision in HALF_PRECISIONS else 1
    padded = -(-rows // m) * m
    if padded == rows:
        return prof
    q = padded / rows
    layers = [dataclasses.replace(layer, fwd_flops=layer.fwd_flops * q, bwd_flops=layer.bwd_flops * (1.0 + q) / 2.0)
              if layer_kind(layer.type) == "matmul" else layer for layer in prof.layers]
    return dataclasses.replace(prof, layers=layers)


def node_dedup_fraction(arch: DecoderArch, ep: int, gpus_per_node: int) -> float:
    """Share of the cross-node bytes of an all-to-all dispatch that a ``flex`` dispatcher (DeepEP,
    HybridEP) still sends over the network: it sends a token once to each other node holding one
    of its ``k`` experts (then forwards it over NVLink), not once per expert. With the experts of an
    EP group spread over ``N = ep / gpus_per_node`` nodes and routed uniformly (balanced routing),
    a token reaches ``(N - 1) (1 - (1 - 1 / N)^k)`` other nodes on average, against
    ``k (N - 1) / N`` rows the ``alltoall`` dispatcher sends. 1 within a node."""
    nodes = ep // gpus_per_node if ep > gpus_per_node else 1
    if nodes <= 1:
        return 1.0
    k = arch.experts_per_token
    return (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** k) / (k * (nodes - 1) / nodes)


def ep_exchange_s(arch: DecoderArch, ep_comm: CommModel, ep: int, gpus_per_node: int, dispatch_bytes: float,
                  quantile: float = 0.5, dispatcher: MoeDispatcher = "alltoall") -> float:
    """Seconds of one dispatch (or combine) all-to-all of ``dispatch_bytes`` per rank in an EP group
    of ``ep`` (``ep_comm``) under ``dispatcher`` (``node_dedup_fraction`` for ``flex``).

    Raises:
        ValueError: for an unknown dispatcher.
    """
    if dispatcher not in MOE_DISPATCHERS:
        raise ValueError(f"dispatcher must be one of {MOE_DISPATCHERS}, got {dispatcher!r}")
    share = node_dedup_fraction(arch, ep, gpus_per_node) if dispatcher == FLEX else 1.0
    return float(ep_comm.all_to_all_time_s(dispatch_bytes, quantile, share))


def moe_activation_bytes(arch: DecoderArch, shape: MoeBlockShape, element_bytes: float,
                         gemm_input_bytes: float | None = None) -> float:
    """What one MoE block keeps for backward per micro-batch on one rank beyond the dense part:
    permuted input rows, gate/up outputs and their product (routed rows; ``imbalance`` is not
    applied: the busiest rank's surplus is the mean's), and the router's fp32 probabilities (module
    docstring: the probabilities are applied in the activation, the combine keeps nothing). ``gemm_input_bytes``: bytes per element the experts' GEMMs
    keep their inputs in (the dispatched rows and the product; FP8 GEMMs keep their FP8 copy,
    srift/perf/fp8.py ``fp8_saved_bytes``; default ``element_bytes``)."""
    rows = shape.routed_rows
    kept = element_bytes if gemm_input_bytes is None else gemm_input_bytes
    # Under expert TP each rank keeps the TP group's gathered rows at 1/etp of the width. A gated
    # expert keeps its gate and up outputs and their product; a plain one its up output and activation.
    w, outputs = shape.expert_gemms[0][2], len(shape.expert_gemms) - 1
    return (rows * shape.etp * (outputs * w * element_bytes + w * kept)
            + rows * shape.etp * arch.hidden * kept
            + shape.tokens * arch.experts * ROUTER_PROB_BYTES)


def moe_act_bytes(arch: DecoderArch, shape: MoeBlockShape, gemm_input_bytes: float) -> float:
    """Of ``moe_activation_bytes``, the experts' activation product the down projection keeps
    (``routed rows x expert width``): what Megatron-Core's ``moe_act`` recompute drops."""
    return float(shape.routed_rows * shape.etp * shape.expert_gemms[0][2] * gemm_input_bytes)


def local_expert_params(arch: DecoderArch, ep: int, etp: int = 1) -> int:
    """Routed-expert parameters of one MoE block on one rank: ``experts / ep`` experts, each at
    ``1 / etp`` of its width (expert tensor parallelism; a down-projection bias stays whole)."""
    return arch.experts // ep * dense_mlp_params(arch, expert_width(arch, etp))


def expert_memory_bytes(expert_params: float, expert_dp: int, weight_bytes: float = 2.0, grad_bytes: float = 2.0,
                        state_bytes: float = 12.0, sharded: bool = True) -> dict[str, float]:
    """Bytes per GPU of the ``expert_params`` routed-expert parameters it holds (its ``experts / ep``
    of each of its MoE blocks: ``local_expert_params``): weights and gradients whole, master
    weights and Adam moments (``state_bytes`` per parameter) over the ``expert_dp`` ranks of the
    expert data-parallel group when ``sharded`` (the distributed optimizer)."""
    return {"weights": expert_params * weight_bytes, "gradients": expert_params * grad_bytes,
            "optimizer_state": expert_params * state_bytes / (expert_dp if sharded else 1)}
