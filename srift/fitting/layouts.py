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
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.fitting import megatron_rows
from srift.job import BF16
from srift.perf.fp8 import Fp8Recipe
from srift.simulate.layouts import LAYOUT_PARAMS_SCHEMA, Layout, load_layout_params, plan_layout, search_layouts
from srift.zoo import canonical_name, llm_arch
from srift.zoo.llm import DecoderArch

FOLDER = Path("llm-parallel-layouts")
GPUS = {"H100-SXM5-80GB": ("H100", "nvswitch4", 3200.0, "infiniband"),
        "A100-SXM4-80GB": ("A100-80GB", "nvswitch", 400.0, "infiniband")}
SHAPE_COLUMNS = ("n_layers", "hidden", "heads", "kv_heads", "ffn", "vocab")
# The FP8 recipe of the source's fp8 rows: NeMo's bf16_with_fp8_mixed on Hopper is Transformer
# Engine's per-tensor (delayed) scaling.
FP8_RECIPE_OF_GPU: dict[str, Fp8Recipe] = {"H100-SXM5-80GB": "tensorwise"}
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
    gated = 1.5 if arch.mlp == "swiglu" else 1.0
    return (12.0 * global_batch * seq_len * n_l * h * h
            * ((1.0 + arch.kv_heads / arch.heads + seq_len / h) * q_ratio + arch.intermediate / h * gated
               + arch.vocab / (2.0 * n_l * h)))


def dgx_cluster(gpu_label: str, gpus: int, gpus_per_node: int) -> Cluster:
    """The source's nodes: ``gpus_per_node`` GPUs on NVSwitch, InfiniBand between nodes."""
    gpu, link, gbps, net = GPUS[gpu_label]
    return Cluster(f"{gpus} x {gpu}", (NodeGroup(count=max(1, gpus // gpus_per_node), gpus_per_node=min(gpus, gpus_per_node),
                                                 gpu=gpu, intra_node=link, network_gbps=gbps, network=net),))


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


def row_layout(r) -> Layout:
    vp = int(r.vp) if not pd.isna(r.vp) and int(r.vp) > 1 else 1
    mb, dp = int(r.micro_batch), int(r.dp)
    return Layout(int(r.tp), int(r.pp), int(r.cp), dp, vp, mb, int(r.global_batch) // (mb * dp),
                  "interleaved" if vp > 1 else "1f1b")


def row_checkpointing(r) -> str:
    """``full`` where the row states activation checkpointing (Megatron's flag), else ``none``."""
    return "full" if "checkpoint-activations" in str(r.activation_checkpointing) else "none"


def row_tp_overlap(r) -> bool:
    """Whether the row's framework overlaps TP communication with Transformer Engine's userbuffers:
    Megatron-Core and NeMo (whose performance recipes set ``tp_comm_overlap``) do; Megatron-DeepSpeed
    has no userbuffers (its TP all-reduces are NCCL's)."""
    framework = str(getattr(r, "framework", ""))
    return "Megatron-Core" in framework or "NeMo" in framework or "--tp-comm-overlap" in framework


@functools.lru_cache(maxsize=4096)
def _predict(arch: DecoderArch, gpu: str, gpus: int, per_node: int, layout: Layout, seq_len: int, checkpointing: str,
             factor: float, fp8: Fp8Recipe | None = None, tp_overlap: bool = True) -> tuple[float, bool]:
    plan = plan_layout(arch, dgx_cluster(gpu, gpus, per_node), layout, seq_len, "bf16", checkpointing, compute_factor=factor,
                       fp8=fp8, tp_overlap=tp_overlap)
    return plan.iteration_s, plan.fits


def predict_row(r, factor: float | None = None) -> tuple[float, bool]:
    """(predicted step seconds, fits in memory) of a row at ``factor`` (None: the shipped one);
    an ``fp8_rows`` row with its FP8 recipe."""
    f = load_layout_params().megatron_compute_factor if factor is None else factor
    return _predict(r.arch, r.gpu, int(r.gpus_total), int(r.gpus_per_node), row_layout(r), int(r.seq_len),
                    row_checkpointing(r), float(f), getattr(r, "fp8", None), row_tp_overlap(r))


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


def held_out(rows: pd.DataFrame, key: str) -> np.ndarray:
    """Each row predicted with the factor fitted without the rows sharing its ``key``."""
    out = np.empty(len(rows))
    for value in rows[key].unique():
        mask = (rows[key] == value).to_numpy()
        f = fit_factor(rows[~mask])
        out[mask] = [predict_row(r, f)[0] for r in rows[mask].itertuples()]
    return out


def regret(rows: pd.DataFrame, pred: np.ndarray) -> tuple[float, int]:
    """Mean regret over (model, precision, GPU count) groups with more than one measured layout:
    how much slower the layout srift ranks first was than the measured best (0 when it picks the
    best), and the number of such groups."""
    frame = rows.assign(pred=pred, label=[row_layout(r).label for r in rows.itertuples()],
                        precision_key=[str(p).lower().startswith("fp8") for p in rows["precision"]])
    regrets = []
    for _, grp in frame.groupby(["zoo", "precision_key", "gpus_total"]):
        per = grp.groupby("label").agg(meas=("value", "mean"), pred=("pred", "mean"))
        if len(per) < 2:
            continue
        chosen = per["pred"].idxmin()
        regrets.append(per.loc[chosen, "meas"] / per["meas"].min() - 1.0)
    return (float(np.mean(regrets)) if regrets else math.nan), len(regrets)


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
    return {
        "schema": LAYOUT_PARAMS_SCHEMA,
        "megatron_compute_factor": factor,
        "sources": ["data/llm-parallel-layouts/dgxc-benchmarking-h100-dense.csv (NVIDIA dgxc-benchmarking DGX H100 "
                    "tables, bf16)",
                    "data/llm-parallel-layouts/llm-training-throughput-3d.csv (Megatron-LM README weak-scaling GPTs on "
                    "H100; BigScience BLOOM-176B on A100; see srift/fitting/layouts.py)"],
        "fitted_on": today,
        "fit": {"rows": int(len(rows)), "models": sorted(rows["zoo"].unique().tolist()), "left_out": left_out},
        "validation": {"mape_pct": mape(fitted), "lomo_mape_pct": mape(held_out(rows, "zoo")),
                       "loso_mape_pct": mape(loso), "loso_mape_pct_by_source": per_source},
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
        measured = min(plan_layout(arch, cluster, row_layout(x), int(x.seq_len), "bf16", row_checkpointing(x),
                                   tp_overlap=row_tp_overlap(x)).iteration_s for x in grp.itertuples())
        found = search_layouts(arch, cluster, int(r.seq_len), int(r.global_batch), tp_overlap=row_tp_overlap(r))
        if found.best is not None:
            out.append(found.best.iteration_s / measured - 1.0)
    return out
