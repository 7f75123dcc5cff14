"""A layout prediction plans once (its 90th percentile and network fall-backs re-price the same
plan), and the layout search's shortcuts (one middle stage per block mix, peaks shared across GPU
types) give the numbers of the full count (srift/simulate/layout/)."""

from __future__ import annotations

import pytest

from srift.api import resolve_cluster
from srift.catalog.spec import efa_fallbacks
from srift.job import Job
from srift.simulate.layout.blocks import BlockOptions, block_parts
from srift.simulate.layout.memory import (_peak_memory_of, _stage_memories, memory_signature, peak_memory,
                                          peak_stages)
from srift.simulate.layout.pipeline import stage_layers, stage_moe_blocks
from srift.simulate.layout.plan import Layout, state_shard
from srift.simulate.layout.search import _divisors
from srift.simulate.layout.step import PlanSettings, plan_layout
from srift.simulate.layout_prediction import LayoutPredictor
from srift.simulate.moe import expert_dp
from srift.zoo import llm_arch

DS_LAYOUTS = [Layout(1, 16, 1, 16, 1, 1, 4, "1f1b", 8), Layout(2, 8, 1, 16, 1, 1, 8, "1f1b", 8),
              Layout(1, 4, 1, 64, 4, 1, 4, "interleaved", 8), Layout(1, 8, 1, 32, 2, 2, 8, "interleaved", 16)]


def test_divisors_are_every_divisor_in_order():
    for n in (1, 2, 7, 12, 36, 97, 1024, 16384, 3 * 5 * 7 * 11):
        assert list(_divisors(n)) == [k for k in range(1, n + 1) if n % k == 0]


@pytest.mark.parametrize("lay", DS_LAYOUTS, ids=lambda lay: lay.label)
@pytest.mark.parametrize("ckpt", ["none", "full"])
def test_the_searchs_peak_is_every_stages_for_a_moe_with_dense_blocks(lay, ckpt):
    # DeepSeek-V3: 3 dense blocks of 61, so the stages differ; the search counts the first, the
    # last and one middle stage of each mix of blocks. The reference: every stage counted.
    arch = llm_arch("deepseek-v3")
    parts = block_parts(arch, lay.tp, lay.cp, lay.micro_batch, 4096, "bf16", "H100", lay.ep)
    every = [sum(m.values()) for m in _stage_memories(arch, lay, parts, ckpt, "zero1", shard=lay.cp * lay.dp)]
    v = lay.vp if lay.schedule == "interleaved" else 1
    assert _peak_memory_of(arch, lay.pp, v, lay.grad_accum, lay.cp * lay.dp, parts, ckpt, "zero1",
                           expert_dp(lay.tp, lay.cp, lay.dp, lay.ep)) == pytest.approx(max(every), rel=1e-12)
    layers = stage_layers(arch.n_layers, lay.pp, True)
    stages = peak_stages(layers, stage_moe_blocks(arch, layers, v))
    assert len(stages) < lay.pp  # the shortcut skips stages...
    assert every.index(max(every)) in stages  # ...never the most loaded


def test_a_plans_memory_is_its_most_loaded_stage_of_all():
    arch = llm_arch("deepseek-v3")
    cluster = resolve_cluster("p5.48xlarge:32", None)
    lay = Layout(1, 16, 1, 16, 1, 1, 64, "1f1b", 8)
    plan = plan_layout(arch, cluster, lay, 4096, PlanSettings(checkpointing="full"))
    parts = block_parts(arch, 1, 1, 1, 4096, "bf16", "H100", 8, BlockOptions(fused_fc1=True))
    every = [sum(m.values()) for m in _stage_memories(arch, lay, parts, "full", "zero1", shard=16)]
    assert plan.memory_stage == every.index(max(every))


def test_peaks_are_shared_only_by_equal_memory_figures():
    arch = llm_arch("deepseek-v3")
    h100 = block_parts(arch, 2, 1, 1, 4096, "bf16", "H100", 8)
    h200 = block_parts(arch, 2, 1, 1, 4096, "bf16", "H200", 8)
    other = block_parts(arch, 2, 1, 2, 4096, "bf16", "H100", 8)
    assert h100.block_f_s != h200.block_f_s  # different GPUs, different seconds...
    assert memory_signature(arch, h100) == memory_signature(arch, h200)  # ...the same bytes
    assert memory_signature(arch, other) != memory_signature(arch, h100)
    for parts in (h100, h200, other):
        sig = memory_signature(arch, parts)
        shard = state_shard("zero1", 8, 2, 1, 8, 16)
        assert peak_memory(sig, arch, 8, 1, 8, shard, parts, "none", "zero1", 4) == \
            _peak_memory_of(arch, 8, 1, 8, shard, parts, "none", "zero1", 4)


def _predictor(model: str, layout: str, checkpointing: str = "auto") -> LayoutPredictor:
    return LayoutPredictor(llm_arch(model), Job(layout=layout, precision="bf16", seq_len=4096, global_batch_size=256,
                                                activation_checkpointing=checkpointing), 4096)


@pytest.mark.parametrize("model, layout, spec", [("llama3-70b", "tp=8,pp=2", "p5.48xlarge:2"),
                                                  ("deepseek-v3", "tp=1,pp=16,ep=8", "p5.48xlarge:32")])
def test_the_p90_is_the_plans_step_at_the_90th_percentile(model, layout, spec):
    cluster = resolve_cluster(spec, None)
    pred = _predictor(model, layout, "full").predict(cluster)
    lay = pred.layout
    # The reference: the whole plan made again at the 90th percentile.
    p90 = plan_layout(llm_arch(model), cluster, lay, 4096,
                      PlanSettings(checkpointing="full", quantile=0.9, imbalance=pred.moe_imbalance or 1.0))
    assert pred.p90_iteration_time_s == max(pred.iteration_time_s, p90.iteration_s)
    assert p90.iteration_s > pred.iteration_time_s  # multi-node collectives have a tail


def test_network_fallbacks_price_the_plan_that_was_chosen():
    cluster = resolve_cluster("p5.48xlarge:4", None)
    predictor = _predictor("llama3-70b", "auto")
    pred = predictor.predict(cluster)
    lay = pred.layout
    fallbacks = efa_fallbacks(cluster)
    assert [what for what, _ in fallbacks] == ["one EFA interface", "no EFA (TCP)"]
    for _, alt in fallbacks:
        slower = predictor.on_network(alt)
        # The layout, recompute and memory the job launches with; the time of the slower network,
        # as a plan made on it for that layout says.
        assert slower.layout == pred.layout and slower.activation_checkpointing == pred.activation_checkpointing
        assert slower.memory_per_gpu_bytes == pred.memory_per_gpu_bytes
        ref = plan_layout(llm_arch("llama3-70b"), alt, lay, 4096, PlanSettings(checkpointing=pred.activation_checkpointing))
        assert slower.iteration_time_s == pytest.approx(ref.iteration_s, rel=1e-12)
        assert slower.iteration_time_s > pred.iteration_time_s


def test_a_fallback_on_other_gpus_plans_anew():
    predictor = _predictor("llama3-70b", "tp=8,pp=2")
    predictor.predict(resolve_cluster("p5.48xlarge:2", None))
    other = resolve_cluster("p4d.24xlarge:2", None)
    assert predictor.on_network(other).iteration_time_s == predictor.predict(other).iteration_time_s
