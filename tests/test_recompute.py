"""Megatron-Core's selective recompute modules, the flex dispatcher's one send per node and the EP
all-to-all overlap, by hand on a tiny mixture of experts; the benchmark recipes' settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.perf.comm import CommModel
from srift.perf.fp8 import fp8_saved_bytes
from srift.simulate.layouts import BlockOptions, Layout, block_parts, ep_interference, PlanSettings, plan_layout
from srift.simulate.memory import ALLOCATOR_FACTOR
from srift.simulate.moe import node_dedup_fraction
from srift.simulate.recompute import check_modules
from srift.zoo.llm import DecoderArch

TINY = DecoderArch("tiny-moe", n_layers=2, hidden=64, heads=4, kv_heads=4, intermediate=256, vocab=100, experts=8,
                   experts_per_token=2, expert_intermediate=32)
WIDE = DecoderArch("wide-moe", n_layers=2, hidden=1024, heads=8, kv_heads=8, intermediate=256, vocab=100, experts=32,
                   experts_per_token=4, expert_intermediate=64)  # 32 experts: EP 16 spans two nodes
DATA = Path(__file__).resolve().parents[1] / "data"


def dgx(gpus: int) -> Cluster:
    return Cluster(f"{gpus} H100", (NodeGroup(count=max(1, gpus // 8), gpus_per_node=min(8, gpus), gpu="H100",
                                              intra_node="nvswitch4", network_gbps=3200.0, network="infiniband"),))


def saved(modules, fp8=None) -> float:
    return block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, fp8, modules)).selective_saved_bytes


def test_selective_modules_drop_what_they_name_by_hand():
    # 128 tokens, hidden 64, bf16: the input and pre-MLP norms' outputs
    assert saved(("layernorm",)) == 2 * 128 * 64 * 2
    # the experts' activation product: 128 tokens x top-2 rows x width 32
    assert saved(("moe_act",)) == 128 * 2 * 32 * 2
    # flash attention keeps beyond its output only the fp32 log-sum-exp per query and head
    assert saved(("core_attn",)) == 128 * 4 * 4
    assert saved(("layernorm", "moe_act")) == saved(("layernorm",)) + saved(("moe_act",))
    # FP8 GEMMs keep their FP8 copy of the product: 1 byte and MXFP8's scale per 32
    assert saved(("moe_act",), "mxfp8") == 128 * 2 * 32 * (1 + 1 / 32)
    assert fp8_saved_bytes("tensorwise") == 1.0
    parts = block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, None, ("layernorm", "moe_act")))
    assert 0 < parts.selective_f_s < parts.block_f_s
    # FP8 keeps a rowwise and a columnwise FP8 copy of every block weight, the local experts' included
    mx = block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, "mxfp8"))
    assert parts.fp8_weight_bytes == 0.0
    assert mx.fp8_weight_bytes == pytest.approx((mx.local_block_params + 2 * 3 * 64 * 32) * 2 * (1 + 1 / 32))
    with pytest.raises(ValueError, match="recompute modules"):
        check_modules(("experts",))


def test_moe_layer_recompute_drops_the_whole_layer_and_runs_its_all_to_alls_again_by_hand():
    # 128 tokens x top-2 = 256 rows, each keeping the gate and up outputs (2 x 32 x 2 bytes), its
    # dispatched input (64 x 2) and the product (32 x 2): 320 bytes; and the router's fp32
    # probabilities, 128 tokens x 8 experts x 4 bytes
    assert saved(("moe",)) == 256 * 320 + 128 * 8 * 4
    assert saved(("moe", "moe_act")) == saved(("moe",))  # the experts' activation is part of the layer
    parts = block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, None, ("moe",)))
    assert parts.moe_recomputed and parts.selective_f_s == pytest.approx(parts.experts_f_s)
    lay = Layout(1, 1, 1, 8, micro_batch=1, grad_accum=4, ep=4)
    none = plan_layout(TINY, dgx(8), lay, 128, PlanSettings(compute_factor=1.0))
    sel = plan_layout(TINY, dgx(8), lay, 128,
                      PlanSettings(checkpointing="selective", compute_factor=1.0, recompute_modules=("moe",)))
    # forward's dispatch and combine run again: 6 all-to-alls per block, not 4
    assert sel.breakdown["exposed_ep"] == pytest.approx(1.5 * none.breakdown["exposed_ep"])
    assert sel.breakdown["recompute"] == pytest.approx(4 * 2 * parts.selective_f_s)


def test_selective_plan_keeps_less_and_runs_the_modules_again():
    lay = Layout(1, 1, 1, 8, micro_batch=1, grad_accum=4, ep=4)
    modules = ("layernorm", "moe_act")
    none = plan_layout(TINY, dgx(8), lay, 128, PlanSettings(compute_factor=1.0))
    sel = plan_layout(TINY, dgx(8), lay, 128,
                      PlanSettings(checkpointing="selective", compute_factor=1.0, recompute_modules=modules))
    # one micro-batch in flight (no pipeline): 2 blocks keep less, one block's modules are rebuilt
    # at the peak, the allocator's slack on activations
    assert none.memory_per_gpu_bytes - sel.memory_per_gpu_bytes == pytest.approx(
        (2 - 1) * saved(modules) * ALLOCATOR_FACTOR)
    parts = block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, None, modules))
    assert sel.breakdown["recompute"] == pytest.approx(4 * 2 * parts.selective_f_s)
    assert sel.recompute_modules == modules and none.recompute_modules == ()


def test_flex_dispatcher_sends_a_token_once_per_node_by_hand():
    assert node_dedup_fraction(TINY, 8, 8) == 1.0  # within a node: nothing to save
    # 2 nodes, top-2: the other node is hit with probability 1 - (1/2)^2 = 3/4, against 2 x 1/2 rows
    assert node_dedup_fraction(TINY, 16, 8) == pytest.approx(0.75)
    # 4 nodes: 3 x (1 - (3/4)^2) = 1.3125 nodes, against 2 x 3/4 = 1.5 rows
    assert node_dedup_fraction(TINY, 32, 8) == pytest.approx(1.3125 / 1.5)
    ep = CommModel.for_cluster(dgx(32)).subgroup(32, 8)
    size = 64e6  # network-bound: the network term scales with the share that crosses
    full, half = ep.all_to_all_time_s(size), ep.all_to_all_time_s(size, network_fraction=0.5)
    assert half < full
    within = Layout(1, 1, 1, 32, micro_batch=1, grad_accum=2, ep=8)
    flex, a2a = (plan_layout(TINY, dgx(32), within, 128, PlanSettings(dispatcher=d)) for d in ("flex", "alltoall"))
    assert flex.breakdown["exposed_ep"] == pytest.approx(a2a.breakdown["exposed_ep"])  # EP within a node: the same
    # HybridEP permutes inside its kernels: the permutation passes' seconds (forward and backward,
    # 2 blocks, 2 micro-batches, the shipped compute factor) are what flex saves
    from srift.perf.compute import kernel_rates
    from srift.simulate.layouts import load_layout_params
    from srift.simulate.moe import moe_block_shape
    shape = moe_block_shape(TINY, 128, 8, 2.0)
    assert moe_block_shape(TINY, 128, 8, 2.0, dispatcher="flex").permute_bytes == 0.0 < shape.permute_bytes
    saved = 2 * 2 * 2 * shape.permute_bytes / kernel_rates("H100", "bf16").memory_bytes_per_s
    assert a2a.breakdown["forward"] + a2a.breakdown["backward"] - flex.breakdown["forward"] \
        - flex.breakdown["backward"] == pytest.approx(saved * load_layout_params().megatron_compute_factor)
    across = Layout(1, 1, 1, 32, micro_batch=1, grad_accum=2, ep=16)
    assert plan_layout(WIDE, dgx(32), across, 128, PlanSettings(dispatcher="flex")).breakdown["exposed_ep"] < \
        plan_layout(WIDE, dgx(32), across, 128, PlanSettings()).breakdown["exposed_ep"]


def test_ep_overlap_hides_the_all_to_alls_behind_compute():
    lay = Layout(1, 1, 1, 16, micro_batch=1, grad_accum=4, ep=16)
    plain = plan_layout(WIDE, dgx(16), lay, 128, PlanSettings())
    over = plan_layout(WIDE, dgx(16), lay, 128, PlanSettings(ep_overlap=True))
    hidden = plain.breakdown["exposed_ep"] - over.breakdown["exposed_ep"]
    assert hidden > 0 and over.comm_s["ep"] == pytest.approx(plain.comm_s["ep"])
    # what is hidden costs the share of the SMs the all-to-all holds: NCCL's send and receive with
    # each of the 15 other ranks, 2 channels (SMs) each: 30 of H100's 132 SMs
    assert over.breakdown["comm_interference"] - plain.breakdown["comm_interference"] == pytest.approx(
        30 / 132 * hidden)
    # NCCL runs at most 32 channels (EP 32: 32, not 62); the flex dispatcher's HybridEP kernels hold
    # the 32 SMs Megatron-Bridge gives them
    assert ep_interference("H100", "alltoall", 32) == 32 / 132 and ep_interference("H100", "alltoall", 4) == 6 / 132
    assert ep_interference("B200", "flex", 8) == 32 / 148
    # B300 is GB300's Blackwell Ultra GPU: 160 SMs (configs/gpus.yaml says where from)
    assert ep_interference("B300", "flex", 8) == ep_interference("GB300", "flex", 8) == 32 / 160


def test_benchmark_recipes_and_the_runs_fit_at_their_setting():
    from srift.fitting import moe as mf
    recipes = mf.load_recipes(DATA)
    assert recipes[("DeepSeek-V3", "B200", "fp8-mx")] == mf.Recipe(("selective", ("mla_up_proj",)), "flex", False,
                                                                    (256, 1, 8, 8, 1))
    assert recipes[("Qwen3-235B-A22B", "H100-SXM5-80GB", "fp8-cs")] == mf.Recipe(("none", ()), "alltoall", True,
                                                                                 (256, 2, 8, 32, 1))
    assert recipes[("GPT-OSS-120B", "B200", "bf16")].recompute == ("selective", ("layernorm", "moe_act"))
    assert recipes[("Qwen3-30B-A3B", "B200", "fp8-mx")].fp8_attention
    # the NVL72 recipes (megatron-bridge 0.6.2 perf_recipes/*/gb200, gb300): Qwen3-30B-A3B's MXFP8 one
    # runs the full-iteration HybridEP helper (EP overlap, FP8 attention); GPT-OSS-120B's GB200 one
    # sets selective recompute with no module, i.e. nothing recomputed
    assert recipes[("Qwen3-30B-A3B", "GB200", "fp8-mx")] == mf.Recipe(("none", ()), "flex", True, (8, 1, 1, 8, 4), True)
    assert recipes[("GPT-OSS-120B", "GB200", "fp8-mx")].recompute == ("none", ())
    assert recipes[("Qwen3-235B-A22B", "GB300", "bf16")] == mf.Recipe(("none", ()), "flex", False, (256, 1, 4, 32, 2))
    # Kimi-K2's GB300 MXFP8 recipe is the 26.06 run's own layout: MLA up-projections recomputed, HybridEP
    assert recipes[("Kimi-K2", "GB300", "fp8-mx")] == mf.Recipe(("selective", ("mla_up_proj",)), "flex", False,
                                                                (256, 1, 4, 64, 2))
    rows, _ = mf.load_rows(DATA)
    # both GB200 runs of Qwen3-30B-A3B (25.11 and 26.08) are at the recipe's layout: both take it
    assert {str(r.source_section).split(" ")[0] for r in rows.itertuples() if r.zoo == "qwen3-30b-a3b" and r.gpu == "GB200"
            and mf.recipe_of(r, recipes) is recipes[("Qwen3-30B-A3B", "GB200", "fp8-mx")]} == {"25.11", "26.08"}
    qwen = {(int(r.micro_batch), str(r.source_section).split(" ")[0]): mf.recipe_of(r, recipes) for r in rows.itertuples()
            if r.zoo == "qwen3-30b-a3b" and r.gpu == "B200"}
    # the recipe runs micro-batch 4: the 26.04.01 run at 4 is its; the earlier runs at 1 are not
    assert qwen[(4, "26.04.01")] is recipes[("Qwen3-30B-A3B", "B200", "fp8-mx")]
    assert qwen[(1, "25.11")] is None and qwen[(1, "26.02")] is None
    labels = {(r.zoo, r.gpu, r.micro_batch, str(r.source_section).split(" ")[0]): mf.predict_row(r, recipes)[1]
              for r in rows.itertuples()}
    # Every run people ran fits srift's memory model (a false "does not fit" is a bug)
    assert not any("does not fit" in x for x in labels.values())
    # A recipe's recompute holds at its own layout; GPT-OSS-120B's 25.11 H100 run at micro-batch 4
    # (the recipe runs micro-batch 1) takes the least that fits: whole MoE layers recomputed.
    assert labels[("gpt-oss-120b", "H100-SXM5-80GB", 1, "26.04.01")] == "selective (layernorm, moe_act)"
    # (the label names only what GPT-OSS has: no MLA, dense MLP or shared experts)
    assert labels[("gpt-oss-120b", "H100-SXM5-80GB", 4, "25.11")] == "selective (layernorm, moe), least that fits"
    assert labels[("kimi-k2", "GB300", 2, "26.06")] == "selective (mla_up_proj)"


def test_a_run_without_its_recipe_takes_the_dispatcher_all_its_models_recipes_set():
    from srift.fitting import moe as mf
    recipes = mf.load_recipes(DATA)
    # DeepSeek-V3's six recipes (B200 to GB300, bf16 and MXFP8), Qwen3-30B-A3B's five and Kimi-K2's
    # one all set HybridEP; Qwen3-235B-A22B's (H100 all-to-all, B200 HybridEP) and GPT-OSS-120B's differ
    assert mf.model_dispatchers(recipes) == {"DeepSeek-V3": "flex", "Qwen3-30B-A3B": "flex", "Kimi-K2": "flex"}
    rows, _ = mf.load_rows(DATA)
    got = {(r.zoo, r.gpu, int(r.ep), str(r.source_section).split(" ")[0]):
           (mf.recipe_of(r, recipes), mf.dispatcher_of(r, recipes)) for r in rows.itertuples()}
    # the B200 run at EP 32 is not its recipe's (EP 8), and still runs HybridEP
    assert got[("deepseek-v3", "B200", 32, "26.04.01")] == (None, "flex")
    # a run at its recipe's layout keeps the recipe's; one without, of a model whose recipes differ, all-to-all
    assert got[("qwen3-235b-a22b", "H100-SXM5-80GB", 32, "26.04.01")][1] == "alltoall"
    assert got[("gpt-oss-120b", "B300", 64, "26.02")] == (None, "alltoall")
    # HybridEP sends a token once to each other node: at EP 32 (4 nodes of 8) it is ahead of all-to-all
    r = next(r for r in rows.itertuples() if r.zoo == "deepseek-v3" and int(r.ep) == 32)
    flex = mf._predict(r.zoo, r.gpu, 256, 8, mf.row_layout(r), 4096, "mxfp8", None, "flex")[0]
    a2a = mf._predict(r.zoo, r.gpu, 256, 8, mf.row_layout(r), 4096, "mxfp8", None, "alltoall")[0]
    assert flex > 1.5 * a2a


def test_auto_checkpointing_on_a_fixed_layout_takes_the_least_recompute_that_fits():
    from srift.simulate.layout_prediction import LayoutSettings, plan_for
    from srift.job import LayoutRequest
    from srift.simulate.recompute import AUTO_LADDER
    cluster, lay = dgx(8), Layout(1, 1, 1, 8, micro_batch=4, grad_accum=2, ep=8)
    arch = DecoderArch("mem-moe", n_layers=11, hidden=2048, heads=16, kv_heads=16, intermediate=2048, vocab=1000,
                       experts=8, experts_per_token=8, expert_intermediate=8192)
    plans = [plan_layout(arch, cluster, lay, 4096, PlanSettings(checkpointing=p, recompute_modules=m or ("core_attn",)))
             for p, m in AUTO_LADDER]
    # memory falls and recompute grows down the selective rungs; full keeps less than none
    mems = [p.memory_per_gpu_bytes for p in plans]
    assert mems[:-1] == sorted(mems[:-1], reverse=True) and mems[-1] < mems[0]
    recomputed = [p.breakdown["recompute"] for p in plans]
    assert recomputed == sorted(recomputed) and recomputed[0] == 0.0
    first_fit = next(p for p in plans if p.fits)
    assert not plans[0].fits and first_fit.checkpointing == "selective"  # the experts' activation is what it drops
    # The one fit rule (srift.simulate.memory.fit_state): the least recompute that fits for sure,
    # as the data-parallel plans choose; a rung that may not fit only when none fits for sure.
    sure = next(p for p in plans if p.memory_state == "fits")
    assert first_fit.memory_state == "may not fit" and sure.breakdown["recompute"] > first_fit.breakdown["recompute"]
    settings = LayoutSettings(LayoutRequest(tp=1, pp=1, cp=1, ep=8), micro_batch=4, global_batch=64)
    chosen, _ = plan_for(arch, cluster, settings, 4096, "bf16")
    assert (chosen.checkpointing, chosen.recompute_modules) == (sure.checkpointing, sure.recompute_modules)


def test_fp8_attention_runs_the_attention_core_at_the_fp8_peak_by_hand():
    from srift.perf.compute import kernel_rates
    from srift.perf.fp8 import fp8_attention_s
    launch = kernel_rates("H100", "bf16").launch_s
    assert fp8_attention_s(1e-3, "H100") == pytest.approx((1e-3 - launch) * 989.4 / 1979.0 + launch)
    bf = block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, "tensorwise"))
    f8 = block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, "tensorwise", fp8_attention=True))
    assert f8.attention_f_s == pytest.approx(fp8_attention_s(bf.attention_f_s, "H100"))
    assert f8.block_f_s - bf.block_f_s == pytest.approx(f8.attention_f_s - bf.attention_f_s)
    # without an FP8 recipe the attention stays bf16
    assert block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, None, fp8_attention=True)) == \
        block_parts(TINY, 1, 1, 1, 128, "bf16", "H100", 4, BlockOptions(1.0, None))


def test_deepseek_runs_train_one_mtp_layer_and_take_their_recipes_pipeline_layout():
    from srift.fitting import moe as mf
    rows, _ = mf.load_rows(DATA)
    layouts = mf.load_pipeline_layouts(DATA)
    got = {(r.zoo, r.gpu, int(r.pp), int(r.vp) if r.vp == r.vp else 1): (mf.mtp_layers_of(r), mf.stage_blocks_of(r, layouts))
           for r in rows.itertuples()}
    # DeepSeek-V3's HF config: one MTP layer; its recipes' pp 16 layout: 4 blocks a stage, the last 1 + MTP
    assert got[("deepseek-v3", "B200", 16, 1)] == (1, (4,) * 15 + (2,))
    assert got[("deepseek-v3", "GB200", 4, 4)] == (1, (16, 16, 16, 14))
    assert got[("deepseek-v3", "GB200", 8, 4)] == (1, None)  # no recipe lays out pp 8 x vp 4: the even split
    assert got[("qwen3-235b-a22b", "B300", 8, 1)] == (0, None)
    # Kimi-K2's config has no MTP module (num_nextn_predict_layers 0): its run trains none
    assert {v[0] for k, v in got.items() if k[0] == "kimi-k2"} == {0}


def test_auto_ladder_recomputes_mla_up_projections_before_shared_experts_and_dense_mlps():
    """An MLA model's ladder has a rung that adds only MLA's up-projections (what Megatron-Bridge's
    DeepSeek-V3 recipes recompute): it keeps less than the rung above it and recomputes less than
    the rung below it, so ``auto`` stops there when it is the first that fits."""
    from srift.simulate.recompute import AUTO_LADDER
    mla = DecoderArch("tiny-mla", n_layers=4, hidden=512, heads=8, kv_heads=8, head_dim=96, intermediate=1024,
                      vocab=1000, experts=8, experts_per_token=2, expert_intermediate=256, shared_intermediate=256,
                      dense_layers=1, q_lora_rank=128, kv_lora_rank=64, qk_rope_head_dim=32, v_head_dim=64)
    rungs = [m for p, m in AUTO_LADDER if p == "selective"]
    i = rungs.index(("layernorm", "mla_up_proj", "moe_act"))
    assert rungs[i - 1] == ("layernorm", "moe_act") and set(rungs[i]) < set(rungs[i + 1])
    plans = [plan_layout(mla, dgx(8), Layout(1, 1, 1, 8, micro_batch=2, grad_accum=1, ep=8), 2048,
                         PlanSettings(checkpointing="selective", recompute_modules=m)) for m in rungs[i - 1:i + 2]]
    mems = [p.memory_per_gpu_bytes for p in plans]
    recomputed = [p.breakdown["recompute"] for p in plans]
    assert mems[0] > mems[1] > mems[2] and recomputed[0] < recomputed[1] < recomputed[2]
