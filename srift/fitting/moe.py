"""Measured expert-parallel MoE runs (data/moe-training) as layouts srift predicts, and their
errors (offline: pandas; used by scripts/validate.py).

Rows kept: bf16 and FP8 pre-training, metric ``tokens_per_s_per_gpu``, on the source's systems
(``GPUS``: DGX H100, B200, B300, 8 GPUs on NVSwitch and 8 NICs of InfiniBand; DGX GB200 and GB300
NVL72 racks, trays of 4 GPUs in one 72-GPU NVLink domain, ``NodeGroup.nvlink_domain_gpus``) and a
model of srift's zoo. Left out and counted: models not in the zoo, layouts that do not multiply
out, precisions or GPUs not mapped.

How a row becomes a prediction: the layout as printed with EP (``interleaved`` when it prints
VP > 1, else 1F1B), ``grad_accum = global / (micro x DP)``, the distributed optimizer, the
activation recompute, token dispatcher and EP all-to-all overlap the benchmark recipe sets
(``RECIPES``: Megatron-Bridge's performance recipes, recipe facts; the tables do not print them),
where the row runs the recipe's own GPU count, TP, PP, EP and micro-batch size (``recipe_of``: a
row at another ran an earlier release's recipe, whose settings are not known), else the least recompute
that fits (``AUTO_LADDER`` of srift/simulate/recompute.py, as ``--activation-checkpointing auto``
chooses), not overlapped, bf16 attention, with the model's dispatcher (``model_dispatchers``: the
one every recipe of the model sets, whatever its GPU and precision, else all-to-all); force-balanced
routing (``BALANCED_ROUTING``: the source's footnote), the compute factor as shipped
(configs/perf/layouts.json, fitted on dense Llama/GPT/Nemotron runs of data/llm-parallel-layouts).
No figure is fitted on these rows, so each prediction is already held out from its model and its
source: leave-one-model-out and leave-one-source-out equal the plain error.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.fitting import megatron_rows
from srift.job import MOE_DISPATCHERS, RECOMPUTE_MODULES, SELECTIVE, Fp8Recipe, MoeDispatcher
from srift.simulate.recompute import AUTO_LADDER, Recompute, modules_present
from srift.simulate.layouts import Layout, megatron_stage_blocks, PlanSettings, plan_layout
from srift.simulate.moe import BALANCED_ROUTING
from srift.zoo import llm_arch

FOLDER = Path("moe-training")
# The source's systems (GPU, link, network Gb/s per node, NVLink domain GPUs: None = the node's):
# DGX H100 (8 x 400 Gb/s ConnectX-7), DGX B200 (8 x 400 Gb/s ConnectX-7), DGX B300 (8 x 800 Gb/s
# ConnectX-8); DGX GB200 / GB300 NVL72 racks: 72 GPUs in one NVLink domain, compute trays of 4 GPUs
# with 4 x 400 Gb/s ConnectX-7 (GB200) or 4 x 800 Gb/s ConnectX-8 (GB300) InfiniBand (the DGX
# GB200 / GB300 datasheets: 72 single-port OSFP NICs a rack; the source does not state the rate).
GPUS: dict[str, tuple[str, str, float, int | None]] = {
    "H100-SXM5-80GB": ("H100", "nvswitch4", 3200.0, None), "B200": ("B200", "nvswitch5", 3200.0, None),
    "B300": ("B300", "nvswitch5", 6400.0, None), "GB200": ("GB200", "nvswitch5", 1600.0, 72),
    "GB300": ("GB300", "nvswitch5", 3200.0, 72)}


def dgx_cluster(gpu_label: str, gpus: int, gpus_per_node: int) -> Cluster:
    """The source's nodes: ``gpus_per_node`` GPUs on NVSwitch (one NVLink domain per node, or per
    NVL72 rack), InfiniBand between nodes (between racks)."""
    gpu, link, gbps, domain = GPUS[gpu_label]
    return Cluster(f"{gpus} x {gpu}", (NodeGroup(count=max(1, gpus // gpus_per_node), gpus_per_node=min(gpus, gpus_per_node),
                                                 gpu=gpu, intra_node=link, network_gbps=gbps, network="infiniband",
                                                 nvlink_domain_gpus=domain),))


def nvlink_domain_gpus(r) -> int:
    """GPUs of a row's job that reach one another over NVLink (``NodeGroup.domain_gpus``: a node's,
    or the part of an NVL72 rack the job fills)."""
    return dgx_cluster(r.gpu, int(r.gpus_total), int(r.gpus_per_node)).node_groups[0].domain_gpus


# The source's precision labels: bf16, or a Transformer Engine FP8 recipe (srift/perf/fp8.py):
# "fp8" / "fp8-cs" per-tensor (current) scaling on Hopper, "fp8-mx" / "mxfp8" Blackwell's MXFP8.
FP8_RECIPE_OF: dict[str, Fp8Recipe | None] = {"bf16": None, "fp8": "tensorwise", "fp8-cs": "tensorwise",
                                              "fp8-mx": "mxfp8", "mxfp8": "mxfp8"}


def _why_left_out(r) -> str | None:
    if r.metric != "tokens_per_s_per_gpu":
        return f"metric {r.metric}"
    if str(r.precision).lower() not in FP8_RECIPE_OF:
        return f"precision {r.precision} not mapped"
    if r.gpu not in GPUS:
        return f"GPU {r.gpu} not mapped"
    return None


def load_rows(data: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows srift predicts and, by reason, how many were left out."""
    return megatron_rows.load_rows(data, FOLDER, _why_left_out, lambda m: m.split(" ")[0].lower())


