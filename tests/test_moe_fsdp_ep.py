"""FSDP2/HSDP with expert parallelism (#46), as torchtitan 0.3.0 applies it: the routed experts
sharded over the expert data-parallel mesh (``efsdp`` = dp_shard x cp x tp / ep), the rest over
CP x DP; memory per GPU and the per-block collectives checked by hand on Qwen3-30B-A3B."""

from __future__ import annotations

import json

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.perf.comm import CommModel
from srift.simulate.layouts import Layout, PlanSettings, block_parts, plan_layout, search_layouts, state_shard
from srift.simulate.moe import expert_dp, expert_shard_of
from srift.zoo import llm_arch

# Qwen3-30B-A3B (hidden 2048, 32 query and 4 key/value heads of 128, q/k norms, 128 experts of 768,
# vocabulary 151,936, untied): per block q 2048 x 4096, k and v 2048 x 512 each, o 4096 x 2048, two
# norms of 2048, q and k norms of 128, the router 2048 x 128; each expert gate, up and down 2048 x 768.
DENSE_BLOCK = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 2048 + 2 * 128 + 2048 * 128
EXPERT = 3 * 2048 * 768
ROOT = 151936 * 2048 + 151936 * 2048 + 2048  # embedding; head and final norm (one stage)
BLOCKS = 48


