"""Fitting the compute model (srift/perf/compute.py) to measured single-GPU iteration times, and
the share of a measured profile's departure from the model that carries to another GPU.

Used by ``scripts/fit_models.py`` (fit and write configs/perf/compute.json) and
``scripts/validate.py`` (leave-one-GPU-out / leave-one-model-out refits). numpy, pandas and
scikit-learn only; no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from srift.fitting.datasets import ProfileSource
from srift.fitting.validation import mape
from srift.hardware import gpu as gpu_spec
from srift.perf import compute as C
from srift.perf.optimizer_step import step_dispatches, step_kind
from srift.profile import Profile

# Kinds that share one efficiency: matmul-like work (Linear, attention) and everything that is not
# a convolution or a matmul (memory-bound in practice, so its compute efficiency is weakly identified).
KIND_GROUPS: dict[str, tuple[str, ...]] = {
    "conv": ("conv",),
    "matmul": ("matmul", "attention"),
    "other": ("norm", "elementwise", "pool", "embedding", "other"),
}


# Chosen among candidate sets by leave-one-GPU-out error (scripts/validate.py; see README): adding
# "half" took single-GPU LOGO MAPE from 11.8% to 9.9%; log_peak or log_sm instead of / beside
# log_ridge, and a conv-specific slope on every feature, did worse.
DEFAULT_FEATURES: tuple[str, ...] = ("one", "tensor", "log_ridge", "half")


@dataclass
class _RowDesign:
    time_s: float
    z: np.ndarray
    peak: float
    bw: float
    group_of_layer: np.ndarray  # group index per layer
    flops: np.ndarray  # (2, n) fwd, bwd
    bytes_: np.ndarray  # (2, n), already at the row's precision
    opt_bytes: float
    n_kernels: float  # layer passes with work + optimizer-step dispatches (srift/perf/optimizer_step.py)
    weight: float = 1.0  # sample weight (repeated measurements of one configuration share 1)


def _design(profile: Profile, gpu: str, precision: str, features: tuple[str, ...], time_s: float) -> _RowDesign:
    spec = gpu_spec(gpu)
    # A row's layers share one math mode here (one peak and one feature vector). That holds for
    # tf32, amp and fp32-strict, and for fp32 on a GPU without TF32 units; PyTorch's default fp32
    # on Ampere+ mixes TF32 convolutions with FP32 matmuls (C.math_mode), which this design cannot
    # express: no such row is in the data (Lambda's, NVIDIA's and SuperBench's fp32 runs are TF32
    # throughout, srift.fitting.datasets), and one would be refused rather than mis-fitted.
    if len({C.math_mode(precision, k) for k in C.KINDS}) > 1 and spec.has_tf32:
        raise ValueError(f"{gpu} {precision}: mixed TF32/FP32 layers cannot be a compute-fit row")
    arr = C.layer_arrays(profile)
    group_names = list(KIND_GROUPS)
    kind_to_group = {k: group_names.index(g) for g, ks in KIND_GROUPS.items() for k in ks}
    groups = np.array([kind_to_group[C.KINDS[i]] for i in arr.kind_idx], dtype=np.intp)
    bf = C.ELEMENT_BYTES[precision] / C.ELEMENT_BYTES.get(profile.precision, 4.0)
    flops = np.vstack([arr.fwd_flops, arr.bwd_flops])
    bytes_ = np.vstack([arr.fwd_bytes, arr.bwd_bytes]) * bf
    state = float(profile.optimizer.state_bytes_per_param)
    work = ((flops > 0) | (bytes_ > 0)).sum()
    dispatches = step_dispatches(step_kind(profile.framework.get("torch")), arr.n_param_tensors)
    return _RowDesign(
        time_s=time_s, z=C.gpu_features(spec, precision, features), peak=spec.peak_flops(precision) / spec.clock_derate,
        bw=spec.memory_bandwidth_bytes_per_s, group_of_layer=groups, flops=flops, bytes_=bytes_,
        opt_bytes=arr.params * (12.0 + 2.0 * state), n_kernels=float(work + dispatches),
    )


BASE_GROUP = "matmul"


# Knee of the Huber loss on relative error (see fit_compute). 1 %, about the run-to-run spread of
# repeated measurements of one configuration (the H100 hosts in Lambda's data): chosen with the
# single-GPU leave-one-GPU-out error (scripts/validate.py): squared error 9.9 %, knee 5 % 9.6 %,
# 2 % 9.4 %, 1 % 9.3 %, 0.5 % 9.3 %.
HUBER_DELTA = 0.01


def _row_matrix(d: _RowDesign, theta_groups: np.ndarray, theta_mem: np.ndarray) -> np.ndarray:
    """Linear features of one row given the current roofline assignment (compute- vs memory-bound).

    Columns: compute seconds at peak of all compute-bound passes x GPU features (shared by every
    kind), compute seconds at peak of each non-base group (an intercept shift of that group's
    1/efficiency), memory seconds at peak bandwidth x GPU features, per-iteration overhead.
    """
    group_names = list(KIND_GROUPS)
    inv_g = np.maximum(C.MIN_INV_EFF_COMPUTE, theta_groups @ d.z)[d.group_of_layer]
    inv_m = max(C.MIN_INV_EFF_MEMORY, float(theta_mem @ d.z))
    t_comp = d.flops * inv_g / d.peak
    t_mem = d.bytes_ * inv_m / d.bw
    comp_bound = t_comp >= t_mem
    x_groups = np.zeros(len(group_names))
    np.add.at(x_groups, np.broadcast_to(d.group_of_layer, d.flops.shape)[comp_bound], (d.flops / d.peak)[comp_bound])
    shifts = [x_groups[i] for i, g in enumerate(group_names) if g != BASE_GROUP]
    x_mem = (d.bytes_[~comp_bound].sum() + d.opt_bytes) / d.bw
    return np.concatenate([x_groups.sum() * d.z, shifts, x_mem * d.z, [1.0]])


def fit_compute(designs: list[_RowDesign], features: tuple[str, ...] = DEFAULT_FEATURES, alpha: float = 1e-2,
                iterations: int = 100, launch_s: float | None = None, fit_overhead: bool = False,
                huber: float | None = HUBER_DELTA) -> C.ComputeParams:
    """Fit the compute model to measured iteration times (relative error, Huber loss, ridge).

    The roofline max() makes the model piecewise linear: alternate between assigning each layer
    pass to its bound (compute or memory) under the current coefficients and solving the linear
    least-squares problem (scikit-learn Ridge on rows scaled by 1/measured time, so the loss is the
    squared relative error) until the assignment stops changing.

    Loss: Huber on the relative error with ``huber`` as its knee, by iteratively reweighted least
    squares (a row's weight shrinks by ``huber / |error|`` once its error passes the knee). With a
    1 % knee this is close to the absolute relative error, the MAPE the model is judged by, and a
    few rows no compute model can match (a GeForce card's amp runs, one snapshot's slow host) no
    longer pull every GPU's efficiencies toward them as squared errors did. ``None`` fits squared
    relative errors.

    Fixed costs: by default a cost per layer pass and per optimizer-step dispatch (one per tensor
    before PyTorch 2.0: srift/perf/optimizer_step.py, from the row's ``torch_version``),
    ``launch_s``, is fitted and there is no per-iteration constant. A layer pass is a few kernels plus the eager
    framework's dispatch and the unhooked functional ops between modules, so its cost grows with
    the number of layers; a per-iteration constant instead fitted one benchmark suite's loop
    overhead (Lambda's 29 ms) and missed every other model (SuperBench's VGG-16 by +43%,
    DenseNet-201 by -30%; see README). Pass ``launch_s`` to fix it, ``fit_overhead`` to fit the
    constant as well.
    """
    group_names = list(KIND_GROUPS)
    n_groups, n_feat = len(group_names), len(features)
    # Start from a plain roofline: 50% of peak FLOP/s and 70% of bandwidth on every GPU.
    theta_g = np.zeros((n_groups, n_feat))
    theta_g[:, 0] = 2.0
    theta_m = np.zeros(n_feat)
    theta_m[0] = 1.0 / 0.7
    overhead = 0.0
    fit_launch = launch_s is None
    launch = 0.0 if launch_s is None else launch_s
    y = np.array([1.0 - launch * d.n_kernels / d.time_s for d in designs])
    from sklearn.linear_model import Ridge  # here: scikit-learn takes seconds to import, and only a fit needs it

    prev = None
    for _ in range(iterations):
        X = np.array([_row_matrix(d, theta_g, theta_m) / d.time_s for d in designs])
        if not fit_overhead:
            X = X[:, :-1]
        if fit_launch:
            X = np.column_stack([X, [d.n_kernels / d.time_s for d in designs]])
        scale = np.sqrt((X ** 2).mean(axis=0))
        scale[scale == 0] = 1.0
        w = np.array([d.weight for d in designs])
        if huber is not None and prev is not None:
            res = np.abs(X @ prev - y)
            w = w * np.minimum(1.0, huber / np.maximum(res, 1e-12))
        model = Ridge(alpha=alpha, fit_intercept=False, random_state=0).fit(X / scale, y, sample_weight=w)
        coef = model.coef_ / scale
        shared = coef[:n_feat]
        shifts = iter(coef[n_feat: n_feat + n_groups - 1])
        theta_g = np.tile(shared, (n_groups, 1))
        for i, g in enumerate(group_names):
            if g != BASE_GROUP:
                theta_g[i, 0] += next(shifts)
        theta_m = coef[n_feat + n_groups - 1: n_feat + n_groups - 1 + n_feat]
        if fit_launch:
            launch = float(max(coef[-1], 0.0))
            coef_rest = coef[:-1]
        else:
            coef_rest = coef
        overhead = float(max(coef_rest[-1], 0.0)) if fit_overhead else 0.0
        if prev is not None and np.allclose(prev, coef, rtol=1e-6, atol=1e-12):
            break
        prev = coef
    inv_eff = {k: tuple(float(x) for x in theta_g[gi]) for gi, (g, kinds) in enumerate(KIND_GROUPS.items()) for k in kinds}
    return C.ComputeParams(
        features=tuple(features),
        inv_eff=inv_eff,
        inv_eff_mem=tuple(float(x) for x in theta_m),
        launch_s=launch,
        optimizer_s_per_tensor=launch,
        overhead_s=overhead,
    )


def designs_for(rows: pd.DataFrame, profiles: ProfileSource, features: tuple[str, ...]) -> list[_RowDesign]:
    """Fit rows; repeated measurements of one (GPU, model, precision, batch) share a weight of 1 so
    that a GPU measured on many hosts (H100) does not outweigh the others."""
    key = ["gpu", "model", "precision", "batch_per_gpu"]
    counts = rows.groupby(key)["iteration_time_s"].transform("count").to_numpy()
    out = []
    for r, c in zip(rows.itertuples(), counts):
        d = _design(profiles.for_row(r), r.gpu, r.precision, features, float(r.iteration_time_s))
        d.weight = 1.0 / float(c)
        out.append(d)
    return out


def predict_rows(rows: pd.DataFrame, profiles: ProfileSource, params: C.ComputeParams) -> np.ndarray:
    """Predicted single-GPU iteration seconds (compute model only) for each row."""
    out = []
    for r in rows.itertuples():
        out.append(C.layer_times(profiles.for_row(r), r.gpu, r.precision, params).total_s)
    return np.array(out)


def held_out_fits(single: pd.DataFrame, profiles: ProfileSource, key: str,
                  features: tuple[str, ...] = DEFAULT_FEATURES) -> dict[str, C.ComputeParams]:
    """Compute-model fits on the single-GPU rows without each value of column ``key`` (a model,
    a GPU silicon), keyed by the held-out value."""
    return {value: fit_compute(designs_for(single.drop(index=held), profiles, features), features)
            for value, held in single.groupby(key).groups.items()}


def held_out_predictions(single: pd.DataFrame, profiles: ProfileSource, key: str,
                         fits: dict[str, C.ComputeParams] | None = None) -> np.ndarray:
    """Compute-model predictions for every single-GPU row from the fit that held out its ``key``."""
    fits = held_out_fits(single, profiles, key) if fits is None else fits
    out = np.full(len(single), np.nan)
    for value, held in single.groupby(key).groups.items():
        if value in fits:
            out[single.index.get_indexer(held)] = predict_rows(single.loc[held], profiles, fits[value])
    return out


def anchor_pairs(single: pd.DataFrame, pred_col: str) -> pd.DataFrame:
    """Every ordered pair of single-GPU measurements of one model in one source (same software)
    on another GPU or precision: ``ratio`` = measured / predicted on the anchor (``pred_col``),
    ``pred`` and ``meas`` on the target. Repeated runs of a configuration count once (median)."""
    g = single.groupby(["source", "model", "gpu", "precision"], as_index=False).agg(
        meas=("iteration_time_s", "median"), pred=(pred_col, "median"))
    m = g.merge(g, on=["source", "model"], suffixes=("_a", ""))
    m = m[(m["gpu_a"] != m["gpu"]) | (m["precision_a"] != m["precision"])]
    return pd.DataFrame({"ratio": (m["meas_a"] / m["pred_a"]).to_numpy(), "pred": m["pred"].to_numpy(),
                         "meas": m["meas"].to_numpy()})


def anchored_mape(pairs: pd.DataFrame, weight: float, clip: float) -> float:
    """MAPE of anchored predictions (``C.anchor_factor`` with ``weight``, ``clip``) over ``pairs``."""
    p = C.ComputeParams((), {}, (), 0.0, 0.0, 0.0, anchor_weight=weight, anchor_clip=clip)
    factors = np.array([C.anchor_factor(float(r), p) for r in pairs["ratio"]])
    return mape(pairs["pred"] * factors, pairs["meas"])


def fit_anchor(single: pd.DataFrame, in_fit_col: str, held_out_col: str,
               quantile: float = 0.95, grid: np.ndarray | None = None) -> tuple[float, float, dict]:
    """How much of a measured profile's departure from the model to carry to another GPU or
    precision (``anchor_weight``, ``anchor_clip``; see ``C.anchor_factor``).

    The clip is the ``quantile`` of the model's in-fit |log(measured / predicted)| on single GPUs:
    a departure larger than what the model misses on GPUs it was fitted to is the job's own and
    is carried whole. The weight is chosen by grid search (0..1, step 0.05) for the lowest MAPE
    of anchored predictions with the model fitted without the row's model (``held_out_col``), as
    a user's model is never in the fit.
    """
    clip = float(np.quantile(np.abs(np.log(single["iteration_time_s"] / single[in_fit_col])), quantile))
    pairs = anchor_pairs(single, held_out_col)
    grid = np.round(np.arange(0.0, 1.0001, 0.05), 2) if grid is None else grid
    errs = [anchored_mape(pairs, float(w), clip) for w in grid]
    i = int(np.argmin(errs))
    info = {"pairs": int(len(pairs)), "held_out": held_out_col, "clip_quantile": quantile,
            "mape_pct": {"none": round(anchored_mape(pairs, 0.0, math.inf), 2), "full": round(anchored_mape(pairs, 1.0, clip), 2),
                         "fitted": round(errs[i], 2)}}
    return float(grid[i]), clip, info
