"""A layout under fsdp/hsdp runs PyTorch's stack as torchtitan does (srift/simulate/layouts.py):
DTensor TP collectives (vanilla and async), SDPA's FlashAttention-2 rate, the compute model without
Megatron's factor, the gathered inputs autograd keeps and torchao's FP8 all-gathers; checked by hand."""

from __future__ import annotations

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.hardware import gpu as gpu_spec
from srift.perf.comm import CommModel
from srift.perf.compute import kernel_rates, mma_rate_flops
from srift.simulate.layouts import (
    BlockOptions, Layout, block_parts, compute_factor_of, default_tp_overlap, dtensor_tp_block_s, load_layout_params, PlanSettings,
    plan_layout,
    scaled_parts,
)
from srift.zoo import llm_arch


def node(gpus: int = 8) -> Cluster:
    return Cluster(f"{gpus} H100", (NodeGroup(count=max(1, gpus // 8), gpus_per_node=min(8, gpus), gpu="H100",
                                              intra_node="nvswitch4", network_gbps=3200.0, network="infiniband"),))


def test_dtensor_tp_block_by_hand():
    # all-gather 1 s, reduce-scatter 2 s, their copies 0.1 and 0.2 s, the fused reduce-scatter's sum
    # 0.05 s, forward GEMMs 3 s, backward GEMMs 4 s.
    fwd, bwd, hidden, sac = dtensor_tp_block_s(1.0, 2.0, 0.1, 0.2, 0.05, 3.0, 4.0, async_tp=False)
    # Vanilla: 2 all-gathers and 2 reduce-scatters each way, each with its copy, all waited for;
    # per-op SAC gathers the 2 forward inputs again.
    assert (fwd, bwd, hidden, sac) == pytest.approx((2 * 1.1 + 2 * 2.2, 2 * 2.2 + 2 * 1.1, 0.0, 2 * 1.1))
    fwd, bwd, hidden, sac = dtensor_tp_block_s(1.0, 2.0, 0.1, 0.2, 0.05, 3.0, 4.0, async_tp=True)
    # Async: forward's 6 s of fused collectives beside 3 s of GEMMs: 3 s wait, plus 2 local sums;
    # backward's 2 s of gradient all-gathers beside half the 4 s of GEMMs: none wait; its 2
    # reduce-scatters (and copies) stay vanilla.
    assert (fwd, bwd, hidden, sac) == pytest.approx((3.0 + 2 * 0.05, 2 * 2.2, 3.0 + 2.0, 2 * 1.1))


def test_vanilla_tp_waits_for_every_collective_and_its_copy():
    arch = llm_arch("llama3-8b")
    cluster = node(8)
    plan = plan_layout(arch, cluster, Layout(8, 1, 1, 1), 4096, PlanSettings(dp_flavour="fsdp"))
    tp = CommModel.for_cluster(cluster).subgroup(8, 8)
    size = 1 * 4096 * 4096 * 2.0  # micro-batch x tokens x hidden x bf16
    copy = 2.0 * size / kernel_rates("H100", "bf16").memory_bytes_per_s  # read and write the gathered tensor
    per_block = 2 * (tp.all_gather_time_s(size) + copy + tp.reduce_scatter_time_s(size) + copy)  # forward = backward
    assert plan.breakdown["exposed_tp"] == pytest.approx(32 * 2 * per_block)
    assert plan.comm_s["tp"] == pytest.approx(plan.breakdown["exposed_tp"])  # nothing beside the GEMMs
    assert sum(plan.breakdown.values()) == pytest.approx(plan.iteration_s)


def test_async_tp_hides_forward_collectives_on_the_copy_engines():
    arch = llm_arch("llama3-8b")
    cluster = node(8)
    vanilla = plan_layout(arch, cluster, Layout(8, 1, 1, 1, 1, 4), 4096,
                          PlanSettings(dp_flavour="fsdp", tp_overlap=False))
    fused = plan_layout(arch, cluster, Layout(8, 1, 1, 1, 1, 4), 4096, PlanSettings(dp_flavour="fsdp", tp_overlap=True))
    assert fused.breakdown["exposed_tp"] < vanilla.breakdown["exposed_tp"]
    # Symmetric-memory transfers hold no SMs: the hidden TP seconds cost nothing beside the GEMMs.
    assert fused.breakdown["comm_interference"] == pytest.approx(vanilla.breakdown["comm_interference"])
    # torchtitan's default is vanilla TP, Megatron-Core's recipes overlap it.
    assert plan_layout(arch, cluster, Layout(8, 1, 1, 1, 1, 4), 4096, PlanSettings(dp_flavour="fsdp")).iteration_s == \
        pytest.approx(vanilla.iteration_s)
    assert not default_tp_overlap("fsdp") and default_tp_overlap("zero1")


def test_pytorch_kernels_attention_rate_and_compute_factor():
    arch = llm_arch("llama3-8b")
    te = block_parts(arch, 2, 1, 1, 4096, "bf16", "H100")
    pt = block_parts(arch, 2, 1, 1, 4096, "bf16", "H100", options=BlockOptions(pytorch_kernels=True))
    spec = gpu_spec("H100")
    # Transformer Engine's cuDNN attention at the full dense rate, SDPA's FlashAttention-2 at mma's.
    assert te.attention_f_s == pytest.approx(pt.attention_f_s * mma_rate_flops(spec, "bf16") / spec.peak_flops("bf16"))
    assert te.block_f_s - te.attention_f_s == pytest.approx(pt.block_f_s - pt.attention_f_s)  # the GEMMs as before
    assert compute_factor_of("fsdp") == compute_factor_of("hsdp") == 1.0
    assert compute_factor_of("zero1") == load_layout_params().megatron_compute_factor
    assert compute_factor_of("fsdp", 0.5) == 0.5
    one = block_parts(arch, 1, 1, 1, 4096, "bf16", "H100", options=BlockOptions(pytorch_kernels=True))
    plan = plan_layout(arch, node(8), Layout(1, 1, 1, 8), 4096, PlanSettings(dp_flavour="fsdp"))  # no TP: no TP collectives
    assert plan.breakdown["forward"] == pytest.approx(32 * one.block_f_s + one.first_f_s + one.last_f_s)
    assert scaled_parts(pt, 1.0) is pt


def test_dtensor_keeps_the_gathered_norm_outputs():
    arch = llm_arch("llama3-8b")
    te = block_parts(arch, 4, 1, 2, 4096, "bf16", "H100")
    pt = block_parts(arch, 4, 1, 2, 4096, "bf16", "H100", options=BlockOptions(pytorch_kernels=True))
    # Two norms' outputs (micro-batch 2 x 4096 tokens x 4096 wide, bf16) kept whole: 3/4 more of each.
    assert pt.block_act_bytes - te.block_act_bytes == pytest.approx(2 * 2 * 4096 * 4096 * 2.0 * 3 / 4)
    sac = block_parts(arch, 4, 1, 2, 4096, "bf16", "H100", options=BlockOptions(op_sac=True, pytorch_kernels=True))
    te_sac = block_parts(arch, 4, 1, 2, 4096, "bf16", "H100", options=BlockOptions(op_sac=True))
    # per-op SAC gathers them again instead of keeping them
    assert sac.op_sac_saved_bytes - te_sac.op_sac_saved_bytes == pytest.approx(2 * 2 * 4096 * 4096 * 2.0 * 3 / 4)
    # torchao's float8 TP gathers FP8 (1 byte an element); bf16 and Megatron gather the activations.
    assert block_parts(arch, 4, 1, 2, 4096, "bf16", "H100", options=BlockOptions(fp8="tensorwise", pytorch_kernels=True)).gather_element_bytes == 1.0
    assert pt.gather_element_bytes == 0.0
    assert block_parts(arch, 4, 1, 2, 4096, "bf16", "H100", options=BlockOptions(fp8="tensorwise")).gather_element_bytes == 0.0


def test_the_search_prices_pytorchs_stack_as_plan_layout_does():
    from srift.simulate.layouts import search_layouts
    arch = llm_arch("llama3-8b")
    cluster = node(16)
    found = search_layouts(arch, cluster, 4096, 32, PlanSettings(dp_flavour="fsdp"), checkpointing=("full",))
    assert found.best is not None
    again = plan_layout(arch, cluster, found.best.layout, 4096, PlanSettings(checkpointing="full", dp_flavour="fsdp"))
    assert found.best.iteration_s == pytest.approx(again.iteration_s)
    assert found.best.memory_per_gpu_bytes == pytest.approx(again.memory_per_gpu_bytes)


def test_torchao_float8_tp_casts_gathered_tensors_on_their_shard():
    from srift.perf.compute import layer_times
    from srift.perf.fp8 import fp8_cast_bytes_per_element, fp8_times
    from srift.simulate.layouts import split_arch
    from srift.zoo.llm import decoder_profile
    arch = llm_arch("llama3-8b")
    prof = decoder_profile(split_arch(arch, 4), batch_size=1, seq_len=4096, precision="bf16")
    t = layer_times(prof, "H100", "bf16")
    whole_f, whole_b = fp8_times(prof, t, "H100", "tensorwise", fused_fc1=True)
    shard_f, shard_b = fp8_times(prof, t, "H100", "tensorwise", fused_fc1=True, cast_shards=4, gathered_width=4096)
    per_byte = fp8_cast_bytes_per_element("tensorwise") / kernel_rates("H100", "bf16").memory_bytes_per_s
    names = [layer.name for layer in prof.layers]
    qkv = next(i for i, n in enumerate(names) if n.endswith("Wqkv"))
    down = next(i for i, n in enumerate(names) if n.endswith("down_proj"))
    # q/k/v's 4096-wide input cast on 1/4 of its 4096 rows (forward); down's 4096-wide output gradient
    # likewise (backward); down's own input and q/k/v's output gradients stay whole.
    assert whole_f[qkv] - shard_f[qkv] == pytest.approx(4096 * 4096 * per_byte * 3 / 4)
    assert whole_b[down] - shard_b[down] == pytest.approx(4096 * 4096 * per_byte * 3 / 4)
    assert whole_f[down] == pytest.approx(shard_f[down]) and whole_b[qkv] == pytest.approx(shard_b[qkv])