def row_layout(r) -> Layout:
    vp = int(r.vp) if not pd.isna(r.vp) and int(r.vp) > 1 else 1
    mb, dp = int(r.micro_batch), int(r.dp)
    return Layout(int(r.tp), int(r.pp), int(r.cp), dp, vp, mb, int(r.global_batch) // (mb * dp),
                  "interleaved" if vp > 1 else "1f1b", int(r.ep))


RECIPES = Path("recipes") / "megatron-bridge-recipes.csv"
# The precision classes of the recipe table (data/moe-training/README.md) by the source's label.
RECIPE_PRECISION = {"bf16": "bf16", "fp8": "fp8-cs", "fp8-cs": "fp8-cs", "fp8-mx": "fp8-mx", "mxfp8": "fp8-mx"}


@dataclass(frozen=True)
class Recipe:
    """What a Megatron-Bridge benchmark recipe sets that the performance tables do not print.

    Attributes:
        recompute: (checkpointing policy, selective recompute modules).
        dispatcher: The MoE token dispatcher.
        ep_overlap: Whether the EP all-to-alls overlap another micro-batch's compute.
        layout: The (GPUs, TP, PP, EP, micro-batch) the recipe runs: a row at another one ran an
            earlier release's recipe, whose settings are not known (``recipe_of``).
        fp8_attention: Whether an FP8 recipe runs the attention core in FP8 too
            (``fp8_dot_product_attention``).
    """

    recompute: Recompute
    dispatcher: MoeDispatcher = "alltoall"
    ep_overlap: bool = False
    layout: tuple[int, int, int, int, int] = (1, 1, 1, 1, 1)
    fp8_attention: bool = False


def load_recipes(data: Path) -> dict[tuple[str, str, str], Recipe]:
    """``{(model, GPU, precision class): Recipe}`` of the benchmark recipes (data/moe-training/recipes).

    Raises:
        SriftError: for a module or dispatcher srift does not model.
    """
    out: dict[tuple[str, str, str], Recipe] = {}
    for r in pd.read_csv(data / FOLDER / RECIPES, keep_default_na=False).itertuples():
        modules = tuple(m for m in str(r.recompute_modules).split(";") if m)
        bad = [m for m in modules if m not in RECOMPUTE_MODULES]
        if bad:
            raise SriftError(f"{data / FOLDER / RECIPES}: recompute module(s) {bad} not modelled.",
                             f"use {', '.join(RECOMPUTE_MODULES)}.")
        if r.dispatcher not in MOE_DISPATCHERS:
            raise SriftError(f"{data / FOLDER / RECIPES}: dispatcher {r.dispatcher!r} not modelled.",
                             f"use {', '.join(MOE_DISPATCHERS)}.")
        policy = "selective" if str(r.recompute_granularity) == SELECTIVE and modules else "none"
        out[(str(r.model), str(r.gpu), str(r.precision))] = Recipe(
            (policy, tuple(m for m in RECOMPUTE_MODULES if m in modules)), r.dispatcher, str(r.ep_overlap).lower() == "true",
            (int(r.gpus), int(r.tp), int(r.pp), int(r.ep), int(r.micro_batch)), str(r.fp8_attention).lower() == "true")
    return out


def model_dispatchers(recipes: dict[tuple[str, str, str], Recipe]) -> dict[str, MoeDispatcher]:
    """``{model: dispatcher}`` of each model whose benchmark recipes all set the same token
    dispatcher, whatever their GPU and precision: a fact of the model's recipes (DeepSeek-V3's base
    recipe, which each of its benchmark recipes starts from, applies HybridEP on every GPU), not of
    one run, so a row of an earlier release takes it too. Models whose recipes differ are left out
    (srift's default, ``alltoall``)."""
    seen: dict[str, set[MoeDispatcher]] = {}
    for (model, _, _), recipe in recipes.items():
        seen.setdefault(model, set()).add(recipe.dispatcher)
    return {model: next(iter(d)) for model, d in seen.items() if len(d) == 1}


def dispatcher_of(r, recipes: dict[tuple[str, str, str], Recipe]) -> MoeDispatcher:
    """The token dispatcher a row runs: its recipe's (``recipe_of``), else its model's
    (``model_dispatchers``), else ``alltoall``."""
    recipe = recipe_of(r, recipes)
    if recipe is not None:
        return recipe.dispatcher
    return model_dispatchers(recipes).get(_model_key(r), "alltoall")


def _model_key(r) -> str:
    """The recipe table's model name of a row (``DeepSeek-V3 671B`` -> ``DeepSeek-V3``)."""
    return str(r.model).split(" ")[0]


