"""Megatron-Core's selective activation recompute (``recompute_granularity = "selective"`` with
``recompute_modules``): which of a decoder block's activations each module drops after forward
and which forward work backward runs again to rebuild them (no torch).

A module's checkpoint keeps its input and its output (the next module reads them) and drops
what is inside it; backward runs the module's forward again first. In srift's profile
convention (a leaf's output is what it keeps for backward, srift/zoo/llm.py):

- ``core_attn``: the attention core; flash attention keeps only its fp32 log-sum-exp beyond its
  inputs and output, so that is what it saves (its forward runs again);
- ``layernorm``: the block's input and pre-MLP norms' outputs (Megatron checkpoints them "without
  output": the consumer's saved copy is freed and rebuilt);
- ``mla_up_proj``: multi-head latent attention's query and key/value up-projections (their outputs,
  the attention's queries, keys and values, are rebuilt from the latents);
- ``mlp``: a dense block's MLP (not a MoE block's, as Megatron-Core applies it): its projections'
  and activation's outputs but the last (the block's output);
- ``moe``: a MoE block's whole MoE layer (router, dispatch, experts, combine): it keeps its
  input only and backward runs its forward again, the dispatch and combine all-to-alls included
  (``moe_activation_bytes`` of srift/simulate/moe.py saved; ``moe_act`` is part of it);
- ``moe_act``: the routed experts' activation (the product the down projection reads):
  ``moe_act_bytes`` of srift/simulate/moe.py;
- ``shared_experts``: the shared experts' outputs but their down projection's.

The selective policy's figures are ``BlockParts.selective_saved_bytes`` (less per block and
micro-batch than ``none``) and ``selective_f_s`` (forward seconds run again in backward) in
srift/simulate/layouts.py.
"""

from __future__ import annotations

from srift.job import RECOMPUTE_MODULES, RecomputeModule

Recompute = tuple[str, tuple[RecomputeModule, ...]]  # (checkpointing policy, selective modules)
# ``--activation-checkpointing auto`` on a layout: the least recompute that fits, cheapest first,
# each step a superset of the last (so the memory falls step by step): none, Megatron-Core's
# selective modules in order of the forward work they run again (the norms and the experts'
# activation, elementwise; then MLA's up-projections, small GEMMs that rebuild the largest
# tensors of an MLA block, the one module Megatron-Bridge's DeepSeek-V3 and Kimi-K2 recipes
# recompute; then shared experts and dense MLPs; then whole MoE layers, their all-to-alls
# included), then every block again. A step that adds nothing for a model (no MLA) costs one
# more plan and selects the same.
AUTO_LADDER: tuple[Recompute, ...] = (("none", ()), ("selective", ("layernorm", "moe_act")),
                                      ("selective", ("layernorm", "mla_up_proj", "moe_act")),
                                      ("selective", ("layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts")),
                                      ("selective", ("layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")),
                                      ("full", ()))
from srift.perf.compute import ATTENTION, NORM
from srift.zoo.decoder_arch import DecoderArch
from srift.zoo.llm import BLOCK_NORM_NAMES, MLA_UP_PROJ_NAMES, MLP_PART_NAMES, SHARED_EXPERT_PREFIX


def check_modules(modules: tuple[str, ...]) -> tuple[RecomputeModule, ...]:
    """``modules`` if each is one of RECOMPUTE_MODULES.

    Raises:
        ValueError: for a module srift does not model.
    """
    bad = [m for m in modules if m not in RECOMPUTE_MODULES]
    if bad:
        raise ValueError(f"recompute modules must be among {RECOMPUTE_MODULES}, got {bad}")
    return tuple(m for m in RECOMPUTE_MODULES if m in modules)


# Modules whose checkpoint spans several leaves and keeps the last one's output (the block's).
_KEEPS_LAST_OUTPUT: tuple[RecomputeModule, ...] = ("mlp", "shared_experts")


def modules_present(arch: DecoderArch, modules: tuple[RecomputeModule, ...]) -> tuple[RecomputeModule, ...]:
    """Those of ``modules`` the model has: MLA's up-projections only with MLA, ``mlp`` only with a
    dense block, the MoE modules only in a mixture of experts, ``shared_experts`` only with shared
    experts (the auto ladder names a superset; a module a model lacks drops and reruns nothing)."""
    has = {"core_attn": True, "layernorm": True, "mla_up_proj": arch.is_mla,
           "mlp": arch.moe_blocks < arch.n_layers, "moe": arch.is_moe, "moe_act": arch.is_moe,
           "shared_experts": arch.is_moe and arch.shared_intermediate > 0}
    return tuple(m for m in modules if has[m])


def leaf_module(part: str, kind: str) -> RecomputeModule | None:
    """The recompute module a block leaf belongs to, or None (not one srift recomputes selectively).

    Args:
        part: The leaf's name after its block's prefix (``self_attn.q_b_proj``).
        kind: Its kind (srift.perf.compute.layer_kind).
    """
    if kind == ATTENTION:
        return "core_attn"
    if kind == NORM and part in BLOCK_NORM_NAMES:
        return "layernorm"
    if part in MLA_UP_PROJ_NAMES:
        return "mla_up_proj"
    if part.startswith(SHARED_EXPERT_PREFIX):
        return "shared_experts"
    if part in MLP_PART_NAMES:
        return "mlp"
    return None


def module_figures(leaves: list[tuple[RecomputeModule | None, float, float]]) -> dict[RecomputeModule, tuple[float, float]]:
    """``{module: (bytes it saves, forward seconds it runs again)}`` of one block from its leaves
    in execution order, each ``(module, bytes it keeps for backward, forward seconds)``.

    The attention core saves only what flash attention keeps beyond its output (the caller passes
    that); a multi-leaf module (``mlp``, ``shared_experts``) keeps its last leaf's output.
    """
    out: dict[RecomputeModule, tuple[float, float]] = {}
    for j, (module, kept, fwd_s) in enumerate(leaves):
        if module is None:
            continue
        last = module in _KEEPS_LAST_OUTPUT and (j + 1 == len(leaves) or leaves[j + 1][0] != module)
        saved, again = out.get(module, (0.0, 0.0))
        out[module] = (saved + (0.0 if last else kept), again + fwd_s)
    return out
