"""``--fp8``, ``--moe-dispatcher``, ``--moe-ep-overlap`` and ``--mtp-layers``: the command line
predicts what ``plan_layout`` computes with the same recipe, dispatcher and multi-token prediction
layers, and refuses what srift does not model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srift.api import resolve_cluster
from srift.job import DEFAULT_MOE_IMBALANCE
from srift.simulate.layouts import Layout, PlanSettings, plan_layout
from srift.zoo import llm_arch
from srift.zoo.hf_config import arch_from_hf_config

MIXTRAL = Path(__file__).parent / "fixtures" / "hf_configs" / "Mixtral-8x7B-v0.1.json"
LLAMA_70B = ["predict", "--model", "llama3-70b", "--instance", "p5.48xlarge:4", "--layout", "tp=8,pp=4",
             "--micro-batch-size", "1", "--global-batch-size", "128", "--seq-len", "4096", "--precision", "bf16"]
MIXTRAL_EP8 = ["predict", "--model-config", str(MIXTRAL), "--instance", "p5.48xlarge:2", "--layout", "tp=1,pp=1,ep=8",
               "--global-batch-size", "64", "--seq-len", "4096", "--activation-checkpointing", "full"]


def _json(srift_cli, args: list[str]) -> dict:
    code, out = srift_cli([*args, "--format", "json"])
    assert code == 0, out
    return json.loads(out)


def test_fp8_prediction_is_plan_layouts_with_the_recipe(srift_cli) -> None:
    bf16 = _json(srift_cli, LLAMA_70B)
    fp8 = _json(srift_cli, [*LLAMA_70B, "--fp8", "tensorwise"])
    assert fp8["fp8"] == "tensorwise" and bf16["fp8"] is None
    assert fp8["iteration_time_s"] < bf16["iteration_time_s"]  # FP8 GEMMs at twice the bf16 peak
    assert any("FP8 GEMMs (tensorwise" in n for n in fp8["notes"])
    # The same plan as the simulator's, called directly with the recipe (tp=8, pp=4, dp=1, 128 micro-batches).
    direct = plan_layout(llm_arch("llama3-70b"), resolve_cluster("p5.48xlarge:4", None), Layout(8, 4, 1, 1, 1, 1, 128),
                         4096,
                         PlanSettings(precision="bf16", checkpointing=fp8["activation_checkpointing"],
                                      fp8="tensorwise"))
    assert fp8["iteration_time_s"] == pytest.approx(direct.iteration_s, rel=1e-12)


def test_moe_dispatcher_prediction_is_plan_layouts_with_the_dispatcher(srift_cli) -> None:
    alltoall = _json(srift_cli, MIXTRAL_EP8)
    flex = _json(srift_cli, [*MIXTRAL_EP8, "--moe-dispatcher", "flex"])
    assert (alltoall["moe_dispatcher"], flex["moe_dispatcher"]) == ("alltoall", "flex")
    cluster = resolve_cluster("p5.48xlarge:2", None)
    for pred, dispatcher in ((alltoall, "alltoall"), (flex, "flex")):
        direct = plan_layout(arch_from_hf_config(MIXTRAL), cluster, Layout(1, 1, 1, 16, 1, 1, 4, "1f1b", 8), 4096,
                             PlanSettings(precision="bf16", checkpointing="full", imbalance=DEFAULT_MOE_IMBALANCE,
                                          dispatcher=dispatcher))
        assert pred["iteration_time_s"] == pytest.approx(direct.iteration_s, rel=1e-12)
    assert flex["iteration_time_s"] != alltoall["iteration_time_s"]


@pytest.mark.parametrize("extra, says", [
    (["--fp8", "tensorwise", "--precision", "amp"], "--precision amp is not modelled"),
    (["--fp8", "mxfp8"], "no MXFP8 tensor cores"),  # an H100: per-tensor scaling only
    (["--fp8", "mxfp8", "--parallelism", "fsdp"], "not modelled"),
    (["--moe-dispatcher", "flex"], "has ep=1"),
    (["--moe-ep-overlap"], "has ep=1"),
])
def test_combinations_srift_does_not_model_are_refused(srift_cli, extra: list[str], says: str) -> None:
    code, out = srift_cli([*LLAMA_70B[:-2], *extra])
    assert code == 2 and says in out and "To fix:" in out and "Traceback" not in out


def test_fp8_needs_a_layout_and_fp8_tensor_cores(srift_cli) -> None:
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:1", "--fp8", "tensorwise",
                           "--global-batch-size", "8", "--seq-len", "2048"])
    assert code == 2 and "--fp8 needs a --layout" in out and "To fix:" in out
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--instance", "p4d.24xlarge:1", "--layout", "tp=1,pp=1",
                           "--fp8", "tensorwise", "--global-batch-size", "8", "--seq-len", "2048"])
    assert code == 2 and "no FP8 tensor cores" in out and "To fix:" in out


def test_a_dispatcher_for_a_dense_model_is_refused(srift_cli) -> None:
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:1", "--layout", "auto",
                           "--moe-dispatcher", "flex", "--global-batch-size", "8", "--seq-len", "2048"])
    assert code == 2 and "dense model" in out and "To fix:" in out


@pytest.mark.parametrize("layout", [[], ["--layout", "auto"]], ids=["default-layout-search", "layout-auto"])
def test_recommend_searches_layouts_with_fp8_on_gpus_that_run_it(srift_cli, layout: list[str]) -> None:
    # Without --layout, recommend searches a decoder LLM's layouts by default: --fp8 is not refused for it.
    common = ["--model", "llama3-8b", "--global-batch-size", "64", "--seq-len", "4096"]
    found = _json(srift_cli, ["recommend", *common, *layout, "--max-gpus", "16", "--gpu", "H100", "--gpu",
                              "A100-80GB", "--fp8", "tensorwise"])
    assert found["job"]["fp8"] == "tensorwise"
    best = found["recommendations"][0]
    assert all(r["instance"].startswith("p5.") for r in found["recommendations"])  # the A100s have no FP8 tensor cores
    lay = best["layout"]
    # The search's choice, predicted on its own with FP8: the same plan.
    again = _json(srift_cli, ["predict", *common, "--instance", best["instance"], "--fp8", "tensorwise",
                              "--layout", f"tp={lay['tp']},pp={lay['pp']},cp={lay['cp']}",
                              "--micro-batch-size", str(lay["micro_batch"]),
                              "--activation-checkpointing", best["activation_checkpointing"]])
    assert again["iteration_time_s"] == pytest.approx(best["iteration_time_s"], rel=1e-9)


def test_recommend_takes_the_dispatcher_without_layout_auto(srift_cli) -> None:
    """--moe-dispatcher/--moe-ep-overlap ride recommend's default layout search as they ride --layout auto."""
    common = ["recommend", "--model-config", str(MIXTRAL), "--global-batch-size", "64", "--seq-len", "4096",
              "--max-gpus", "16", "--gpu", "H100", "--moe-dispatcher", "flex", "--moe-ep-overlap"]
    default, auto = _json(srift_cli, common), _json(srift_cli, [*common, "--layout", "auto"])
    assert (default["job"]["moe_dispatcher"], default["job"]["moe_ep_overlap"], default["job"]["mtp_layers"]) == ("flex", True, 0)
    assert [(r["instance"], r["layout"], r["iteration_time_s"]) for r in default["recommendations"]] == \
        [(r["instance"], r["layout"], r["iteration_time_s"]) for r in auto["recommendations"]]
    assert default["recommendations"][0]["layout"]["ep"] > 1


