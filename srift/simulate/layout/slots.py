"""One pipeline slot of a layout's block, at least: its compute, the TP/CP communication it waits
for and its flat all-to-all (``search_layouts``'s lower bound per slot; srift/simulate/layout/bound.py
bounds a whole cluster with it before simulating). One place for both."""

from __future__ import annotations

from dataclasses import dataclass

from srift.job import FLEX, MoeDispatcher
from srift.perf.comm import CommModel
from srift.simulate.layout.blocks import BlockParts
from srift.simulate.layout.collectives import block_comm, dtensor_rate, p2p_interference, tp_interference
from srift.simulate.layout.plan import ep_ranks_per_node
from srift.zoo.llm import DecoderArch


@dataclass(frozen=True)
class SlotContext:
    """What a slot's bound reads of the cluster and the job, fixed for one cluster.

    Attributes:
        comm: The cluster's collectives.
        gpu: Its GPU type.
        seq_len: Tokens per sequence.
        element_bytes: Bytes per activation element.
        tp_overlap: TP communication overlapped (``plan_layout``'s).
        pytorch: PyTorch's stack (``pytorch_stack``) rather than Megatron-Core's.
        precision: The compute precision.
        dispatcher: A mixture of experts' token dispatcher.
        ep_overlap: Its all-to-alls overlap another micro-batch.
    """

    comm: CommModel
    gpu: str
    seq_len: int
    element_bytes: float
    tp_overlap: bool
    pytorch: bool
    precision: str
    dispatcher: MoeDispatcher
    ep_overlap: bool


# A cluster's expert-parallel group has the same collectives at every node count (the group's
# CommModel is one object, srift.perf.comm's derived-topology cache): its all-to-all of one block's
# dispatch is remembered across the counts a search bounds and simulates.
_A2A: dict[tuple[int, int], tuple[CommModel, BlockParts, float]] = {}
MAX_MEMO = 1 << 16
_SLOTS: dict[tuple[object, ...], tuple[BlockParts, tuple[float, float]]] = {}


def _all_to_all_s(group: CommModel, parts: BlockParts) -> float:
    key = (id(group), id(parts))
    hit = _A2A.get(key)
    if hit is not None and hit[0] is group and hit[1] is parts:
        return hit[2]
    if len(_A2A) >= MAX_MEMO:
        _A2A.clear()
    value = float(group.all_to_all_time_s(parts.dispatch_bytes))
    _A2A[key] = (group, parts, value)  # the references keep the ids from being reused
    return value


class SlotBounds:
    """(seconds a slot takes at least, seconds of hidden communication it adds) per (TP, CP,
    micro-batch, EP), computed once per cluster."""

    def __init__(self, arch: DecoderArch, ctx: SlotContext) -> None:
        self.arch, self.ctx = arch, ctx
        self.k_tp = tp_interference(ctx.comm, ctx.gpu, ctx.tp_overlap, ctx.pytorch)
        self.copy_rate = dtensor_rate(ctx.gpu, ctx.precision, ctx.pytorch)
        self.k_p2p = p2p_interference(ctx.gpu)
        self._ep_group: dict[int, CommModel] = {}  # the expert-parallel groups' collectives, per size

    def slot(self, t: int, c: int, mb: int, ep: int, parts: BlockParts) -> tuple[float, float]:
        """(the slot's compute, communication and exposed all-to-all; its hidden communication's
        interference) of a block split ``t`` x ``c`` at micro-batch ``mb`` with ``ep`` expert ranks
        (remembered: a search bounds a cluster, then simulates it). The first is at least the
        block's compute (``block_f_s + block_b_s``) and the second is not negative: every term added
        is a time or an interference share (``_least_step`` visits layouts in that order)."""
        key = (self.ctx, t, c, mb, ep, id(parts))
        hit = _SLOTS.get(key)
        if hit is not None and hit[0] is parts:
            return hit[1]
        if len(_SLOTS) >= MAX_MEMO:
            _SLOTS.clear()
        value = self._slot(t, c, mb, ep, parts)
        _SLOTS[key] = (parts, value)
        return value

    def _slot(self, t: int, c: int, mb: int, ep: int, parts: BlockParts) -> tuple[float, float]:
        ctx = self.ctx
        bc = block_comm(self.arch, ctx.comm, t, c, mb, ctx.seq_len, ctx.element_bytes, parts, 0.5, ctx.tp_overlap,
                        self.copy_rate)
        # The flat all-to-all bounds the alltoall dispatcher's exposed time; flex's per-node
        # dispatch and an overlapped one can take less, so they add nothing to the bound.
        if ep > 1 and ctx.dispatcher != FLEX and not ctx.ep_overlap:
            if ep not in self._ep_group:
                self._ep_group[ep] = ctx.comm.subgroup(ep, ep_ranks_per_node(ep, ctx.comm.topology.gpus_per_node))
            a2a = 4.0 * parts.moe_fraction * _all_to_all_s(self._ep_group[ep], parts)
        else:
            a2a = 0.0
        return (parts.block_f_s + parts.block_b_s + bc.tp_f_s + bc.tp_b_s + bc.cp_f_s + bc.cp_b_s + a2a,
                self.k_tp * bc.tp_hidden_s + self.k_p2p * bc.cp_hidden_s)
