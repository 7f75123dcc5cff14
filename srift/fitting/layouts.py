"""Measured TP x PP x CP x DP runs (data/llm-parallel-layouts) as layouts srift predicts, the fit of
the one layout figure (``megatron_compute_factor``) and its held-out errors and regret (offline:
pandas, scipy; used by scripts/validate.py and scripts/fit_models.py).

Rows kept: dense pre-training in bf16 on a GPU and model srift has, metric ``step_time_s``. Left out
and counted: fp8 rows (srift does not model FP8 GEMMs, their casts or amax bookkeeping), rows
whose layout does not multiply out to the GPU count, other metrics (the NeMo long-context table
prints model TFLOPS, and every row of it is fp8).

How a row becomes a prediction (each choice is the source's where it states one): the layout
as printed (``interleaved`` when it prints VP, else 1F1B), ``grad_accum = global / (micro x DP)``,
Megatron's distributed optimizer (``zero1``, the README's "distributed optimizer"), no activation
recomputation (not stated; NeMo's performance recipes run without), DGX H100 nodes (8 x H100 SXM
on NVSwitch, 8 x 400 Gb/s InfiniBand: the source's reference architecture).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from srift.cluster import Cluster, NodeGroup
from srift.fitting import megatron_rows
from srift.job import BF16
from srift.simulate.layouts import LAYOUT_PARAMS_SCHEMA, Layout, load_layout_params, plan_layout, search_layouts
from srift.zoo import llm_arch

FOLDER = Path("llm-parallel-layouts")
GPUS = {"H100-SXM5-80GB": ("H100", "nvswitch4", 3200.0, "infiniband")}


def dgx_cluster(gpu_label: str, gpus: int, gpus_per_node: int) -> Cluster:
    """The source's nodes: ``gpus_per_node`` GPUs on NVSwitch, InfiniBand between nodes."""
    gpu, link, gbps, net = GPUS[gpu_label]
    return Cluster(f"{gpus} x {gpu}", (NodeGroup(count=max(1, gpus // gpus_per_node), gpus_per_node=min(gpus, gpus_per_node),
                                                 gpu=gpu, intra_node=link, network_gbps=gbps, network=net),))


def _why_left_out(r) -> str | None:
    if r.metric != "step_time_s":
        return f"metric {r.metric} (not a step time)"
    if str(r.precision).lower() != BF16:
        return "fp8 (not modelled)"
    if r.gpu not in GPUS:
        return f"GPU {r.gpu} not in the row map"
    return None


def load_rows(data: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows srift predicts and, by reason, how many were left out."""
    return megatron_rows.load_rows(data, FOLDER, _why_left_out)


def row_layout(r) -> Layout:
    vp = int(r.vp) if not pd.isna(r.vp) and int(r.vp) > 1 else 1
    mb, dp = int(r.micro_batch), int(r.dp)
    return Layout(int(r.tp), int(r.pp), int(r.cp), dp, vp, mb, int(r.global_batch) // (mb * dp),
                  "interleaved" if vp > 1 else "1f1b")


@functools.lru_cache(maxsize=4096)
def _predict(zoo: str, gpu: str, gpus: int, per_node: int, layout: Layout, seq_len: int, factor: float) -> tuple[float, bool]:
    plan = plan_layout(llm_arch(zoo), dgx_cluster(gpu, gpus, per_node), layout, seq_len, "bf16", compute_factor=factor)
    return plan.iteration_s, plan.fits


def predict_row(r, factor: float | None = None) -> tuple[float, bool]:
    """(predicted step seconds, fits in memory) of a row at ``factor`` (None: the shipped one)."""
    f = load_layout_params().megatron_compute_factor if factor is None else factor
    return _predict(r.zoo, r.gpu, int(r.gpus_total), int(r.gpus_per_node), row_layout(r), int(r.seq_len), float(f))


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
    """Mean regret over (model, GPU count) groups with more than one measured layout: how much
    slower the layout srift ranks first was than the measured best (0 when it picks the best),
    and the number of such groups."""
    frame = rows.assign(pred=pred, label=[row_layout(r).label for r in rows.itertuples()])
    regrets = []
    for _, grp in frame.groupby(["zoo", "gpus_total"]):
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
    return {
        "schema": LAYOUT_PARAMS_SCHEMA,
        "megatron_compute_factor": factor,
        "sources": ["data/llm-parallel-layouts (NVIDIA dgxc-benchmarking DGX H100 tables, bf16; "
                    "see srift/fitting/layouts.py)"],
        "fitted_on": today,
        "fit": {"rows": int(len(rows)), "models": sorted(rows["zoo"].unique().tolist()), "left_out": left_out},
        "validation": {"mape_pct": mape(fitted), "lomo_mape_pct": mape(held_out(rows, "zoo")),
                       "loso_mape_pct": mape(held_out(rows, "source_slug"))},
        "model": "Megatron-Core / Transformer Engine compute seconds = megatron_compute_factor x the compute model's "
                 "(configs/perf/compute.json and sharded.json) on the TP/CP-split shapes",
        "method": "least squares on log(predicted / measured step time), bounded to (0.3, 2.0)",
    }


def search_claims(rows: pd.DataFrame) -> list[float]:
    """Per (model, GPU count): how much faster srift predicts its own search's layout than the
    measured layout it predicts (negative: faster). Nobody measured srift's choice, so this is a
    claim to check, not an error."""
    out = []
    for _, grp in rows.groupby(["zoo", "gpus_total"]):
        r = next(grp.itertuples())
        cluster = dgx_cluster(r.gpu, int(r.gpus_total), int(r.gpus_per_node))
        arch = llm_arch(r.zoo)
        measured = min(plan_layout(arch, cluster, row_layout(x), int(x.seq_len)).iteration_s for x in grp.itertuples())
        found = search_layouts(arch, cluster, int(r.seq_len), int(r.global_batch))
        if found.best is not None:
            out.append(found.best.iteration_s / measured - 1.0)
    return out