@pytest.mark.parametrize("model, extra, flag", [
    ("llama3-8b", ["--fp8", "tensorwise", "--batch-size", "4"], "--fp8"),  # --batch-size says data parallelism: no layout search
    ("mixtral-8x7b", ["--moe-dispatcher", "flex", "--parallelism", "fsdp"], "--moe-dispatcher"),  # (a dense model: no experts)
])
def test_recommend_refuses_layout_settings_when_it_searches_no_layout(srift_cli, model: str, extra: list[str], flag: str) -> None:
    code, out = srift_cli(["recommend", "--model", model, "--seq-len", "2048", "--max-gpus", "8", "--gpu", "H100",
                           *extra])
    assert code == 2 and f"{flag} needs a --layout" in out and "To fix: add --layout" in out and "Traceback" not in out


@pytest.mark.parametrize("args, flag", [
    (["recommend", "--model", "resnet50", "--budget", "50", "--fp8", "tensorwise"], "--fp8"),
    (["recommend", "--profile", "profiles/bert-base.yaml", "--budget", "50", "--fp8", "tensorwise"], "--fp8"),
    (["predict", "--model", "resnet50", "--instance", "p5.48xlarge:1", "--parallelism", "zero1"], "--parallelism zero1"),
])
def test_layout_settings_for_a_model_no_layout_takes_offer_no_layout(srift_cli, args: list[str], flag: str) -> None:
    """A CNN or a profile cannot take a --layout (srift lays out decoder LLMs): the fix offered is
    not one (--layout auto) that the next run refuses."""
    code, out = srift_cli(args)
    assert code == 2 and "Traceback" not in out
    assert f"{flag} is modelled in a --layout, which needs a decoder LLM" in out
    assert "To fix:" in out and "add --layout" not in out


def test_api_recommend_searches_layouts_with_fp8_and_predict_refuses_it_without_one() -> None:
    from srift import api
    from srift.errors import SriftError
    from srift.job import Job
    from srift.search.limits import Constraints

    job = Job(fp8="tensorwise", global_batch_size=64, seq_len=4096)
    found = api.recommend(job, Constraints(max_gpus=8, gpus=frozenset({"H100", "A100-80GB"})), model="llama3-8b")
    assert found.job.layout == "auto" and found.job.fp8 == "tensorwise"
    rows = found.search.recommendations
    assert rows and all(r.instance.startswith("p5.") for r in rows)  # A100s run no FP8
    with pytest.raises(SriftError, match="--fp8 needs a --layout"):
        api.predict(job, model="llama3-8b", instance="p5.48xlarge:1")
    # --parallelism zero1 (Megatron's distributed optimizer) is a layout's too: searched, not refused.
    zero1 = api.recommend(Job(parallelism="zero1", global_batch_size=64, seq_len=4096),
                          Constraints(max_gpus=8, gpus=frozenset({"H100"})), model="llama3-8b")
    assert zero1.job.layout == "auto" and zero1.search.recommendations[0].prediction.parallelism == "zero1"


