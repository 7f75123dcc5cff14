"""The training stack is part of the job (issue 43): configs/stacks.yaml is read and checked up
front, ``--stack`` is one job option, its behaviours change the one plan's pricing where srift
models them (TP-communication and gradient-reduce overlap in a layout, DDP's buckets), the rest is
named as not modelled, and every output names the stack, the default included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from srift.errors import SriftError
from srift.files import configs_dir
from srift.job import STACKS, Job
from srift.job_options import OPTIONS_BY_NAME
from srift.simulate.breakdown import EXPOSED_DP, EXPOSED_TP
from srift.simulate.layouts import Layout, PlanSettings, plan_layout
from srift.stacks import (MAX_BUCKET_CAP_MB, LayoutDataParallel, TpCommOverlap, ddp_bucket_cap_mb, load_stacks,
                          parse_stacks, resolve)
from srift.cluster import Cluster, NodeGroup
from srift.zoo import llm_arch

from tests.cli_helpers import run


def _table() -> dict:
    return yaml.safe_load((configs_dir() / "stacks.yaml").read_text())


def test_every_stack_is_a_row_with_every_behaviour_sourced() -> None:
    stacks = load_stacks()
    assert tuple(stacks) == STACKS
    for spec in stacks.values():
        for name, b in spec.behaviours().items():
            assert b.source.strip(), (spec.name, name)
    # What the sources say (read with pip download): DeepSpeed's ZeRO 1/2 do not overlap the
    # reduction (overlap_comm True only for stage 3) and cut 5e8-element buckets; NeMo's
    # recipes overlap TP with userbuffers; torchtitan leaves async TP off and runs FSDP2.
    ds, mc, tt = stacks["deepspeed"], stacks["megatron-core"], stacks["torchtitan"]
    assert ds.grad_reduce_overlap.value is False and ds.grad_bucket_mb.value == pytest.approx(5e8 * 2 / 2**20, rel=1e-3)
    assert mc.tp_comm_overlap.value is TpCommOverlap.USERBUFFERS and mc.tp_overlap
    assert tt.tp_comm_overlap.value is TpCommOverlap.NONE and tt.layout_data_parallel.value is LayoutDataParallel.FSDP
    assert not stacks["megatron-deepspeed"].tp_overlap and not stacks["megatron-deepspeed"].grad_reduce_overlap.value


@pytest.mark.parametrize("change, message", [
    (lambda t: t["stacks"].pop("torchtune"), "missing: torchtune"),
    (lambda t: t["stacks"].__setitem__("jax", t["stacks"]["pytorch"]), "unknown: jax"),
    (lambda t: t["stacks"]["deepspeed"]["tp_comm_overlap"].__setitem__("value", "magic"), "not one of none, async, userbuffers"),
    (lambda t: t["stacks"]["lightning"]["cuda_graphs"].__setitem__("source", " "), "has no source"),
    (lambda t: t["stacks"]["pytorch"]["grad_bucket_mb"].__setitem__("value", -3), "not a bucket size"),
    (lambda t: t["stacks"]["nemo"].pop("torch_compile"), "missing: torch_compile"),
])
def test_a_bad_stack_table_is_refused_naming_the_stack_and_behaviour(change, message) -> None:
    table = _table()
    change(table)
    with pytest.raises(SriftError, match=message) as err:
        parse_stacks(table)
    assert "stacks.yaml" in err.value.hint


def test_a_bad_stack_file_is_an_error_with_exit_2_not_a_traceback(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    (home / "configs").mkdir(parents=True)
    root = configs_dir().parent
    for item in configs_dir().iterdir():
        if item.name != "stacks.yaml":
            (home / "configs" / item.name).symlink_to(item)
    for folder in ("profiles", "examples"):
        (home / folder).symlink_to(root / folder)
    (home / "configs" / "stacks.yaml").write_text("stacks:\n  pytorch: {}\n")
    monkeypatch.setenv("SRIFT_HOME", str(home))
    load_stacks.cache_clear()
    resolve.cache_clear()
    try:
        code, out, err = run(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge", "--layout",
                              "tp=2,pp=1,cp=1", "--global-batch-size", "32"])
    finally:
        load_stacks.cache_clear()
        resolve.cache_clear()
    assert code == 2, (out, err)
    assert "Error:" in err and "To fix:" in err and "Traceback" not in err
    assert "stacks" in err


def test_stack_is_one_job_option_refusing_unknown_names() -> None:
    option = OPTIONS_BY_NAME["stack"]
    assert option.choices == STACKS and option.default is None
    with pytest.raises(SriftError, match="unknown training stack"):
        Job(stack="jax")  # type: ignore[arg-type]


def test_the_default_stack_is_megatron_core_for_layouts_and_pytorch_for_data_parallelism() -> None:
    assert resolve(None, True, "auto").name == "megatron-core" and resolve(None, True, "auto").defaulted
    assert resolve(None, True, "fsdp").name == "torchtitan"  # FSDP2 under a layout: priced as torchtitan runs it
    assert resolve(None, False, "auto").name == "pytorch"
    assert not resolve("lightning", False, "auto").defaulted


def test_a_stack_without_overlaps_waits_for_tp_and_the_gradient_reduction() -> None:
    # Megatron-DeepSpeed (no userbuffers, ZeRO without overlap_comm) against Megatron-Core's
    # recipes on the same layout: every second of the data-parallel reduction is exposed, none
    # of Megatron-Core's; the TP collectives are waited for.
    arch = llm_arch("llama3-8b")
    cluster = Cluster("2 x p5", (NodeGroup(count=2, gpus_per_node=8, gpu="H100", intra_node="nvswitch4",
                                           network_gbps=3200.0, network="infiniband"),))
    lay = Layout(2, 1, 1, 8, micro_batch=1, grad_accum=8)
    core = plan_layout(arch, cluster, lay, 4096, PlanSettings(tp_overlap=True, grad_overlap=True))
    legacy = plan_layout(arch, cluster, lay, 4096, PlanSettings(tp_overlap=False, grad_overlap=False))
    assert core.breakdown[EXPOSED_DP] == 0.0 and core.breakdown[EXPOSED_TP] == 0.0
    assert legacy.breakdown[EXPOSED_DP] == pytest.approx(legacy.comm_s["dp"]) and legacy.comm_s["dp"] > 0
    assert legacy.comm_s["dp"] == pytest.approx(core.comm_s["dp"])  # the same bytes, only exposed
    assert legacy.breakdown[EXPOSED_TP] > 0
    assert legacy.iteration_s > core.iteration_s


def test_predict_prices_the_named_stack_and_names_it_in_table_json_and_notes() -> None:
    base = ["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:2", "--layout", "tp=2,pp=1,cp=1",
            "--global-batch-size", "64", "--format", "json"]
    code, out, _ = run(base)
    assert code == 0
    default = json.loads(out)
    code, out, _ = run(base + ["--stack", "megatron-deepspeed"])
    assert code == 0
    legacy = json.loads(out)
    pd, pl = default, legacy
    assert pd["stack"] == "megatron-core" and pl["stack"] == "megatron-deepspeed"
    assert pl["iteration_time_s"] > pd["iteration_time_s"]
    note = next(n for n in pd["notes"] if n.startswith("stack megatron-core"))
    assert "the default" in note and "not modelled" in note and "cuda graphs off" in note
    code, out, _ = run(base[:-2] + ["--stack", "nemo"])
    assert code == 0 and "Stack" in out and "nemo" in out


def test_torchtitan_stack_runs_a_layout_under_fsdp2_as_the_fsdp_spelling_does() -> None:
    base = ["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:2", "--layout", "tp=2,pp=1,cp=1",
            "--global-batch-size", "64", "--format", "json"]
    _, out_stack, _ = run(base + ["--stack", "torchtitan"])
    _, out_fsdp, _ = run(base + ["--parallelism", "fsdp"])
    a, b = json.loads(out_stack), json.loads(out_fsdp)
    assert a["parallelism"] == b["parallelism"] == "fsdp"
    assert a["iteration_time_s"] == pytest.approx(b["iteration_time_s"])
    assert a["stack"] == b["stack"] == "torchtitan"


def test_deepspeed_reduces_in_one_bucket_after_backward_unless_the_job_sets_a_cap() -> None:
    # DeepSpeed ZeRO 1/2 without overlap_comm: the reduction waits for backward (one bucket);
    # PyTorch, Lightning and the Trainer keep DDP's 25 MiB; --bucket-cap-mb overrides any stack.
    assert ddp_bucket_cap_mb(Job(stack="deepspeed")) == MAX_BUCKET_CAP_MB
    assert ddp_bucket_cap_mb(Job(stack="lightning")) == 25.0 == ddp_bucket_cap_mb(Job())
    assert ddp_bucket_cap_mb(Job(stack="deepspeed", bucket_cap_mb=50.0)) == 50.0


def test_data_parallel_stacks_change_ddp_pricing_and_are_named() -> None:
    base = ["predict", "--model", "resnet50", "--instance", "p4d.24xlarge", "--parallelism", "ddp", "--format", "json"]
    _, out, _ = run(base)
    _, out_ds, _ = run(base + ["--stack", "deepspeed"])
    p, ds = json.loads(out), json.loads(out_ds)
    assert p["stack"] == "pytorch" and ds["stack"] == "deepspeed"
    assert ds["breakdown"]["exposed_comm"] > p["breakdown"]["exposed_comm"]
    # One reduction after backward: most of it waited for, where DDP's 25 MiB buckets hide most.
    def share(x: dict) -> float:
        return x["breakdown"]["exposed_comm"] / x["breakdown"]["comm_total"]
    assert share(ds) > 0.5 > share(p)
    assert any(n.startswith("stack deepspeed: priced: grad reduce overlap off, grad bucket mb") for n in ds["notes"])


def test_a_prediction_quotes_its_stacks_held_out_figure_or_the_widest_when_it_has_none(monkeypatch) -> None:
    from srift import stacks

    figures = {"nemo": {"rows": 40, "loso_mape_pct": 7.8, "lostack_mape_pct": 7.9, "groups": ["layouts"],
                        "by_group": {"layouts": {"rows": 30, "loso_mape_pct": 4.2, "lostack_mape_pct": 4.3}}},
               "hf-trainer": {"rows": 13, "loso_mape_pct": 34.1, "lostack_mape_pct": 34.1, "groups": ["finetune"]},
               "pytorch": {"rows": 1218, "loso_mape_pct": 12.3, "lostack_mape_pct": None, "groups": ["one_node"]}}
    monkeypatch.setattr(stacks, "stack_accuracy", lambda: figures)
    stacks.stack_typical_error.cache_clear()
    monkeypatch.setattr(stacks, "stack_typical_error", stacks.stack_typical_error.__wrapped__)
    # Wider than the group's 5.5 %: the stack's own leave-one-stack-out figure is quoted.
    assert stacks.stack_typical_error("nemo", 5.5, "g")[0] == 7.9
    # Its rows of the prediction's group (4.3 %) are narrower than the group's: the group's stays.
    pct, basis = stacks.stack_typical_error("nemo", 5.5, "g", "layouts")
    assert pct == 5.5 and "stack nemo: 4.3 % leave-one-stack-out over 30 runs" in basis
    # No measurements of DeepSpeed: the widest stack figure, said so.
    pct, basis = stacks.stack_typical_error("deepspeed", 5.5, "g")
    assert pct == 34.1 and "no step-time measurements" in basis and "hf-trainer" in basis
    # A stack that is every row of its groups has no leave-one-stack-out: the group's figure stays.
    assert stacks.stack_typical_error("pytorch", 11.3, "g")[0] == 11.3


def test_every_validation_source_is_tagged_with_a_stack() -> None:
    from srift.fitting import finetune, layouts as lf, moe as mf, sharded
    from srift.fitting.stack_tags import stack_of, tag

    data = configs_dir().parent / "data"
    megatron, _ = lf.load_rows(data)
    assert set(tag(megatron, "source_slug")) == {"megatron-core", "nemo", "megatron-deepspeed"}
    ft, _ = finetune.load_rows(data)
    assert set(tag(ft, "source")) == {"nemo", "hf-trainer", "lightning"}
    assert set(tag(mf.load_rows(data)[0], "source_slug")) == {"megatron-core"}
    rows = sharded.load_rows(data)
    rows = rows[0] if isinstance(rows, tuple) else rows
    assert set(tag(rows, "source", None)) == {"pytorch"}
    for source in ("lambda/2022-07", "dle/bert-squad", "csc-ddp/ml-benchmarks", "dawnbench/fastai", "torchtitan"):
        assert stack_of(source) in STACKS
    with pytest.raises(KeyError):
        stack_of("no-such-source")


def test_check_takes_the_stack_from_the_job_file_and_names_it(tmp_path: Path) -> None:
    job = tmp_path / "srift.yaml"
    job.write_text("model: resnet50\nbatch_size: 64\nprecision: amp\nsteps: 1000\ninstance: p4d.24xlarge\n"
                   "stack: deepspeed\nlimits:\n  max_cost_usd: 100000\n")
    code, out, err = run(["check", str(job)])
    assert code == 0, err
    assert "stack deepspeed" in out
    code, out, err = run(["check", str(job), "--format", "json"])
    assert code == 0, err
    assert json.loads(out)["configuration"]["stack"] == "deepspeed"
    job.write_text(job.read_text().replace("deepspeed", "jax"))
    code, out, err = run(["check", str(job)])
    assert code == 2 and "Error:" in err and "stack" in err and "Traceback" not in err


def test_csc_runs_of_deepspeed_and_lightning_are_priced_under_their_stack() -> None:
    from srift.fitting import datasets, validation

    rows = datasets.load_csc(configs_dir().parent / "data", stacks=True)
    assert rows.groupby("stack").size().to_dict() == {"deepspeed": 18, "lightning": 21}
    ds = next(r for r in rows.itertuples() if r.stack == "deepspeed")
    job = validation.row_job(ds)
    assert job.stack == "deepspeed" and ddp_bucket_cap_mb(job) == MAX_BUCKET_CAP_MB
    assert "stack" not in datasets.load_csc(configs_dir().parent / "data")  # the DDP rows: plain PyTorch, as before


def test_deepspeeds_fp32_copy_of_each_micro_batchs_gradients_is_a_memory_pass_per_micro_batch() -> None:
    # DeepSpeed's BF16_Optimizer (Megatron-DeepSpeed, the BLOOM-176B run) casts each micro-batch's
    # bf16 gradients to fp32 and adds them to its fp32 copies: 2 + 4 bytes for the cast, 8 + 4 for
    # the add, per trainable parameter (deepspeed 0.6.5 bf16_optimizer.py update_hp_grads). Hand
    # check: Llama 3 8B (8,030,261,248 weights) at TP 2 holds half of them per GPU; 8
    # micro-batches; at the compute model's memory rate of the H100.
    from srift.perf.compute import kernel_rates
    from srift.simulate.breakdown import BACKWARD
    from srift.simulate.layout_prediction import LayoutSettings
    from srift.stacks import FP32_COPY_BYTES_PER_PARAM, GradAccumulation

    stacks = load_stacks()
    assert stacks["megatron-deepspeed"].grad_accumulation.value == GradAccumulation.FP32_COPY
    assert FP32_COPY_BYTES_PER_PARAM == 18.0 and stacks["megatron-deepspeed"].grad_accum_bytes == 18.0
    assert all(s.grad_accum_bytes == 0.0 for n, s in stacks.items() if n != "megatron-deepspeed")
    job = Job(layout="tp=2,pp=1,cp=1", micro_batch_size=1, global_batch_size=64, stack="megatron-deepspeed")
    assert LayoutSettings.of(job).grad_accum_bytes == 18.0
    arch = llm_arch("llama3-8b")
    cluster = Cluster("2 x p5", (NodeGroup(count=2, gpus_per_node=8, gpu="H100", intra_node="nvswitch4",
                                           network_gbps=3200.0, network="infiniband"),))
    lay = Layout(2, 1, 1, 8, micro_batch=1, grad_accum=8)
    fused = plan_layout(arch, cluster, lay, 4096, PlanSettings(tp_overlap=False, grad_overlap=False))
    copied = plan_layout(arch, cluster, lay, 4096, PlanSettings(tp_overlap=False, grad_overlap=False, grad_accum_bytes=18.0))
    expected = 8 * (8_030_261_248 / 2) * 18.0 / kernel_rates("H100", "bf16").memory_bytes_per_s
    assert copied.breakdown[BACKWARD] - fused.breakdown[BACKWARD] == pytest.approx(expected, rel=2e-3)
    assert copied.iteration_s - fused.iteration_s == pytest.approx(expected, rel=2e-3)


def test_the_fp32_copy_is_deepspeeds_bf16_optimizer_so_an_fp16_job_has_none() -> None:
    # fp16 (amp) runs DeepSpeed's FP16_Optimizer, which accumulates in the fp16 .grad
    # (deepspeed 0.6.5 deepspeed/runtime/fp16/fused_optimizer.py): no pass of its own.
    arch = llm_arch("llama3-8b")
    cluster = Cluster("1 x p5", (NodeGroup(count=1, gpus_per_node=8, gpu="H100", intra_node="nvswitch4",
                                           network_gbps=3200.0, network="infiniband"),))
    lay = Layout(2, 1, 1, 4, micro_batch=1, grad_accum=8)
    plain = plan_layout(arch, cluster, lay, 4096, PlanSettings(precision="amp", tp_overlap=False, grad_overlap=False))
    fp16 = plan_layout(arch, cluster, lay, 4096, PlanSettings(precision="amp", tp_overlap=False, grad_overlap=False,
                                                              grad_accum_bytes=18.0))
    assert fp16.iteration_s == plain.iteration_s