def dgx(gpus: int) -> Cluster:
    return Cluster(f"{gpus} H100", (NodeGroup(count=max(1, gpus // 8), gpus_per_node=min(8, gpus), gpu="H100",
                                              intra_node="nvswitch4", network_gbps=3200.0, network="infiniband"),))


def test_expert_shard_is_torchtitans_efsdp_mesh():
    # efsdp = dp_shard x cp x tp / ep (torchtitan 0.3.0 parallel_dims.py); zero1's expert DP group alike.
    assert expert_shard_of(16, 1, 8) == 2 == expert_dp(1, 1, 16, 8)
    assert expert_shard_of(4, 2, 8) == 1 == expert_dp(2, 1, 4, 8)
    assert expert_shard_of(8, 2, 1) == 8  # no EP: experts split by TP like the rest, sharded over CP x DP
    assert expert_shard_of(8, 1, 16) == 1  # HSDP's node of 8 under an EP of 16: no shard left


def test_block_parameters_by_hand():
    parts = block_parts(llm_arch("qwen3-30b-a3b"), 1, 1, 1, 4096, "bf16", "H100", 8)
    assert DENSE_BLOCK == 19_140_864
    assert parts.local_block_params == DENSE_BLOCK
    assert parts.local_expert_params == 128 // 8 * EXPERT == 75_497_472
    assert parts.local_embed_params + parts.local_head_params == ROOT


@pytest.mark.parametrize("flavour,shard", [("fsdp", 16), ("hsdp", 8)])
def test_fsdp2_with_expert_parallelism_memory_per_gpu_by_hand(flavour: str, shard: int):
    """16 H100 (2 nodes), EP 8: dense parts over the 16 data-parallel ranks (HSDP: a node's 8),
    each GPU's 16 experts of a block over the expert group of 16 / 8 = 2 ranks (HSDP: 1)."""
    arch = llm_arch("qwen3-30b-a3b")
    plan = plan_layout(arch, dgx(16), Layout(1, 1, 1, 16, micro_batch=1, grad_accum=2, ep=8), 4096,
                       PlanSettings(checkpointing="full", dp_flavour=flavour))
    dense = BLOCKS * DENSE_BLOCK + ROOT
    experts = BLOCKS * 16 * EXPERT
    eshard = shard // 8
    block = DENSE_BLOCK + 16 * EXPERT  # the largest unit gathered: the block with this GPU's experts
    mem = plan.memory_breakdown_bytes
    assert mem["weights"] == pytest.approx(4 * dense / shard + 4 * experts / eshard)  # fp32 shards
    assert mem["gathered_weights"] == pytest.approx(2 * (ROOT + 2 * block))  # bf16: root and two blocks
    # fp32 gradient shards, the root's bf16 gradients, one block computing (bf16) and one
    # reduce-scattering (bf16 and its fp32 copy)
    assert mem["gradients"] == pytest.approx(4 * dense / shard + 4 * experts / eshard + 2 * ROOT + block * (2 + 2 + 4))
    assert mem["optimizer_state"] == pytest.approx(8 * dense / shard + 8 * experts / eshard)
    assert plan.memory_per_gpu_bytes == pytest.approx(sum(mem.values()))


def test_fsdp2_with_expert_parallelism_collectives_by_hand():
    """Without a pipeline each micro-batch gathers a block's dense part over the 16 data-parallel
    ranks and its experts over their 2 (one per node: EP innermost), in forward and again in
    backward, and reduce-scatters each once; the root (embedding, head) over the 16."""
    arch = llm_arch("qwen3-30b-a3b")
    cluster = dgx(16)
    plan = plan_layout(arch, cluster, Layout(1, 1, 1, 16, micro_batch=1, grad_accum=2, ep=8), 4096,
                       PlanSettings(checkpointing="full", dp_flavour="fsdp"))
    comm = CommModel.for_cluster(cluster)
    dp, edp = comm.subgroup(16, 8), comm.subgroup(2, 1)
    ag_r, rs_r = dp.all_gather_time_s(2.0 * ROOT), dp.reduce_scatter_time_s(4.0 * ROOT)
    ag_b = dp.all_gather_time_s(2.0 * DENSE_BLOCK) + edp.all_gather_time_s(2.0 * 16 * EXPERT)
    rs_b = dp.reduce_scatter_time_s(4.0 * DENSE_BLOCK) + edp.reduce_scatter_time_s(4.0 * 16 * EXPERT)
    assert plan.comm_s["dp"] == pytest.approx(2 * (ag_r + 2 * BLOCKS * ag_b + rs_r + BLOCKS * rs_b))
    # the dispatch and combine all-to-alls of the EP group, as under Megatron-Core's layouts
    assert plan.comm_s["ep"] > 0.0 and plan.breakdown["exposed_ep"] > 0.0
    assert sum(plan.breakdown.values()) == pytest.approx(plan.iteration_s)
    # the optimizer steps each GPU's shards: dense over 16, experts over 2
    zero1 = plan_layout(arch, cluster, Layout(1, 1, 1, 16, micro_batch=1, grad_accum=2, ep=8), 4096,
                        PlanSettings(checkpointing="full", dp_flavour="zero1"))
    assert plan.breakdown["optimizer"] == pytest.approx(zero1.breakdown["optimizer"])


def test_the_searchs_memory_check_is_the_plans_with_expert_parallelism():
    from srift.simulate.layouts import _peak_memory, _stage_memories
    arch = llm_arch("qwen3-30b-a3b")
    for flavour in ("fsdp", "hsdp", "zero1"):
        for lay in (Layout(1, 1, 1, 16, ep=8), Layout(2, 2, 1, 4, 1, 4, 4, ep=4), Layout(1, 2, 1, 8, 1, 8, ep=8)):
            parts = block_parts(arch, lay.tp, lay.cp, lay.micro_batch, 4096, "bf16", "H100", lay.ep)
            shard = state_shard(flavour, 8, lay.tp, lay.cp, lay.pp, lay.dp)
            for ckpt in ("none", "full"):
                every = max(sum(m.values()) for m in _stage_memories(arch, lay, parts, ckpt, flavour, shard=shard))
                assert _peak_memory(arch, lay, parts, ckpt, flavour) == pytest.approx(every)


def test_the_search_under_fsdp_tries_expert_parallelism():
    arch = llm_arch("qwen3-30b-a3b")
    found = search_layouts(arch, dgx(16), 4096, 64, PlanSettings(dp_flavour="fsdp"))
    assert found.best is not None and found.best.dp_flavour == "fsdp"
    assert found.best.layout.ep > 1  # 128 experts of 768 each: EP beats gathering every expert


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3"])
def test_predict_fsdp_with_expert_parallelism(srift_cli, model: str):
    instances = "p5.48xlarge:2" if model == "qwen3-30b-a3b" else "p5.48xlarge:32"
    ep = 8 if model == "qwen3-30b-a3b" else 64
    code, out = srift_cli(["predict", "--model", model, "--instance", instances, "--layout", f"tp=1,pp=1,cp=1,ep={ep}",
                           "--parallelism", "fsdp", "--global-batch-size", "256", "--seq-len", "4096",
                           "--activation-checkpointing", "full", "--format", "json"])
    assert code == 0, out
    d = json.loads(out)
    assert d["parallelism"] == "fsdp" and d["layout"]["ep"] == ep
    assert d["memory_breakdown_bytes"]["gathered_weights"] > 0
    assert any("expert data-parallel" in n for n in d["notes"])


@pytest.mark.parametrize("stack", ["torchtitan", "nemo-automodel"])
def test_predict_fsdp_with_expert_parallelism_under_pytorch_native_stacks(srift_cli, stack: str):
    """The issue's third case through the CLI: Qwen3-30B-A3B on 8 H100 (NeMo AutoModel's README row's
    GPU count), FSDP2 with EP 8 under each PyTorch-native stack. Each GPU holds its 16 experts of
    each block whole (expert data-parallel group 8 / 8 = 1) and an eighth of the dense part, in fp32."""
    code, out = srift_cli(["predict", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge:1", "--layout",
                           "tp=1,pp=1,cp=1,ep=8", "--parallelism", "fsdp", "--stack", stack, "--global-batch-size", "64",
                           "--seq-len", "4096", "--format", "json"])
    assert code == 0, out
    d = json.loads(out)
    assert d["stack"] == stack and d["parallelism"] == "fsdp" and d["layout"]["ep"] == 8
    dense, experts = BLOCKS * DENSE_BLOCK + ROOT, BLOCKS * 16 * EXPERT
    assert d["memory_breakdown_bytes"]["weights"] == 4 * dense / 8 + 4 * experts == 15_266_061_312
    assert d["memory_breakdown_bytes"]["optimizer_state"] == 8 * dense / 8 + 8 * experts
    assert d["params_total"] == dense + 48 * 128 * EXPERT
    # Qwen3 has neither MLA nor shared experts nor dense blocks: a recompute note names none of them
    assert not any("mla_up_proj" in n or "shared_experts" in n for n in d["notes"])


def test_recompute_notes_name_only_the_modules_a_model_has():
    from srift.simulate.recompute import AUTO_LADDER, modules_present
    widest = AUTO_LADDER[-2][1]
    assert widest == ("layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
    assert modules_present(llm_arch("qwen3-30b-a3b"), widest) == ("layernorm", "moe")
    assert modules_present(llm_arch("deepseek-v3"), widest) == widest  # MLA, 3 dense blocks, a shared expert
    assert modules_present(llm_arch("llama3-8b"), ("layernorm", "mlp", "moe_act")) == ("layernorm", "mlp")