def recipe_of(r, recipes: dict[tuple[str, str, str], Recipe]) -> Recipe | None:
    """The benchmark recipe of a row: its (model, GPU, precision class)'s where the row runs the
    recipe's GPU count, TP, PP, EP and micro-batch size; else None: the row ran an earlier
    release's recipe, which the wheel does not hold (srift's defaults: the least recompute that
    fits, the all-to-all dispatcher, not overlapped, bf16 attention)."""
    recipe = recipes.get((_model_key(r), str(r.gpu), RECIPE_PRECISION[str(r.precision).lower()]))
    if recipe is None or recipe.layout != (int(r.gpus_total), int(r.tp), int(r.pp), int(r.ep), int(r.micro_batch)):
        return None
    return recipe


def mtp_layers_of(r) -> int:
    """The multi-token prediction layers a row's run trained: its model's config's
    (``DecoderArch.mtp_layers``, Hugging Face's ``num_nextn_predict_layers``).

    Whether a run trains the module is its recipe's choice, which the recipes table does not
    record (data/moe-training/README.md); the model config stands in for it because the one model
    here whose config has the module, DeepSeek-V3 (1), is trained with it by its base recipe
    (megatron-bridge ``deepseek_v3_pretrain_config``: ``mtp_num_layers = 1``, the config's value,
    which the 0.6.2 DeepSeek-V3 bridge maps to it), and Kimi-K2's config has none (0).
    """
    return llm_arch(str(r.zoo)).mtp_layers


PIPELINE_LAYOUTS = Path("recipes") / "megatron-bridge-pipeline-layouts.csv"


def load_pipeline_layouts(data: Path) -> dict[tuple[str, int, int], str]:
    """``{(model, PP, VP): Megatron-Core pipeline layout}`` the Megatron-Bridge recipes of a model
    place its layers by (data/moe-training/recipes: DeepSeek-V3's, which puts its multi-token
    prediction layer with the loss on the last stage and gives that stage fewer decoder blocks)."""
    return {(str(r.model), int(r.pp), int(r.vp)): str(r.layout)
            for r in pd.read_csv(data / FOLDER / PIPELINE_LAYOUTS, keep_default_na=False).itertuples()}


def stage_blocks_of(r, layouts: dict[tuple[str, int, int], str]) -> tuple[int, ...] | None:
    """Blocks per pipeline stage of a row whose model's recipes lay out its (PP, VP) (``layouts``),
    else None (srift's even split, ``stage_layers``)."""
    layout = row_layout(r)
    text = layouts.get((_model_key(r), layout.pp, layout.vp))
    return None if text is None else megatron_stage_blocks(text, layout.pp, layout.vp)


@functools.lru_cache(maxsize=1024)
def _predict(zoo: str, gpu: str, gpus: int, per_node: int, layout: Layout, seq_len: int,
             fp8: Fp8Recipe | None, recipe: Recipe | None, dispatcher: MoeDispatcher,
             mtp_layers: int = 0, stage_blocks: tuple[int, ...] | None = None) -> tuple[float, str]:
    plan = None
    for policy, modules in (recipe.recompute,) if recipe else AUTO_LADDER:
        plan = plan_layout(llm_arch(zoo), dgx_cluster(gpu, gpus, per_node), layout, seq_len,
                           PlanSettings(precision="bf16", checkpointing=policy, imbalance=BALANCED_ROUTING, fp8=fp8,
                                        recompute_modules=modules, dispatcher=dispatcher,
                                        ep_overlap=recipe.ep_overlap if recipe else False,
                                        fp8_attention=recipe.fp8_attention if recipe else False, mtp_layers=mtp_layers,
                                        stage_blocks=stage_blocks))
        shown = modules if recipe else modules_present(llm_arch(zoo), modules)  # a recipe's list as it reads
        label = policy + (f" ({', '.join(shown)})" if shown else "") + ("" if recipe else ", least that fits")
        if plan.fits:
            return plan.tokens_per_s / gpus, label
    assert plan is not None
    return plan.tokens_per_s / gpus, label + ": does not fit"


def predict_row(r, recipes: dict[tuple[str, str, str], Recipe],
                layouts: dict[tuple[str, int, int], str] | None = None) -> tuple[float, str]:
    """(predicted tokens/s per GPU, the recompute it ran with and whether srift's memory model fits
    it) of a row: its recipe's settings (``recipe_of``) where known, else the least recompute that
    fits, not overlapped, with its model's dispatcher (``dispatcher_of``), multi-token
    prediction layers (``mtp_layers_of``) and, where its model's recipes lay out its PP and VP,
    that pipeline layout (``stage_blocks_of``; ``layouts``: ``load_pipeline_layouts``)."""
    return _predict(r.zoo, r.gpu, int(r.gpus_total), int(r.gpus_per_node), row_layout(r), int(r.seq_len),
                    FP8_RECIPE_OF[str(r.precision).lower()], recipe_of(r, recipes), dispatcher_of(r, recipes),
                    mtp_layers_of(r), stage_blocks_of(r, layouts or {}))
