"""FSDP2 as the data-parallel flavour under TP/PP/CP layouts (srift/simulate/layouts.py, torchtitan's
2D/3D): per-block gather and reduce-scatter bytes and times, and memory, checked by hand."""

from __future__ import annotations

import json

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.perf.comm import CommModel
from srift.simulate.layouts import (
    BlockOptions, Layout, block_parts, candidate_layouts, fsdp_unit_bytes, PlanSettings, plan_layout, stage_layers,
    StageStates, stage_memory_bytes, state_shard,
)
from srift.simulate.memory import ALLOCATOR_FACTOR, ALLOCATOR_FIXED_BYTES
from srift.zoo import llm_arch

# Llama 3 70B on one TP-8 rank: q 8192 x 1024, k and v 8192 x 128, o 1024 x 8192, three MLP matrices
# 8192 x 3584, two replicated RMSNorm weights of 8192.
BLOCK_TP8 = 8192 * (1024 + 256) + 1024 * 8192 + 3 * 8192 * 3584 + 2 * 8192
EMBED_TP8 = 128256 * 8192 // 8  # the vocabulary split 8 ways
HEAD_TP8 = 128256 * 8192 // 8 + 8192  # and the final norm


def dgx(gpus: int) -> Cluster:
    return Cluster(f"{gpus} H100", (NodeGroup(count=max(1, gpus // 8), gpus_per_node=min(8, gpus), gpu="H100",
                                              intra_node="nvswitch4", network_gbps=3200.0, network="infiniband"),))


def test_per_block_gather_and_reduce_scatter_bytes_by_hand():
    assert BLOCK_TP8 == 106_971_136
    parts = block_parts(llm_arch("llama3-70b"), 8, 1, 1, 8192, "bf16", "H100")
    # One stage holding everything (no pipeline): the root unit is the embedding, final norm and head.
    gathered, reduced = fsdp_unit_bytes(parts, 2, True, True)
    assert gathered.tolist() == [2.0 * (EMBED_TP8 + HEAD_TP8), 2.0 * BLOCK_TP8, 2.0 * BLOCK_TP8]  # bf16
    assert reduced.tolist() == [4.0 * (EMBED_TP8 + HEAD_TP8), 4.0 * BLOCK_TP8, 4.0 * BLOCK_TP8]  # fp32 (torchtitan)
    assert fsdp_unit_bytes(parts, 1, False, False, "bf16")[1].tolist() == [0.0, 2.0 * BLOCK_TP8]  # a middle stage


def test_fsdp_gathers_and_reduces_each_block_every_micro_batch_without_a_pipeline():
    arch = llm_arch("llama3-70b")
    cluster = dgx(64)
    plan = plan_layout(arch, cluster, Layout(8, 1, 1, 8, 1, 1, 2), 8192,
                       PlanSettings(checkpointing="full", dp_flavour="fsdp"))
    # TP 8 fills a node: the DP group is 8 ranks, one per node.
    dp = CommModel.for_cluster(cluster).subgroup(8, 1)
    ag_b, rs_b = dp.all_gather_time_s(2.0 * BLOCK_TP8), dp.reduce_scatter_time_s(4.0 * BLOCK_TP8)
    ag_r, rs_r = dp.all_gather_time_s(2.0 * (EMBED_TP8 + HEAD_TP8)), dp.reduce_scatter_time_s(4.0 * (EMBED_TP8 + HEAD_TP8))
    # Per micro-batch: the root gathered once, 80 blocks gathered in forward and again in backward
    # (reshard_after_forward), every unit reduce-scattered once; 2 micro-batches.
    assert plan.comm_s["dp"] == pytest.approx(2 * (ag_r + 2 * 80 * ag_b + rs_r + 80 * rs_b))
    assert plan.breakdown["exposed_dp"] > 0.0
    assert sum(plan.breakdown.values()) == pytest.approx(plan.iteration_s)


def test_fsdp_under_a_pipeline_gathers_once_and_reduces_after_the_last_micro_batch():
    arch = llm_arch("llama3-70b")
    cluster = dgx(64)
    few = plan_layout(arch, cluster, Layout(8, 4, 1, 2, 1, 1, 8), 8192,
                      PlanSettings(checkpointing="full", dp_flavour="fsdp"))
    many = plan_layout(arch, cluster, Layout(8, 4, 1, 2, 1, 1, 32), 8192,
                       PlanSettings(checkpointing="full", dp_flavour="fsdp"))
    # 8 x 4 stages: a DP group of 2 ranks on two nodes. The slowest stage holds 21 blocks (80 + 2 over 4).
    n = max(stage_layers(80, 4))
    dp = CommModel.for_cluster(cluster).subgroup(2, 1)
    once = n * (dp.all_gather_time_s(2.0 * BLOCK_TP8) + dp.reduce_scatter_time_s(4.0 * BLOCK_TP8))
    assert n == 21 and stage_layers(80, 4)[1] == 21
    assert few.comm_s["dp"] == pytest.approx(once) and many.comm_s["dp"] == pytest.approx(once)  # not per micro-batch
    # The reduce-scatters wait at the end of the flush; the gathers hide behind the first forward.
    assert few.breakdown["exposed_dp"] >= n * dp.reduce_scatter_time_s(4.0 * BLOCK_TP8)


def test_fsdp_stage_memory_by_hand():
    p, root, block = 1e9, 1e8, 5e7
    # Resharded after forward (no pipeline): fp32 shards over 8 ranks; gathered: the root and two blocks
    # in bf16; gradients: fp32 shards + the root's (bf16) + one block computing (bf16) and one
    # reduce-scattering (bf16 + its fp32 copy).
    mem = stage_memory_bytes(StageStates(p, 8, root_params=root, block_params=block), 2e9, 1, dp_flavour="fsdp")
    assert mem["weights"] == 4 * p / 8
    assert mem["gathered_weights"] == 2 * (root + 2 * block)
    assert mem["gradients"] == 4 * p / 8 + 2 * root + block * (2 + 2 + 4)
    assert mem["optimizer_state"] == 8 * p / 8
    allocated = 4 * p / 8 + 2 * (root + 2 * block) + 4 * p / 8 + 2 * root + 8 * block + 8 * p / 8 + 2e9
    assert sum(mem.values()) == pytest.approx(ALLOCATOR_FACTOR * allocated + ALLOCATOR_FIXED_BYTES)
    # Under a pipeline the stage stays gathered and accumulates its unsharded gradients in fp32.
    piped = stage_memory_bytes(StageStates(p, 8, root_params=root, block_params=block), 2e9, 1, dp_flavour="fsdp", resharded=False)
    assert piped["gathered_weights"] == 2 * p
    assert piped["gradients"] == 4 * p / 8 + 4 * p + 2 * block


def test_state_shard_by_flavour():
    # TP 2 x PP 2 x CP 2 x DP 4 on nodes of 8: a CP x DP group of 8 ranks, 2 of them on each node.
    assert state_shard("fsdp", 8, 2, 2, 2, 4) == 8 == state_shard("zero1", 8, 2, 2, 2, 4)
    assert state_shard("hsdp", 8, 2, 2, 2, 4) == 2
    assert state_shard("ddp", 8, 2, 2, 2, 4) == 1


def test_the_searchs_memory_check_is_the_plans_under_fsdp():
    from srift.simulate.layouts import _peak_memory, _stage_memories
    arch = llm_arch("llama3-70b")
    for flavour in ("fsdp", "hsdp"):
        for lay in candidate_layouts(arch, 64, 8, 4096, 128)[::41]:
            parts = block_parts(arch, lay.tp, lay.cp, lay.micro_batch, 4096, "bf16", "H100")
            shard = state_shard(flavour, 8, lay.tp, lay.cp, lay.pp, lay.dp)
            for ckpt in ("none", "full"):
                every = max(sum(m.values()) for m in _stage_memories(arch, lay, parts, ckpt, flavour, shard=shard))
                assert _peak_memory(arch, lay, parts, ckpt, flavour) == pytest.approx(every)


def test_predict_a_2d_fsdp_layout_and_refuse_what_is_not_modelled(srift_cli):
    code, out = srift_cli(["predict", "--model", "llama3-70b", "--instance", "p5.48xlarge:8", "--layout", "tp=8",
                      "--parallelism", "fsdp", "--micro-batch-size", "2", "--global-batch-size", "16", "--seq-len", "8192",
                      "--precision", "bf16", "--activation-checkpointing", "full", "--format", "json"])
    assert code == 0, out
    d = json.loads(out)
    assert d["parallelism"] == "fsdp" and d["layout"]["dp"] == 8
    assert d["memory_breakdown_bytes"]["gathered_weights"] > 0
    code, out = srift_cli(["predict", "--model", "llama3-70b", "--instance", "p5.48xlarge:8", "--layout", "tp=8",
                      "--parallelism", "zero2", "--seq-len", "8192", "--precision", "bf16"])
    assert code == 2 and "Error: --parallelism zero2 is not modelled with --layout" in out


# ---- torchtitan's rows and the regret ------------------------------------------------------------
def test_torchtitan_rows_become_fsdp_layouts_by_hand():
    """torchtitan logs tokens/s per GPU as local batch x seq / (step x tp x pp x cp): Llama 3.1 405B
    2D (row 423: FSDP 16 x TP 8, local batch 2, 109 tokens/s) is 2 x 8192 / (109 x 8) = 18.789 s a
    step; the 3D Interleaved 1F1B row (439: local batch 32, 128 tokens/s) 32 x 8192 / (128 x 64) =
    32 s, its 8 stages x 2 per rank taking 16 micro-batches of 2."""
    from pathlib import Path

    from srift.fitting import layouts as lf

    rows, out = lf.torchtitan_rows(Path(__file__).resolve().parents[1] / "data")
    assert out == {"data parallel only (the sharded group's kind)": 9,
                   "precision fp8_rowwise+bf16 (not modelled: rowwise FP8 scaling)": 4}
    r = rows[rows["row_id"] == 423].iloc[0]
    assert r["value"] == pytest.approx(2 * 8192 / (109 * 8))
    assert (r["tp"], r["dp"], r["micro_batch"], r["global_batch"], r["dp_flavour"], r["checkpointing"]) == \
        (8, 16, 2, 32, "fsdp", "full")
    assert lf.row_layout(r).label == "tp8 pp1 cp1 dp16 mb2x1"
    r = rows[rows["row_id"] == 439].iloc[0]
    assert r["value"] == pytest.approx(32.0)
    # torchtitan's default micro-batches: the PP degree (8), also under Interleaved 1F1B
    assert lf.row_layout(r).label == "tp8 pp8 cp1 dp8 vp2 mb4x8" and r["fp8"] == "tensorwise" and r["tp_overlap"]
    # per-op selective checkpointing is torchtitan's policy; vanilla TP is not overlapped
    r = rows[rows["row_id"] == 450].iloc[0]
    assert r["checkpointing"] == "selective" and r["op_sac"] and not r["tp_overlap"]


def test_regret_compares_layouts_of_one_workload_by_hand():
    import numpy as np
    import pandas as pd

    from srift.fitting import layouts as lf

    def row(model, gpus, tp, dp, mb, gb, seq, value, precision="bf16"):
        return {"zoo": model, "gpu": "H100", "gpus_total": gpus, "tp": tp, "pp": 1, "cp": 1, "dp": dp, "vp": float("nan"),
                "micro_batch": mb, "global_batch": gb, "seq_len": seq, "value": value, "precision": precision,
                "source_slug": "toy"}

    rows = pd.DataFrame([row("a", 16, 2, 8, 2, 64, 4096, 2.75), row("a", 16, 4, 4, 4, 64, 4096, 2.83),
                         row("a", 16, 2, 8, 2, 64, 4096, 1.99, "fp8"), row("a", 16, 4, 4, 4, 64, 4096, 2.08, "fp8"),
                         row("a", 16, 4, 4, 4, 64, 8192, 9.0)])  # another sequence length: another workload
    # srift ranks the second layout first in bf16 (regret 2.83 / 2.75 - 1), the first in fp8 (0).
    groups = lf.regret_groups(rows, np.array([2.8, 2.7, 2.0, 2.1, 9.0]))
    assert len(groups) == 2
    assert groups["regret"].tolist() == pytest.approx([2.83 / 2.75 - 1.0, 0.0])
    assert lf.regret(rows, np.array([2.8, 2.7, 2.0, 2.1, 9.0]))[0] == pytest.approx((2.83 / 2.75 - 1.0) / 2)


def test_hsdp_shards_within_a_node_and_all_reduces_the_shards_across_nodes():
    arch = llm_arch("llama3-70b")
    cluster = dgx(64)
    # TP 2: a DP group of 32 ranks, 4 on each of 8 nodes.
    lay = Layout(2, 1, 1, 32, 1, 1, 1)
    plan = plan_layout(arch, cluster, lay, 4096, PlanSettings(checkpointing="full", dp_flavour="hsdp"))
    dp = CommModel.for_cluster(cluster).subgroup(32, 4)
    shard, across = dp.within_node(), dp.across_nodes()
    parts = block_parts(arch, 2, 1, 1, 4096, "bf16", "H100")
    gathered, reduced = fsdp_unit_bytes(parts, 80, True, True)
    root, block = gathered[0], gathered[1]
    expected = (shard.all_gather_time_s(root) + 2 * 80 * shard.all_gather_time_s(block)
                + shard.reduce_scatter_time_s(2 * root) + 80 * shard.reduce_scatter_time_s(2 * block)
                + across.allreduce_time_s(2 * root / 4) + 80 * across.allreduce_time_s(2 * block / 4))
    assert plan.comm_s["dp"] == pytest.approx(expected)
    assert state_shard("hsdp", 8, 2, 1, 1, 32) == 4
    assert plan.memory_breakdown_bytes["optimizer_state"] == pytest.approx(
        8.0 * (parts.local_embed_params + parts.local_head_params + 80 * parts.local_block_params) / 4)


def test_fsdp_under_a_layout_takes_expert_parallelism():
    from srift.simulate.layouts import check_sharded
    assert check_sharded("fsdp", 8, None) is None and check_sharded("zero1", 8, None) is None
    assert check_sharded("hsdp", 1, None) is None
    plan = plan_layout(llm_arch("mixtral-8x7b"), dgx(8), Layout(1, 1, 1, 8, ep=8), 4096,
                       PlanSettings(dp_flavour="fsdp", checkpointing="full"))
    assert plan.dp_flavour == "fsdp" and plan.comm_s["ep"] > 0.0  # tests/test_moe_fsdp_ep.py checks it by hand


def test_torchtitans_per_op_checkpointing_recomputes_every_other_matmul_and_the_pointwise_ops():
    from srift.perf.compute import layer_times
    from srift.simulate.layouts import split_arch
    from srift.zoo.llm import decoder_profile

    arch = llm_arch("llama3-8b")
    parts = block_parts(arch, 1, 1, 1, 4096, "bf16", "H100", options=BlockOptions(op_sac=True))
    prof = decoder_profile(split_arch(arch, 1), batch_size=1, seq_len=4096, precision="bf16")
    times = layer_times(prof, "H100", "bf16")
    block = {l.name.split(".")[-1]: (float(times.fwd_s[i]), l.activation_bytes) for i, l in enumerate(prof.layers)
             if l.unit == prof.layers[2].unit}
    # Saved: the fused qkv (1st matmul), attention, gate (3rd), down (5th); recomputed: the norms,
    # the output projection (2nd), the activation and up (4th).
    again = ("norm_1", "out_proj", "norm_2", "act", "up_proj")
    assert set(block) == {"norm_1", "Wqkv", "sdpa", "out_proj", "norm_2", "gate_proj", "act", "up_proj", "down_proj"}
    assert parts.op_sac_f_s == pytest.approx(sum(block[k][0] for k in again))
    assert parts.op_sac_saved_bytes == pytest.approx(sum(block[k][1] for k in again))
    assert block_parts(arch, 1, 1, 1, 4096, "bf16", "H100").op_sac_f_s == 0.0  # only when asked


def test_fsdp_layouts_keep_pytorchs_loss_beside_megatrons():
    from srift.simulate.layouts import _stage_memories, eager_loss_bytes
    arch = llm_arch("llama3-8b")
    parts = block_parts(arch, 2, 1, 1, 4096, "bf16", "H100")
    # 4096 tokens x 128256 / 2 logits on a TP-2 rank: loss parallelism's backward holds the fp32
    # gradient arriving, exp(output) and their product (4 + 4 + 4) beside the saved fp32
    # log-probabilities (Megatron's fused vocab-parallel softmax's 4, already in last_act_bytes).
    assert parts.logits == 4096 * 128256 // 2
    assert eager_loss_bytes(parts, "fsdp") == 12.0 * 4096 * 128256 / 2
    assert eager_loss_bytes(parts, "zero1") == 0.0
    # TP 1: the fused log_softmax backward, the gradient arriving and the one it writes (4 + 4).
    one = block_parts(arch, 1, 1, 1, 4096, "bf16", "H100")
    assert eager_loss_bytes(one, "fsdp") == 8.0 * 4096 * 128256
    lay = Layout(2, 2, 1, 2, 1, 1, 4)
    fsdp = _stage_memories(arch, lay, parts, "full", "fsdp", shard=2)
    zero1 = _stage_memories(arch, lay, parts, "full", "zero1", shard=2)
    assert fsdp[1]["activations"] - zero1[1]["activations"] == pytest.approx(12.0 * 4096 * 128256 / 2)
    assert fsdp[0]["activations"] == pytest.approx(zero1[0]["activations"])  # the first stage has no head