DEEPSEEK_V3 = Path(__file__).parent / "fixtures" / "hf_configs" / "DeepSeek-V3.json"


def _tiny_deepseek(tmp_path: Path) -> Path:
    """DeepSeek-V3's config at a toy size: 4 blocks (the first dense), 8 experts, one MTP layer."""
    cfg = json.loads(DEEPSEEK_V3.read_text())
    cfg.update(hidden_size=256, intermediate_size=512, kv_lora_rank=64, q_lora_rank=128, moe_intermediate_size=128,
               n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1, num_attention_heads=8,
               num_key_value_heads=8, num_hidden_layers=4, first_k_dense_replace=1, qk_nope_head_dim=32,
               qk_rope_head_dim=16, v_head_dim=32, vocab_size=1000, max_position_embeddings=4096)
    path = tmp_path / "tiny-deepseek.json"
    path.write_text(json.dumps(cfg))
    return path


def test_mtp_layers_come_from_the_config_and_are_trained_only_when_asked(srift_cli, tmp_path: Path) -> None:
    from srift.simulate.breakdown import FORWARD
    from srift.simulate.layouts import BlockOptions, block_parts, compute_factor_of, scaled_parts

    assert arch_from_hf_config(DEEPSEEK_V3).mtp_layers == llm_arch("deepseek-v3").mtp_layers == 1
    assert llm_arch("kimi-k2").mtp_layers == 0 and arch_from_hf_config(MIXTRAL).mtp_layers == 0
    config = _tiny_deepseek(tmp_path)
    arch = arch_from_hf_config(config)
    assert arch.mtp_layers == 1
    run = ["predict", "--model-config", str(config), "--instance", "p5.48xlarge:1", "--layout", "tp=1,pp=1,ep=8",
           "--global-batch-size", "32", "--seq-len", "1024", "--activation-checkpointing", "none"]
    base, mtp = _json(srift_cli, run), _json(srift_cli, [*run, "--mtp-layers", "1"])
    # The config's MTP layer is named, not priced, unless --mtp-layers says the run trains it.
    assert any("has 1 multi-token prediction layer(s)" in n for n in base["notes"])
    assert any("1 multi-token prediction layer(s) (--mtp-layers)" in n for n in mtp["notes"])
    cluster = resolve_cluster("p5.48xlarge:1", None)
    lay = Layout(1, 1, 1, 8, 1, 1, 4, "1f1b", 8)  # 32 sequences / (DP 8 x micro-batch 1) = 4 micro-batches
    for pred, k in ((base, 0), (mtp, 1)):
        direct = plan_layout(arch, cluster, lay, 1024,
                             PlanSettings(precision="bf16", checkpointing="none", imbalance=DEFAULT_MOE_IMBALANCE,
                                          mtp_layers=k))
        assert pred["iteration_time_s"] == pytest.approx(direct.iteration_s, rel=1e-12)
    # By hand: each of the 4 micro-batches runs one more (MoE) block and the final norm, head and loss once more.
    parts = scaled_parts(block_parts(arch, 1, 1, 1, 1024, "bf16", "H100", 8, BlockOptions(imbalance=DEFAULT_MOE_IMBALANCE)), compute_factor_of("zero1"))
    assert mtp["breakdown"][FORWARD] - base["breakdown"][FORWARD] == pytest.approx(4 * (parts.block_f_s + parts.last_f_s))
    # --layout auto carries the MTP layer into its search: its choice is plan_layout's with it.
    auto = _json(srift_cli, [*run[:5], "--layout", "auto", *run[7:11], "--mtp-layers", "1"])
    a = auto["layout"]
    again = plan_layout(arch, cluster,
                        Layout(a["tp"], a["pp"], a["cp"], a["dp"], a["vp"], a["micro_batch"], a["grad_accum"],
                                              a["schedule"], a["ep"]),
                        1024,
                        PlanSettings(precision="bf16", checkpointing=auto["activation_checkpointing"],
                                     imbalance=DEFAULT_MOE_IMBALANCE, mtp_layers=1))
    assert auto["iteration_time_s"] == pytest.approx(again.iteration_s, rel=1e-12)


@pytest.mark.parametrize("extra, says", [
    (["--mtp-layers", "1"], "--mtp-layers needs a --layout"),
    (["--layout", "tp=1,pp=1", "--mtp-layers", "0"], "pass --mtp-layers from 1"),
])
def test_mtp_layers_refused(srift_cli, extra: list[str], says: str) -> None:
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:1", "--global-batch-size", "8",
                           "--seq-len", "2048", *extra])
    assert code == 2 and says in out and "To fix:" in out and "Traceback" not in out
