"""One result assembly (srift/simulate/assemble.py): every Prediction of srift is built by
``assemble``, whose derived figures are checked here by hand, and its typical error is chosen by
one function from the plan's validation group."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from srift import api
from srift.catalog.spec import cluster_from_spec
from srift.job import Job
from srift.perf.accuracy import moe_typical_error, sharded_typical_error
from srift.simulate.assemble import PlanGroup, PricedPlan, TypicalError, assemble, error_group, typical_error_of
from srift.simulate.layout.plan import Layout
from srift.simulate.breakdown import BACKWARD, DDP_PHASES, EXPOSED_COMM, FORWARD, Breakdown
from srift.simulate.plans import MemoryFit
from srift.simulate.prediction import BatchShare

from source_trees import package_trees  # noqa: E402  (tests/source_trees.py: each module parsed once)

ROOT = Path(__file__).resolve().parents[1]


def test_prediction_is_built_in_one_place():
    """Of srift's runtime, only srift/simulate/assemble.py constructs a Prediction (srift/testing.py's
    speed model is a test fake)."""
    builders = []
    for path, tree in package_trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Prediction":
                builders.append(str(path.relative_to(ROOT)))
    assert sorted(set(builders)) == ["srift/simulate/assemble.py", "srift/testing.py"]


def test_assemble_derives_each_figure_once_by_hand():
    """2 x p5.48xlarge (16 H100, $110.08 an hour): 64 sequences of 4,096 tokens in 2.0 s."""
    cluster = cluster_from_spec("p5.48xlarge:2")
    seconds = dict.fromkeys(DDP_PHASES, 0.0) | {FORWARD: 0.6, BACKWARD: 1.2, EXPOSED_COMM: 0.2}
    breakdown = Breakdown.of(DDP_PHASES, seconds, 0.5)
    plan = PricedPlan(cluster=cluster, parallelism="fsdp", checkpointing="full", breakdown=breakdown, p90_s=1.5,
                      comm_cost_s=0.5, memory=MemoryFit(True, 40 * 2**30, {"weights": 30 * 2**30, "allocator": 10 * 2**30}),
                      global_batch=64, batch_split=[BatchShare("p5.48xlarge:2", "H100", 4, 16)], grad_accum=1,
                      micro_batch_size=4, state_bytes=1e9, error=TypicalError(8.2, "sharded"), precision="bf16",
                      seq_len=4096, tokens_per_sample=4096, flops_per_token=6 * 8e9, model_flops_per_token=6 * 8e9)
    pred = assemble(plan)
    assert pred.iteration_time_s == pytest.approx(2.0)
    assert pred.p90_iteration_time_s == pytest.approx(2.0)  # never below the median
    assert pred.throughput_samples_per_s == pytest.approx(32.0)
    assert pred.usd_per_million_samples == pytest.approx(110.08 / (32.0 * 3600) * 1e6)
    assert pred.throughput_tokens_per_s == pytest.approx(32.0 * 4096)
    assert pred.tokens_per_s_per_gpu == pytest.approx(32.0 * 4096 / 16)
    # MFU: 131,072 tokens/s x 48 GFLOP / (16 x 989.4 TFLOP/s) = 39.7 %.
    assert pred.mfu == pytest.approx(32.0 * 4096 * 48e9 / (16 * 989.4e12))
    assert pred.bottleneck == "communication"  # 0.5 s exposed and interference > 20 % of 2.0 s
    assert pred.memory_allocated_bytes == pytest.approx(30 * 2**30)
    assert pred.typical_error_pct == 8.2 and pred.layout is None


def test_the_typical_error_comes_from_the_plans_group():
    """The same function picks every plan's figure: a sharded data-parallel plan quotes the
    sharded group's, a layout of a mixture of experts the MoE group's (both with no stack named,
    inside the validated ranges)."""
    one_node = cluster_from_spec("p5.48xlarge:1")
    sharded = PlanGroup(one_node, sharded=True, params=8e9)
    moe = PlanGroup(one_node, layout=True, moe=True, finetune=True)
    assert (error_group(sharded), error_group(moe)) == ("sharded", "moe")
    assert error_group(PlanGroup(one_node, layout=True, finetune=True)) == "layout_finetune"
    assert error_group(PlanGroup(cluster_from_spec("p5.48xlarge:1"), finetune=True, sharded=True)) == "finetune"
    assert typical_error_of(sharded).pct == sharded_typical_error()[0]
    assert typical_error_of(moe).pct == moe_typical_error()[0]


def test_both_simulators_report_through_the_one_assembly():
    """A layout job and a data-parallel job of the same model: their tokens per GPU are their
    throughput x sequence length over the GPUs, as ``assemble`` derives it for both."""
    for job in (Job(seq_len=4096, parallelism="fsdp"), Job(seq_len=4096, layout="tp=2,pp=1,cp=1")):
        pred = api.predict(job, model="llama3-8b", instance="p5.48xlarge:1").prediction
        assert pred.tokens_per_s_per_gpu == pytest.approx(pred.throughput_samples_per_s * 4096 / 8)
        assert (pred.layout is not None) == (job.layout is not None)
        if pred.layout is not None:  # typed, and its JSON keeps the keys it always had
            assert isinstance(pred.layout, Layout) and pred.layout.tp == 2 and pred.layout.dp == 4
            assert list(pred.to_dict()["layout"]) == ["tp", "pp", "cp", "dp", "vp", "micro_batch", "grad_accum",
                                                      "schedule", "ep"]
