"""The layout search's throughput bound (srift/simulate/layout/bound.py) visits layouts in order of
their compute alone and stops early; it must equal the least bound over every layout the search
examines, computed here the plain way (every layout, every slot, every memory check)."""

from __future__ import annotations

import pytest

from srift.catalog import load_catalog
from srift.catalog.spec import cluster_of
from srift.hardware import gpu as gpu_spec
from srift.job import FULL_CHECKPOINTING, LayoutRequest
from srift.perf.comm import CommModel
from srift.resolve import model_arch
from srift.simulate.layout.blocks import BlockOptions, block_parts, scaled_parts
from srift.simulate.layout.bound import BoundSettings, step_lower_bound
from srift.simulate.layout.memory import memory_signature, peak_memory
from srift.simulate.layout.pipeline import pipeline_blocks, stage_layers
from srift.simulate.layout.plan import PARAM_BYTES, compute_factor_of, default_tp_overlap, pytorch_stack, state_shard
from srift.simulate.layout.search import searched_degrees
from srift.simulate.layout.slots import SlotBounds, SlotContext
from srift.simulate.memory import USABLE_FRACTION
from srift.simulate.moe import expert_shard_of

SEQ, PRECISION = 4096, "bf16"
SETTINGS = BoundSettings(LayoutRequest(), "megatron", 1.0, None, None, "alltoall", 0, "fp32", ("none", "full"),
                         None, False)


def _every_layout(arch, cluster, batch: int, with_comm: bool) -> float | None:
    """The least bound over every layout: the fitting ones' (with full recompute's extra forward),
    or every one's when none fits."""
    st = SETTINGS
    gpu, gpn = cluster.node_groups[0].gpu, cluster.node_groups[0].domain_gpus
    memory = (cluster.node_groups[0].gpu_memory_gib or gpu_spec(gpu).memory_gib) * 2**30 * USABLE_FRACTION
    pytorch = pytorch_stack(st.dp_flavour)
    comm = CommModel.for_cluster(cluster)
    slots = SlotBounds(arch, SlotContext(comm, gpu, SEQ, PARAM_BYTES, default_tp_overlap(st.dp_flavour), pytorch,
                                         PRECISION, st.dispatcher, st.ep_overlap))
    options = BlockOptions(st.imbalance, st.fp8, lora=st.lora, dispatcher=st.dispatcher, fused_fc1=not pytorch,
                           pytorch_kernels=pytorch)
    bounds, fitting = [], []
    for t, p, c, d, mb, m, v, ep in searched_degrees(arch, cluster.gpus, gpn, SEQ, batch, st.request, st.dp_flavour):
        parts = scaled_parts(block_parts(arch, t, c, mb, SEQ, PRECISION, gpu, ep, options), compute_factor_of(st.dp_flavour))
        blk, hidden = slots.slot(t, c, mb, ep, parts) if with_comm else (parts.block_f_s + parts.block_b_s, 0.0)
        assert blk >= parts.block_f_s + parts.block_b_s and hidden >= 0.0  # what the ordered visit relies on
        n = max(stage_layers(pipeline_blocks(arch, st.mtp_layers), p, megatron=not pytorch))
        bound = (m + (p - 1) / v) * n * blk + m * n * hidden
        bounds.append(bound)
        shard = state_shard(st.dp_flavour, gpn, t, c, p, d)
        for k in st.checkpointing:
            if peak_memory(memory_signature(arch, parts), arch, p, v, m, shard, parts, k, st.dp_flavour,
                           expert_shard_of(shard, t, ep), st.reduce_dtype, st.mtp_layers) <= memory:
                extra = parts.block_f_s / (parts.block_f_s + parts.block_b_s) if k == FULL_CHECKPOINTING else 0.0
                fitting.append(bound * (1.0 + extra))
                break
    if not bounds:
        return None
    return min(fitting) if fitting else min(bounds)


@pytest.mark.parametrize("model", ["mixtral-8x7b", "llama3-70b"])
@pytest.mark.parametrize("with_comm", [False, True])
def test_the_ordered_visit_finds_the_least_bound_of_every_layout(model, with_comm):
    arch = model_arch(model)
    rows = {r.instance_type: r for r in load_catalog("aws/us-east-1")}
    compared = 0
    for itype in ("p5.48xlarge", "g6e.12xlarge", "p4d.24xlarge"):
        for nodes in (1, 2, 3, 8, 32):
            cluster = cluster_of([(rows[itype], nodes, False)])
            batch = cluster.gpus * 4
            expected = _every_layout(arch, cluster, batch, with_comm)
            got = step_lower_bound(arch, cluster, batch, SEQ, PRECISION, SETTINGS, with_comm)
            assert got == expected, (itype, nodes)
            compared += expected is not None
    assert compared >= 10
