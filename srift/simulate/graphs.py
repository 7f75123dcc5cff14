"""CUDA graphs in a Megatron-Core job: which layer passes a graph captures, and what it removes
(no torch).

What a graph removes: the compute model prices every layer pass with a fixed ``launch_s``
(srift/perf/compute.py: the framework's cost per layer pass, a few kernel launches, eager dispatch
and the functional ops between modules, fitted on eager PyTorch). A captured pass is replayed by
the GPU from the graph: the host dispatches and launches nothing, so the pass costs its kernels'
GPU time alone (the device-side gap between two kernel nodes of a graph, about a microsecond, is
below what the model resolves and is not added). Nothing else changes: the kernels, their FLOPs and
bytes, the collectives and their overlap are the eager run's.

What a graph captures (``CudaGraphs``, Megatron-Core's ``cuda_graph_impl`` and ``cuda_graph_scope``
as Megatron-Bridge's performance recipes set them, megatron-bridge 0.6.2 ``perf_recipes``):

- ``partial``: Transformer Engine graphs of the scopes ``attn``, ``moe_router`` and
  ``moe_preprocess`` in each block: the attention sub-layer (its input norm through the output
  projection), the MoE router with the norm ahead of it, and the dispatcher's preprocessing (its
  metadata, which srift does not time). The routed experts, their token exchange, dense MLPs and
  shared experts, the embedding and the head run eagerly;
- ``full_iteration``: every pass of the step, the routed experts' too (the recipes that set it pad
  each expert's rows to a static capacity, ``moe_pad_experts_for_cuda_graph_inference``, so the
  dropless MoE layer has the static shapes a graph needs).
"""

from __future__ import annotations

from srift.job import CUDA_GRAPHS, FULL_ITERATION_GRAPHS, PARTIAL_GRAPHS, CudaGraphs
from srift.zoo.llm import BLOCK_NORM_NAMES

ROUTER_PART = "mlp.router"  # a MoE block's router (srift/zoo/llm.py builds it under this name)


def check_graphs(cuda_graphs: str) -> CudaGraphs:
    """``cuda_graphs`` as a ``CudaGraphs`` word.

    Raises:
        ValueError: for a word that is not one.
    """
    if cuda_graphs not in CUDA_GRAPHS:
        raise ValueError(f"cuda_graphs must be one of {CUDA_GRAPHS}, got {cuda_graphs!r}")
    return cuda_graphs  # type: ignore[return-value]


def block_leaf_captured(cuda_graphs: CudaGraphs, part: str, norms_seen: int, moe_block: bool) -> bool:
    """Whether a block leaf runs inside a graph.

    Args:
        cuda_graphs: The job's graphs.
        part: The leaf's name after its block's prefix (``self_attn.q_b_proj``).
        norms_seen: Block norms (input, pre-MLP) met so far in the block, this leaf included when
            it is one: 1 on the attention sub-layer, 2 from the pre-MLP norm on.
        moe_block: The block is a MoE block (a dense block's MLP side has no router scope).
    """
    if cuda_graphs == FULL_ITERATION_GRAPHS:
        return True
    if cuda_graphs != PARTIAL_GRAPHS:
        return False
    if norms_seen <= 1:  # the attention sub-layer, its input norm included (scope ``attn``)
        return True
    # scope ``moe_router``: the pre-MLP norm of a MoE block and its router
    return moe_block and (part == ROUTER_PART or (part in BLOCK_NORM_NAMES and norms_seen == 2))


def experts_captured(cuda_graphs: CudaGraphs) -> bool:
    """Whether the routed experts' grouped GEMMs run inside a graph (``full_iteration`` only)."""
    return cuda_graphs == FULL_ITERATION_GRAPHS


def outside_blocks_captured(cuda_graphs: CudaGraphs) -> bool:
    """Whether the embedding, the final norm, the head and the loss run inside a graph."""
    return cuda_graphs == FULL_ITERATION_GRAPHS

