"""Measured TP x PP x CP x DP runs (data/llm-parallel-layouts) as layouts srift predicts, the fit of
the one layout figure (``megatron_compute_factor``) and its held-out errors and regret (offline:
pandas, scipy; used by scripts/validate.py and scripts/fit_models.py).

Rows kept: dense pre-training in bf16 on a GPU and model srift has, metric ``step_time_s``. Left out
and counted: fp8 rows (predicted apart, ``fp8_rows``), the NeMo long-context table (fp8, model
TFLOP/s per GPU: predicted apart, ``long_context_rows``), rows whose layout does not multiply out to
the GPU count, other metrics.

How a row becomes a prediction (each choice is the source's where it states one): the layout
as printed (``interleaved`` when it prints VP, else 1F1B), ``grad_accum = global / (micro x DP)``,
Megatron's distributed optimizer (``zero1``, the README's "distributed optimizer"), no activation
recomputation (not stated; NeMo's performance recipes run without), DGX H100 nodes (8 x H100 SXM
on NVSwitch, 8 x 400 Gb/s InfiniBand: the source's reference architecture).

Rows of models outside the zoo carry their shape (``n_layers``, ``hidden``, ``heads``,
``kv_heads``, ``ffn``, ``vocab``, ``mlp``, ``position``: llm-training-throughput-3d.csv's
Megatron-LM README weak-scaling GPTs and BLOOM-176B). A row that prints Megatron-LM's model
TFLOP/s per GPU (``flops_basis`` ``megatron``) becomes a step time by Megatron-LM's own FLOP count
(``megatron_step_flops``), the inverse of how the source computed it. A row states its
activation recomputation (``--checkpoint-activations``: full) or runs without it; a micro-batch
not stated is 1. The Jean Zay A100 nodes' 4 Omni-Path links (400 Gb/s) are modelled as InfiniBand,
the RDMA class srift has.

torchtitan's 2D/3D rows (``torchtitan_rows``, data/llm-training-throughput, source ``torchtitan``:
FSDP2 under TP, PP and CP on Meta's Grand Teton H100s) are a source of their own, nothing fitted
on them: ``fsdp`` over CP x DP (FSDP2, gradients reduced in fp32, torchtitan's default), the
layout as printed, one micro-batch of the whole local batch without a pipeline (no gradient
accumulation); under a pipeline torchtitan's default of as many micro-batches as the PP degree
(``pipeline_parallel_microbatches`` unset: ``parallel_dims.pp``, whatever the schedule; Interleaved
1F1B: 2 stages per rank assumed, the source does not print it); full
checkpointing as ``full``, per-op selective as torchtitan's policy (``op_sac``); the row's TP as
printed: async TP (``tp_overlap``) or vanilla, on PyTorch's stack (srift/simulate/layouts.py
``pytorch_stack``: DTensor collectives, the compute model unscaled, SDPA's FlashAttention-2; the
Megatron factor fitted here never applies to these rows). The GPUs are H100 SXM with 96 GB of HBM2e
at a 500 W limit: srift has no such GPU and predicts them as H100 SXM (700 W, HBM3) with 96 GB, so
they should come out fast. 8 GPUs a node, 400 Gb/s RDMA per GPU (the source), priced as
InfiniBand. Measured: tokens/s per GPU, which
torchtitan computes as ``local batch x seq / (step x tp x pp x cp)``; the step is that inverted.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from srift.fitting.stack_tags import stack_of
from srift.stacks import StackSpec, load_stacks
from srift.cluster import INFINIBAND, Cluster, Network, NodeGroup
from srift.errors import SriftError
from srift.fitting import megatron_rows
from srift.job import BF16, Checkpointing, Fp8Recipe
from srift.simulate.layouts import (LAYOUT_PARAMS_SCHEMA, Layout, load_layout_params, PlanSettings, plan_layout,
                                    pytorch_stack,
                                    search_layouts)
from srift.zoo import canonical_name, llm_arch
from srift.zoo.llm import GATED_MLPS, DecoderArch

FOLDER = Path("llm-parallel-layouts")
THROUGHPUT_CSV = Path("llm-training-throughput") / "llm-training-throughput.csv"
TORCHTITAN_SOURCE = "torchtitan"
GPUS: dict[str, tuple[str, str, float, Network]] = {"H100-SXM5-80GB": ("H100", "nvswitch4", 3200.0, INFINIBAND),
                                                    "A100-SXM4-80GB": ("A100-80GB", "nvswitch", 400.0, INFINIBAND),
                                                    # Meta's Grand Teton H100 (HBM2e, 500 W): 400 Gb/s RDMA a GPU.
                                                    "h100_hbm2e_meta": ("H100", "nvswitch4", 3200.0, INFINIBAND)}
# GPUs whose memory is not their catalog GPU's (the source states it).
GPU_MEMORY_GIB: dict[str, float] = {"h100_hbm2e_meta": 96.0}
SHAPE_COLUMNS = ("n_layers", "hidden", "heads", "kv_heads", "ffn", "vocab")
# The FP8 recipe of the source's fp8 rows: NeMo's bf16_with_fp8_mixed on Hopper is Transformer
# Engine's per-tensor (delayed) scaling.
FP8_RECIPE_OF_GPU: dict[str, Fp8Recipe] = {"H100-SXM5-80GB": "tensorwise"}
# torchtitan's float8 recipes (torchao): tensorwise is per-tensor dynamic scaling (srift/perf/fp8.py's
# ``tensorwise``); rowwise scaling is not modelled.
TORCHTITAN_FP8: dict[str, Fp8Recipe | None] = {"bf16": None, "fp8_tensorwise+bf16": "tensorwise"}
# the source's activation_checkpointing words as srift's; selective_op (per-op SAC) also sets op_sac
TORCHTITAN_CHECKPOINTING: dict[str, Checkpointing] = {"full": "full", "selective_op": "selective", "none": "none"}
# NeMo's long-sequence table (context parallelism up to 1M tokens), model TFLOP/s per GPU.
LONG_CONTEXT_SOURCE = "nemo-long-context-cp"


def row_arch(r) -> DecoderArch:
    """The row's architecture: the zoo's, or the shape it carries (module docstring)."""
    try:
        return llm_arch(canonical_name(str(r.model)))
    except SriftError:
        pass
    shape = {k: int(getattr(r, k)) for k in SHAPE_COLUMNS}
    gpt = str(r.mlp) == "gelu"
    return DecoderArch(name=str(r.model), n_layers=shape["n_layers"], hidden=shape["hidden"], heads=shape["heads"],
                       kv_heads=shape["kv_heads"], intermediate=shape["ffn"], vocab=shape["vocab"], mlp=str(r.mlp),
                       norm="layernorm" if gpt else "rmsnorm", biases=frozenset({"qkv", "o", "mlp", "norm"}) if gpt else frozenset(),
                       position=str(r.position), max_seq_len=int(r.seq_len), source=f"{r.source_slug} row shape")


def megatron_step_flops(arch: DecoderArch, global_batch: int, seq_len: int) -> float:
    """Megatron-LM's model FLOPs of one step (``num_floating_point_operations``, training.py,
    Megatron-Core 0.8): ``12 B s L h^2 ((1 + g/n + s/h) q/h + f/h x gated + V / (2 L h))``, no
    recomputation counted, attention not halved for the causal mask.

    For a Llama (q/h = 1, SwiGLU) this is NeMo's ``llama2`` model-FLOPs formula term for term,
    ``B s L h^2 (12 + 12 g/n + 18 f/h + 12 s/h + 6 V / (L h))`` (nemo/utils/flops_formulas.py,
    recalled, not re-checked in a fetched file): also causal attention counted as full."""
    h, n_l = arch.hidden, arch.n_layers
    q_ratio = arch.heads * (arch.head_dim or h // arch.heads) / h
    gated = 1.5 if arch.mlp in GATED_MLPS else 1.0
    return (12.0 * global_batch * seq_len * n_l * h * h
            * ((1.0 + arch.kv_heads / arch.heads + seq_len / h) * q_ratio + arch.intermediate / h * gated
               + arch.vocab / (2.0 * n_l * h)))


def dgx_cluster(gpu_label: str, gpus: int, gpus_per_node: int) -> Cluster:
    """The source's nodes: ``gpus_per_node`` GPUs on NVSwitch, InfiniBand between nodes."""
    gpu, link, gbps, net = GPUS[gpu_label]
    return Cluster(f"{gpus} x {gpu}", (NodeGroup(count=max(1, gpus // gpus_per_node), gpus_per_node=min(gpus, gpus_per_node),
                                                 gpu=gpu, intra_node=link, network_gbps=gbps, network=net,
                                                 gpu_memory_gib=GPU_MEMORY_GIB.get(gpu_label)),))


def _why_left_out(r) -> str | None:
    if r.source_slug == LONG_CONTEXT_SOURCE:
        return "long-context model TFLOP/s (predicted apart: long_context_rows)"
    megatron_tflops = r.metric == "model_tflops_per_gpu" and getattr(r, "flops_basis", None) == "megatron"
    if r.metric != "step_time_s" and not megatron_tflops:
        return f"metric {r.metric} (not a step time)"
    if str(r.precision).lower() != BF16:
        return "fp8 (predicted apart: fp8_rows)"
    if r.gpu not in GPUS:
        return f"GPU {r.gpu} not in the row map"
    return None


def _why_not_fp8(r) -> str | None:
    if r.metric != "step_time_s" or not str(r.precision).lower().startswith("fp8"):
        return "not an fp8 step time"
    return None if r.gpu in FP8_RECIPE_OF_GPU else f"GPU {r.gpu} not in the row map"


def fp8_rows(data: Path) -> pd.DataFrame:
    """The fp8 step times (Transformer Engine FP8 GEMMs in a bf16 job), with their ``arch`` and
    ``fp8`` recipe: predicted with srift/perf/fp8.py, nothing fitted on them."""
    rows, _ = megatron_rows.load_rows(data, FOLDER, _why_not_fp8)
    rows["arch"] = [row_arch(r) for r in rows.itertuples()]
    rows["fp8"] = [FP8_RECIPE_OF_GPU[g] for g in rows["gpu"]]
    return rows


def _why_not_long_context(r) -> str | None:
    if r.source_slug != LONG_CONTEXT_SOURCE or r.metric != "model_tflops_per_gpu":
        return "not a long-context row"
    if not str(r.precision).lower().startswith("fp8"):
        return f"precision {r.precision}"
    return None if r.gpu in FP8_RECIPE_OF_GPU else f"GPU {r.gpu} not in the row map"


def long_context_rows(data: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """NeMo's long-context rows (context parallelism at 4K-1M tokens, fp8), model TFLOP/s per GPU
    as seconds a step by the source's FLOP count (``megatron_step_flops``), with their ``arch`` and
    ``fp8`` recipe: predicted with srift/perf/fp8.py, nothing fitted on them. Also, by reason, how
    many of the table's rows were left out."""
    rows, out = megatron_rows.load_rows(data, FOLDER, _why_not_long_context)
    out.pop("not a long-context row", None)
    rows["arch"] = [row_arch(r) for r in rows.itertuples()]
    rows["fp8"] = [FP8_RECIPE_OF_GPU[g] for g in rows["gpu"]]
    rows["micro_batch"] = pd.to_numeric(rows["micro_batch"], errors="coerce").fillna(1).astype(int)
    _tflops_as_step_s(rows, np.ones(len(rows), dtype=bool))
    return rows, out


def _tflops_as_step_s(rows: pd.DataFrame, mask: np.ndarray) -> None:
    """Model TFLOP/s per GPU -> seconds a step, in place, by Megatron-LM's FLOP count (the inverse
    of how the sources computed them)."""
    rows.loc[mask, "value"] = [
        megatron_step_flops(r.arch, int(r.global_batch), int(r.seq_len)) / (float(r.value) * 1e12 * int(r.gpus_total))
        for r in rows[mask].itertuples()]
    rows.loc[mask, "metric"] = "step_time_s"


def _why_not_torchtitan(r: dict[str, str]) -> str | None:
    if r["source_id"] != TORCHTITAN_SOURCE:
        return "not torchtitan"
    if all(float(r[k] or 1) == 1.0 for k in ("tp_degree", "pp_degree", "cp_degree")):
        return "data parallel only (the sharded group's kind)"
    if r["training_type"] != "pretrain":
        return f"not pre-training ({r['training_type']})"
    if r["precision"] not in TORCHTITAN_FP8:
        return f"precision {r['precision']} (not modelled: rowwise FP8 scaling)"
    if r["gpu_type"] not in GPUS:
        return f"GPU {r['gpu_type']} not in the row map"
    if r["activation_checkpointing"] not in TORCHTITAN_CHECKPOINTING:
        return f"checkpointing {r['activation_checkpointing']}"
    return None


def torchtitan_rows(data: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """torchtitan's 2D/3D/4D rows (FSDP2 under TP, PP and CP) as layout rows (module docstring):
    step seconds in ``value``, ``fp8`` their recipe (None: bf16), and by reason how many of the
    source's other rows were left out."""
    table = pd.read_csv(Path(data) / THROUGHPUT_CSV, dtype=str, keep_default_na=False)
    kept: list[dict] = []
    out: dict[str, int] = {}
    for r in table.to_dict("records"):
        why = _why_not_torchtitan(r)
        if why == "not torchtitan":
            continue
        if why:
            out[why] = out.get(why, 0) + 1
            continue
        t, p, c, d = (int(float(r[k])) for k in ("tp_degree", "pp_degree", "cp_degree", "dp_degree"))
        local, seq = int(float(r["local_batch_size"])), int(r["seq_len"])
        interleaved = "Interleaved" in r["other_flags"]
        v = 2 if interleaved else 1
        micro_batches = p  # torchtitan's default: as many micro-batches as the PP degree (1: none)
        kept.append({
            "row_id": int(r["row_id"]), "source_slug": TORCHTITAN_SOURCE, "model": r["model_name"],
            "zoo": canonical_name(r["model_name"]), "gpu": r["gpu_type"], "gpus_total": int(r["n_gpus"]),
            "gpus_per_node": int(r["gpus_per_node"]), "tp": t, "pp": p, "cp": c, "dp": d, "vp": v,
            "micro_batch": local // micro_batches, "global_batch": local * d, "seq_len": seq,
            "precision": r["precision"], "fp8": TORCHTITAN_FP8[r["precision"]], "dp_flavour": "fsdp",
            "checkpointing": TORCHTITAN_CHECKPOINTING[r["activation_checkpointing"]],
            "op_sac": r["activation_checkpointing"] == "selective_op",
            "tp_overlap": "async" in (r["other_flags"] + " " + r["notes"]).lower(),
            "metric": "step_time_s",
            "value": local * seq / (float(r["meas_tokens_per_sec_per_gpu"]) * t * p * c),
            "peak_gib": float(r["meas_peak_mem_gib"]) if r["meas_peak_mem_gib"] else math.nan,
            "label": r["other_flags"] or r["parallelism"],
        })
    rows = pd.DataFrame(kept)
    if len(rows):
        rows["arch"] = [llm_arch(z) for z in rows["zoo"]]
    return rows, out


def _carries_shape(r) -> bool:
    return all(not pd.isna(getattr(r, k, float("nan"))) for k in SHAPE_COLUMNS)


def load_rows(data: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows srift predicts (with their ``arch``; Megatron-LM TFLOP/s as step seconds) and, by
    reason, how many were left out."""
    rows, out = megatron_rows.load_rows(data, FOLDER, _why_left_out, carries_shape=_carries_shape)
    rows["arch"] = [row_arch(r) for r in rows.itertuples()]
    rows["zoo"] = [a.name for a in rows["arch"]]
    rows["micro_batch"] = rows["micro_batch"].fillna(1).astype(int)
    if "flops_basis" in rows.columns:  # Megatron-LM's model TFLOP/s per GPU -> seconds a step
        _tflops_as_step_s(rows, (rows["metric"] == "model_tflops_per_gpu").to_numpy())
    return rows, out


def _given(r, key: str):
    """The row's ``key``, or None where it has none (a column other sources' rows leave empty)."""
    v = getattr(r, key, None)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def row_layout(r) -> Layout:
    vp = int(r.vp) if not pd.isna(r.vp) and int(r.vp) > 1 else 1
    mb, dp = int(r.micro_batch), int(r.dp)
    return Layout(int(r.tp), int(r.pp), int(r.cp), dp, vp, mb, int(r.global_batch) // (mb * dp),
                  "interleaved" if vp > 1 else "1f1b")


def row_checkpointing(r) -> str:
    """``full`` where the row states activation checkpointing (Megatron's flag), else ``none``; a
    row's own ``checkpointing`` where it has one (torchtitan's)."""
    if _given(r, "checkpointing") is not None:
        return str(r.checkpointing)
    return "full" if "checkpoint-activations" in str(r.activation_checkpointing) else "none"


def row_stack(r) -> StackSpec:
    """The stack the row's source ran (configs/source_stacks.yaml, by its framework column)."""
    return load_stacks()[stack_of(str(r.source_slug), str(getattr(r, "framework", "")))]


def row_tp_overlap(r) -> bool:
    """Whether the row's stack overlaps TP communication (configs/stacks.yaml): Megatron-Core and
    NeMo with Transformer Engine's userbuffers (their performance recipes set ``tp_comm_overlap``);
    Megatron-DeepSpeed has no userbuffers (its TP all-reduces are NCCL's); a row's own
    ``tp_overlap`` where it has one (torchtitan's async TP; False: vanilla DTensor TP)."""
    if _given(r, "tp_overlap") is not None:
        return bool(r.tp_overlap)
    return row_stack(r).tp_overlap


@functools.lru_cache(maxsize=4096)
def _predict(arch: DecoderArch, gpu: str, gpus: int, per_node: int, layout: Layout, seq_len: int,
             settings: PlanSettings) -> tuple[float, bool, float]:
    """(step seconds, fits, GiB per GPU) of ``layout`` on a DGX-like cluster (cached: a fit asks often)."""
    plan = plan_layout(arch, dgx_cluster(gpu, gpus, per_node), layout, seq_len, settings)
    return plan.iteration_s, plan.fits, plan.memory_per_gpu_bytes / 2**30


def predict_row(r, factor: float | None = None) -> tuple[float, bool]:
    """(predicted step seconds, fits in memory) of a row at ``factor`` (None: the shipped one);
    an ``fp8_rows`` row with its FP8 recipe, a ``torchtitan_rows`` row with FSDP2."""
    seconds, fits, _ = _predict_full(r, factor)
    return seconds, fits


def row_memory_gib(r) -> float:
    """Predicted peak reserved GiB per GPU of a row (its most loaded stage)."""
    return _predict_full(r, None)[2]


def _predict_full(r, factor: float | None) -> tuple[float, bool, float]:
    flavour = str(_given(r, "dp_flavour") or "zero1")
    # The Megatron factor is Megatron-Core's kernels'; a PyTorch-stack row (torchtitan) runs the
    # compute model as fitted (srift/simulate/layouts.py ``compute_factor_of``) whatever is fitted.
    f = None if pytorch_stack(flavour) else float(load_layout_params().megatron_compute_factor if factor is None
                                                   else factor)
    return _predict(r.arch, r.gpu, int(r.gpus_total), int(r.gpus_per_node), row_layout(r), int(r.seq_len),
                    PlanSettings(precision="bf16", checkpointing=row_checkpointing(r), dp_flavour=flavour,
                                 compute_factor=f, fp8=_given(r, "fp8"), tp_overlap=row_tp_overlap(r),
                                 op_sac=bool(_given(r, "op_sac") or False),
                                 grad_overlap=row_stack(r).grad_reduce_overlap.value,
                                 grad_accum_bytes=row_stack(r).grad_accum_bytes))


def fit_factor(rows: pd.DataFrame) -> float:
    """The ``megatron_compute_factor`` that minimises the squared log error of ``rows``' step times
    (1.0, the compute model as it is, when there are none)."""
    if not len(rows):
        return 1.0
    meas = rows["value"].to_numpy(float)

    def loss(f: float) -> float:
        pred = np.array([predict_row(r, round(f, 4))[0] for r in rows.itertuples()])
        return float(np.sum(np.log(pred / meas) ** 2))

    return round(float(minimize_scalar(loss, bounds=(0.3, 2.0), method="bounded", options={"xatol": 1e-4}).x), 4)


def held_out(rows: pd.DataFrame, key: str, fitted: np.ndarray | None = None) -> np.ndarray:
    """Each row predicted with the factor fitted without the rows sharing its ``key`` (and only
    on the rows ``fitted`` marks, when given: sources nothing is fitted on)."""
    out = np.empty(len(rows))
    can_fit = np.ones(len(rows), dtype=bool) if fitted is None else fitted
    for value in rows[key].unique():
        mask = (rows[key] == value).to_numpy()
        f = fit_factor(rows[~mask & can_fit])
        out[mask] = [predict_row(r, f)[0] for r in rows[mask].itertuples()]
    return out


REGRET_KEYS = ["zoo", "gpu", "gpus_total", "precision_key", "seq_len"]


def regret_groups(rows: pd.DataFrame, pred: np.ndarray) -> pd.DataFrame:
    """Every (model, GPU, GPU count, precision, sequence length) group with more than one measured
    layout (rows of one layout, e.g. vanilla and async TP, are averaged): its layouts, the
    measured best, the one srift ranks first and the regret, how much slower that one measured
    than the best (0 when srift picks the best). Layouts are compared by seconds per token (their
    global batches may differ); fp8 recipes count as one precision."""
    tokens = rows["global_batch"].to_numpy(float) * rows["seq_len"].to_numpy(float)
    frame = rows.assign(meas_tok=rows["value"].to_numpy(float) / tokens, pred_tok=np.asarray(pred, float) / tokens,
                        label=[row_layout(r).label for r in rows.itertuples()],
                        precision_key=["fp8" if str(p).lower().startswith("fp8") else "bf16" for p in rows["precision"]])
    out = []
    for key, grp in frame.groupby(REGRET_KEYS):
        per = grp.groupby("label").agg(meas=("meas_tok", "mean"), pred=("pred_tok", "mean"))
        if len(per) < 2:
            continue
        chosen, best = per["pred"].idxmin(), per["meas"].idxmin()
        out.append(dict(zip(REGRET_KEYS, key), layouts=len(per), best=best, chosen=chosen,
                        sources=",".join(sorted(set(map(str, grp["source_slug"])))),
                        regret=per.loc[chosen, "meas"] / per.loc[best, "meas"] - 1.0))
    return pd.DataFrame(out, columns=[*REGRET_KEYS, "layouts", "best", "chosen", "sources", "regret"])


def regret(rows: pd.DataFrame, pred: np.ndarray) -> tuple[float, int]:
    """Mean regret over ``regret_groups`` and the number of groups."""
    groups = regret_groups(rows, pred)
    return (float(groups["regret"].mean()) if len(groups) else math.nan), len(groups)


def params_document(data: Path, today: str) -> dict:
    """configs/perf/layouts.json's document: the factor fitted on every kept row, and provenance."""
    rows, left_out = load_rows(data)
    factor = fit_factor(rows)
    meas = rows["value"].to_numpy(float)

    def mape(pred: np.ndarray) -> float:
        return round(float(np.mean(np.abs(pred / meas - 1.0)) * 100.0), 1)

    fitted = np.array([predict_row(r, factor)[0] for r in rows.itertuples()])
    loso = held_out(rows, "source_slug")
    per_source = {str(src): mape_of(loso[(rows["source_slug"] == src).to_numpy()],
                                    meas[(rows["source_slug"] == src).to_numpy()])
                  for src in sorted(rows["source_slug"].unique())}
    # torchtitan's bf16 FSDP2 runs: nothing fitted on them, so their error at the factor is held out.
    titan, _ = torchtitan_rows(data)
    titan = titan[titan["fp8"].isna()] if len(titan) else titan
    titan_err = np.array([predict_row(r, factor)[0] for r in titan.itertuples()]) / titan["value"].to_numpy(float) - 1.0 \
        if len(titan) else np.zeros(0)
    if len(titan):
        per_source[TORCHTITAN_SOURCE] = round(float(np.mean(np.abs(titan_err)) * 100.0), 1)
    # FP8 GEMMs, nothing fitted on them (srift/perf/fp8.py): what an --fp8 prediction quotes, Megatron's
    # Transformer Engine runs and torchtitan's torchao float8 (under FSDP2) apart.
    titan_all, _ = torchtitan_rows(data)
    fp8_groups = {"fp8": fp8_rows(data), "fsdp_fp8": titan_all[titan_all["fp8"].notna()] if len(titan_all) else titan_all}
    fp8_figures: dict[str, float | int] = {}
    for name, group in fp8_groups.items():
        if not len(group):
            continue
        err = np.array([predict_row(r, factor)[0] for r in group.itertuples()]) / group["value"].to_numpy(float) - 1.0
        fp8_figures.update({f"{name}_mape_pct": round(float(np.mean(np.abs(err))) * 100.0, 1),
                            f"{name}_rows": int(len(group)), f"{name}_bias_pct": round(float(np.mean(err)) * 100.0, 1) + 0.0})
    return {
        "schema": LAYOUT_PARAMS_SCHEMA,
        "megatron_compute_factor": factor,
        "sources": ["data/llm-parallel-layouts/dgxc-benchmarking-h100-dense.csv (NVIDIA dgxc-benchmarking DGX H100 "
                    "tables, bf16)",
                    "validation only: data/llm-training-throughput (torchtitan FSDP2 x TP 2D runs, bf16, nothing fitted on "
                    "them: fsdp_mape_pct)",
                    "data/llm-parallel-layouts/llm-training-throughput-3d.csv (Megatron-LM README weak-scaling GPTs on "
                    "H100; BigScience BLOOM-176B on A100; see srift/fitting/layouts.py)"],
        "fitted_on": today,
        "fit": {"rows": int(len(rows)), "models": sorted(rows["zoo"].unique().tolist()), "left_out": left_out},
        "validation": {"mape_pct": mape(fitted), "lomo_mape_pct": mape(held_out(rows, "zoo")),
                       "loso_mape_pct": mape(loso), "loso_mape_pct_by_source": per_source,
                       **({"fsdp_mape_pct": per_source[TORCHTITAN_SOURCE], "fsdp_rows": int(len(titan)),
                           "fsdp_bias_pct": round(float(np.mean(titan_err)) * 100.0, 1) + 0.0} if len(titan) else {}),
                       **fp8_figures},
        "model": "Megatron-Core / Transformer Engine compute seconds = megatron_compute_factor x the compute model's "
                 "(configs/perf/compute.json and sharded.json) on the TP/CP-split shapes",
        "method": "least squares on log(predicted / measured step time), bounded to (0.3, 2.0)",
    }


def mape_of(pred: np.ndarray, meas: np.ndarray) -> float:
    """Mean absolute percentage error, rounded to 0.1."""
    return round(float(np.mean(np.abs(pred / meas - 1.0)) * 100.0), 1)


def search_claims(rows: pd.DataFrame) -> list[float]:
    """Per (model, GPU count): how much faster srift predicts its own search's layout than the
    measured layout it predicts (negative: faster). Nobody measured srift's choice, so this is a
    claim to check, not an error."""
    out = []
    for _, grp in rows.groupby(["zoo", "gpus_total"]):
        r = next(grp.itertuples())
        cluster = dgx_cluster(r.gpu, int(r.gpus_total), int(r.gpus_per_node))
        arch = r.arch
        measured = min(plan_layout(arch, cluster, row_layout(x), int(x.seq_len),
                                   PlanSettings(precision="bf16", checkpointing=row_checkpointing(x),
                                                tp_overlap=row_tp_overlap(x),
                                                grad_overlap=row_stack(x).grad_reduce_overlap.value,
                                                grad_accum_bytes=row_stack(x).grad_accum_bytes)).iteration_s
                       for x in grp.itertuples())
        found = search_layouts(arch, cluster, int(r.seq_len), int(r.global_batch),
                               PlanSettings(tp_overlap=row_tp_overlap(r),
                                            grad_overlap=row_stack(r).grad_reduce_overlap.value,
                                            grad_accum_bytes=row_stack(r).grad_accum_bytes))
        if found.best is not None:
            out.append(found.best.iteration_s / measured - 1.0)
    return out
