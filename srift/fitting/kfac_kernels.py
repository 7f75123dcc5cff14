"""Fitting the K-FAC kernel model (srift/perf/kfac_kernels.py) to measured kernel tables, and
the documented assumptions that derive a GPU's figures when it has no table.

Tables: every ``data/measurements/kfac-kernels-<device>.csv`` (the columns of
scripts/measure_kfac_kernels.py); ``<device>`` is ``cpu`` or a GPU name configs/gpus.yaml knows.
A new GPU table is picked up by the next ``python scripts/fit_models.py``.

* Solvers: per device (and thread count), the ``cholesky_inverse`` rows (the ``inverse`` method)
  and the ``eigh`` rows (``eigen``), one matrix per call, fitted by least squares on
  ``log(t_model / t_measured)`` to ``latency + n^3 / (rate * e(n))``, ``e(n) = 1/(1 + (n_half/n)^shape)``.
  ``shape`` is one number for all curves: fitted jointly on the CPU table (each curve with its
  own latency, rate and n_half), then held fixed for every table and for derived GPUs.
* Factors: per device and thread count, the ``unfold``, ``factor_a`` and ``factor_g`` rows fitted
  to ``call + copy bytes / memory rate + max(FLOPs / gemm rate, bytes read / memory rate)`` (the
  bytes each kernel copies: srift.perf.kfac_kernels' docstring).
* Rows whose p90 exceeds twice their p10 are left out: the machine was busy (the measurement
  script's own rerun criterion, ``NOISY``).

Used by ``scripts/fit_models.py`` (configs/perf/kfac_kernels.json) and tests.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from srift.hardware import find_gpu
from srift.perf.kfac_kernels import (
    BIAS_BYTES_PER_ELEMENT, FP32_BYTES, HOOK_BYTES_PER_ELEMENT, PARAMS_SCHEMA, GpuAssumptions, KernelParams, MeasuredDevice,
    SolverCurve,
)

NOISY = 2.0  # p90 / p10 above this: a busy machine (scripts/measure_kfac_kernels.py's criterion)
SOLVER_KERNELS = {"inverse": "cholesky_inverse", "eigen": "eigh"}
TABLE = re.compile(r"kfac-kernels-(.+)\.csv$")
SHAPE_RANGE = (0.25, 4.0)

# ---- the GPU assumptions: central value, range, and where each comes from -----------------------
# SuperBench's kernel-launch benchmark on NVIDIA GPUs (data/superbench-results): the gap between
# two back-to-back kernels (event_overhead) and a launch followed by a synchronisation
# (wall_overhead), reported in milliseconds.
SUPERBENCH_PLATFORMS = ("Azure-NDv4-A100", "Azure-NDmv4-A100", "V100")

ASSUMPTION_SOURCES: dict[str, dict[str, Any]] = {
    "inverse_flops_per_n3": {
        "range": [1.0, 7.0 / 3.0],
        "source": ("srift's inverse is torch.linalg.cholesky (cuSOLVER potrf, n^3/3 FLOPs) then torch.cholesky_inverse, "
                   "which on CUDA solves L L^T X = I with cuSOLVER potrs and n right-hand sides (two triangular solves, "
                   "2 n^3) as PyTorch's ATen source (BatchLinearAlgebraLib.cpp) implements it as far as we know: 7/3 "
                   "(not verifiable without a GPU); the low end 1 is LAPACK's potrf + potri, what the CPU runs."),
    },
    "solver_to_gemm": {
        "range": [0.5, 0.9],
        "source": ("eigh only (the Cholesky inverse is fitted: solver_efficiency): its O(n^3) level-3 work runs as "
                   "GEMM-like updates; GPU libraries (MAGMA, cuSOLVER) report large-n factorisation rates of roughly "
                   "60-85 % of their GEMM rate. "
                   "An assumption with that range; the CPU table's fitted asymptote over its fitted GEMM rate is "
                   "the measured counterpart (cpu_solver_to_gemm)."),
    },
    "eigen_bytes_per_n3": {
        "range": [2.0 / 3.0, 4.0 / 3.0],
        "source": ("eigh (cuSOLVER syevd) first reduces the matrix to tridiagonal form; half its FLOPs are one symmetric "
                   "matrix-vector product per column over the trailing matrix, memory-bound: reading the trailing "
                   "triangle once per column is sum 4 (n-k)^2 / 2 = 2 n^3 / 3 bytes (4 n^3 / 3 if the whole square is read)."),
    },
    "eigen_flops_per_n3": {
        "range": [8.0 / 3.0, 4.0],
        "source": ("the rest of syevd at the solver rate: the reduction's level-3 half (2 n^3 / 3), the back-"
                   "transformation of the eigenvectors (2 n^3) and the divide-and-conquer tridiagonal solver (up to "
                   "4 n^3 / 3, less with deflation; 2 n^3 / 3 taken)."),
    },
    "tile": {
        "range": [64.0, 256.0],
        "source": ("eigh's n_half = tile x sqrt(SMs): an n x n update launches (n / tile)^2 thread blocks, one wave over the SMs at "
                   "n = tile sqrt(SMs); cuBLAS's FP32 GEMM kernels use 128 x 128 tiles (their names, e.g. "
                   "sgemm_128x128, in any profile). The range halves and doubles n_half."),
    },
    "latency_passes": {
        "range": [0.5, 4.0],
        "source": ("one eigendecomposition (eigh, cat, clamp) is a handful of eager ops with a host synchronisation: "
                   "taken as two layer passes of the compute model's fitted per-pass cost (launch_s) plus sync_s (the "
                   "Cholesky inverse's per-call cost is sync_s, its per-column cost fitted)."),
    },
    "sync_s": {"source": "SuperBench kernel-launch wall_overhead (launch + synchronise), median over NVIDIA GPUs"},
    "eigen_column_launches": {
        "range": [1.0, 3.0],
        "source": "the tridiagonal reduction launches at least one kernel (the symv) per column",
    },
    "launch_gap_s": {"source": "SuperBench kernel-launch event_overhead (back-to-back kernels), median over NVIDIA GPUs"},
    **{name: {"source": ("fitted on PipeFisher's per-phase timings of one BERT/T5/OPT block on P100, V100 and RTX 3090 "
                         "(data/kfac-layer-phases; srift/fitting/kfac_phases.py): least squares on log time, each phase "
                         "on its own 109 rows; validated leave-one-GPU-out and leave-one-model-out (scripts/validate.py "
                         "--only kfac)")}
       for name in ("factor_gemm_efficiency", "call_s", "solver_efficiency", "solver_cycles_per_column",
                    "precondition_gemm_efficiency")},
}


def superbench_launch_s(data: Path) -> tuple[float, float, int]:
    """(event gap, launch + synchronise) seconds: medians of SuperBench's kernel-launch benchmark
    on NVIDIA GPUs (data/superbench-results; reported in milliseconds), and the rows used."""
    sb = pd.read_csv(Path(data) / "superbench-results" / "all_metrics_flat.csv")
    kl = sb[(sb["benchmark"] == "kernel-launch") & sb["platform"].isin(SUPERBENCH_PLATFORMS)]
    event = kl[kl["metric"].str.contains("event_(?:overhead|time)", regex=True)]["value"].astype(float)
    wall = kl[kl["metric"].str.contains("wall_(?:overhead|time)", regex=True)]["value"].astype(float)
    return float(np.median(event)) * 1e-3, float(np.median(wall)) * 1e-3, int(len(event) + len(wall))


# ---- tables ----------------------------------------------------------------------------------------
def table_paths(data: Path) -> dict[str, Path]:
    """Measured tables by device key: ``cpu`` or a canonical GPU name (unknown names skipped)."""
    out: dict[str, Path] = {}
    for p in sorted((Path(data) / "measurements").glob("kfac-kernels-*.csv")):
        m = TABLE.search(p.name)
        if not m:
            continue
        name = m.group(1)
        key = "cpu" if name.lower() == "cpu" else find_gpu(name)
        if key is not None:
            out[key] = p
    return out


def load_table(path: Path) -> pd.DataFrame:
    """A measured table without the noisy rows (p90 > NOISY x p10)."""
    t = pd.read_csv(path)
    quiet = t["p90_s"] <= NOISY * t["p10_s"]
    return t[quiet].reset_index(drop=True)


def _input_elements(label: str) -> float:
    """Elements of the layer input from a factor row's label (``... (32, 64, 56, 56)``)."""
    m = re.search(r"\(([\d, ]+)\)\s*$", str(label))
    return float(np.prod([int(x) for x in m.group(1).split(",") if x.strip()])) if m else 0.0


# ---- solvers --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CurveFit:
    curve: SolverCurve
    rows: int
    rms_log_error: float


def solver_rows(table: pd.DataFrame, method: str, threads: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(n, seconds) of one solver's one-matrix rows (of ``threads``, when given)."""
    t = table[(table["kernel"] == SOLVER_KERNELS[method]) & (table["batch"] == 1)]
    if threads is not None:
        t = t[t["threads"] == threads]
    t = t.sort_values("n")
    return t["n"].to_numpy(float), t["median_s"].to_numpy(float)


def _curve(x: np.ndarray, shape: float) -> tuple[float, float, float]:
    latency, rate, n_half = np.exp(x)
    return float(latency), float(rate), float(n_half)


def _resid(x: np.ndarray, n: np.ndarray, t: np.ndarray, shape: float) -> np.ndarray:
    latency, rate, n_half = _curve(x, shape)
    return np.log(latency + n**3 / rate * (1.0 + (n_half / n) ** shape)) - np.log(t)


# Bounds of the fitted figures (log space): latency 1 ns..1 s, rate 1e6..1e16 n^3/s, n_half 1..1e5.
CURVE_BOUNDS = (np.log([1e-9, 1e6, 1.0]), np.log([1.0, 1e16, 1e5]))
# GEMM 1e8..1e16 FLOP/s, memory 1e7..1e13 bytes/s, per call 1 ns..1 s.
FACTOR_BOUNDS = (np.log([1e8, 1e7, 1e-9]), np.log([1e16, 1e13, 1.0]))


def _starts(n: np.ndarray, t: np.ndarray) -> list[np.ndarray]:
    rate0 = float(np.max(n**3 / t))
    return [np.log([max(float(t.min()) * f, 1e-7), rate0 * 2.0, h]) for f in (0.1, 0.5) for h in (64.0, 512.0, 2048.0)]


def fit_curve(n: np.ndarray, t: np.ndarray, shape: float) -> CurveFit:
    """Latency, rate and n_half of one solver curve with ``shape`` fixed (multi-start least squares)."""
    if len(n) < 3:
        raise ValueError(f"a solver curve needs 3 or more sizes, got {len(n)}")
    fits = [least_squares(_resid, np.clip(x0, *CURVE_BOUNDS), args=(n, t, shape), bounds=CURVE_BOUNDS, method="trf")
            for x0 in _starts(n, t)]
    best = min(fits, key=lambda r: float(r.cost))
    latency, rate, n_half = _curve(best.x, shape)
    return CurveFit(SolverCurve(latency, rate, n_half, shape), len(n), float(np.sqrt(np.mean(best.fun**2))))


def fit_shape(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """The common efficiency exponent of several solver curves (each with its own latency, rate
    and n_half), and the pooled rms log error: a grid over ``SHAPE_RANGE``, then refined."""
    def total(shape: float) -> float:
        return sum(float(np.sum(_resid_fit(n, t, shape) ** 2)) for n, t in curves)

    grid = np.exp(np.linspace(math.log(SHAPE_RANGE[0]), math.log(SHAPE_RANGE[1]), 33))
    costs = [total(s) for s in grid]
    i = int(np.argmin(costs))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    fine = np.exp(np.linspace(math.log(lo), math.log(hi), 21))
    best = min(fine, key=total)
    rows = sum(len(n) for n, _ in curves)
    return float(best), float(math.sqrt(total(float(best)) / rows))


def _resid_fit(n: np.ndarray, t: np.ndarray, shape: float) -> np.ndarray:
    fit = fit_curve(n, t, shape)
    c = fit.curve
    return np.log(c.latency_s + n**3 / c.rate_n3_per_s * (1.0 + (c.n_half / n) ** shape)) - np.log(t)


# ---- factor kernels ---------------------------------------------------------------------------
@dataclass(frozen=True)
class FactorFit:
    gemm_flops_per_s: float
    memory_bytes_per_s: float
    call_s: float
    rows: int
    rms_log_error: float


def factor_design(table: pd.DataFrame) -> pd.DataFrame:
    """The factor rows with the bytes each copies and the GEMM's FLOPs and bytes read.

    ``unfold`` (F.unfold + the transpose to rows): reads the input, writes, reads and writes the
    unfolded bytes. ``factor_a`` of a convolution: that plus the Gram product of the unfolded rows;
    of a Linear: the Gram product of its input rows (a view). ``factor_g``: a convolution's output
    gradient copied to rows (read + write), then its Gram product."""
    f = table[table["kernel"].isin(["unfold", "factor_a", "factor_g"])].copy()
    conv = ~f["layer"].astype(str).str.contains("Linear|fc ", regex=True)
    elems = f["layer"].map(_input_elements)
    unfolded = f["bytes"].astype(float)
    copy = np.where(f["kernel"] == "factor_g", np.where(conv, 2.0 * unfolded, 0.0),
                    np.where(conv, FP32_BYTES * elems + 3.0 * unfolded, 0.0))
    # The d x d work after the Gram product (and a bias's column sum and copy), as the model counts it.
    width = np.where(f["kernel"] == "unfold", 0.0, unfolded / (FP32_BYTES * f["rows"].astype(float)))
    bias = (f["kernel"] == "factor_a") & (f["n"].astype(float) > width + 0.5)
    copy = copy + np.where(f["kernel"] == "unfold", 0.0, HOOK_BYTES_PER_ELEMENT * width**2)
    copy = copy + np.where(bias, unfolded + BIAS_BYTES_PER_ELEMENT * width**2, 0.0)
    f["copy_bytes"] = copy
    f["gemm_flops"] = np.where(f["kernel"] == "unfold", 0.0, f["flop"].fillna(0).astype(float))
    f["gemm_bytes"] = np.where(f["kernel"] == "unfold", 0.0, unfolded)
    return f.reset_index(drop=True)


def fit_factors(design: pd.DataFrame) -> FactorFit:
    """GEMM rate, memory rate and per-call cost of the factor kernels (least squares on log time)."""
    if len(design) < 4:
        raise ValueError(f"the factor fit needs 4 or more rows, got {len(design)}")
    t = design["median_s"].to_numpy(float)
    copy, flops, read = (design[c].to_numpy(float) for c in ("copy_bytes", "gemm_flops", "gemm_bytes"))

    def model(x: np.ndarray) -> np.ndarray:
        gemm, mem, call = np.exp(x)
        return call + copy / mem + np.maximum(flops / gemm, read / mem)

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(model(x)) - np.log(t)

    starts = [np.log([g, m, c]) for g in (1e10, 1e11, 1e13) for m in (1e9, 1e10, 1e11) for c in (1e-5, 1e-3)]
    best = min((least_squares(resid, x0, bounds=FACTOR_BOUNDS, method="trf") for x0 in starts), key=lambda r: float(r.cost))
    gemm, mem, call = (float(v) for v in np.exp(best.x))
    return FactorFit(gemm, mem, call, len(design), float(np.sqrt(np.mean(best.fun**2))))


def fit_step(table: pd.DataFrame) -> tuple[float | None, float, int, float]:
    """The rate and fixed cost of ``step()``'s per-factor work from the ``factor_step`` rows
    (``bytes`` is ``STEP_BYTES_PER_ELEMENT n^2``): ``t = call + bytes / rate``, least squares on log
    time; ``(rate, call, rows, rms log error)``, the rate None without three or more rows."""
    rows = table[table["kernel"] == "factor_step"]
    if len(rows) < 3:
        return None, 0.0, len(rows), 0.0
    t = rows["median_s"].to_numpy(float)
    nbytes = rows["bytes"].astype(float).to_numpy()

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(np.exp(x[1]) + nbytes / np.exp(x[0])) - np.log(t)

    starts = [np.log([float(np.median(nbytes / t)), c]) for c in (1e-7, 1e-5, 1e-3)]
    best = min((least_squares(resid, x0, method="trf") for x0 in starts), key=lambda r: float(r.cost))
    rate, call = (float(v) for v in np.exp(best.x))
    return rate, call, len(rows), float(np.sqrt(np.mean(best.fun**2)))


# ---- the document -----------------------------------------------------------------------------
def fit_device(table: pd.DataFrame, shape: float, threads: int | None) -> tuple[MeasuredDevice, dict[str, Any]]:
    """One device's (thread count's) fitted figures and their fit quality."""
    rows = table if threads is None else table[table["threads"] == threads]
    curves = {m: fit_curve(*solver_rows(rows, m, None), shape) for m in SOLVER_KERNELS}
    factors = fit_factors(factor_design(rows))
    step_rate, step_call, step_rows, step_rms = fit_step(rows)
    device = MeasuredDevice(curves["inverse"].curve, curves["eigen"].curve, factors.gemm_flops_per_s,
                            factors.memory_bytes_per_s, factors.call_s, step_bytes_per_s=step_rate, step_call_s=step_call)
    info = {**{m: {"rows": c.rows, "rms_log_error": round(c.rms_log_error, 4)} for m, c in curves.items()},
            "factors": {"rows": factors.rows, "rms_log_error": round(factors.rms_log_error, 4)},
            **({"factor_step": {"rows": step_rows, "rms_log_error": round(step_rms, 4)}} if step_rate else {}),
            # The measured counterpart of solver_to_gemm: LAPACK's Cholesky inverse does n^3 FLOPs.
            "cpu_solver_to_gemm": round(curves["inverse"].curve.rate_n3_per_s / factors.gemm_flops_per_s, 3)}
    return device, info


def _thread_counts(table: pd.DataFrame) -> list[int]:
    """Thread counts with both solver rows and factor rows."""
    out = []
    for th in sorted(table["threads"].unique()):
        rows = table[table["threads"] == th]
        if all(len(solver_rows(rows, m, None)[0]) >= 3 for m in SOLVER_KERNELS) and len(factor_design(rows)) >= 4:
            out.append(int(th))
    return out


def fit_kernel_params(data: Path) -> KernelParams:
    """configs/perf/kfac_kernels.json's parameters from the tables under ``data/measurements`` and
    SuperBench's launch latencies.

    Raises:
        ValueError: without a CPU table (the shape is fitted on it).
    """
    paths = table_paths(data)
    if "cpu" not in paths:
        raise ValueError(f"no data/measurements/kfac-kernels-cpu.csv under {data}")
    tables = {dev: load_table(p) for dev, p in paths.items()}
    cpu = tables["cpu"]
    cpu_threads = _thread_counts(cpu)
    shape, shape_rms = fit_shape([solver_rows(cpu, m, th) for th in cpu_threads for m in SOLVER_KERNELS])
    measured: dict[str, dict[str, MeasuredDevice]] = {}
    fits: dict[str, Any] = {}
    for dev, table in tables.items():
        counts: list[int | None] = list(cpu_threads) if dev == "cpu" else [None]
        for th in counts:
            m, info = fit_device(table, shape, th)
            key = str(th) if th is not None else "all"
            measured.setdefault(dev, {})[key] = m
            fits[f"{dev}/{key}"] = info
    event_s, wall_s, launch_rows = superbench_launch_s(data)
    central = GpuAssumptions(sync_s=round(wall_s, 7), launch_gap_s=round(event_s, 7))
    # The GPU phase constants: fitted on PipeFisher's per-phase block timings (srift/fitting/kfac_phases.py).
    from srift.fitting import kfac_phases

    phase_fit: dict[str, Any] = {}
    if (Path(data) / kfac_phases.DATA_DIR / kfac_phases.CSV).exists():  # a data folder without them keeps the defaults
        rows = kfac_phases.load_rows(data)
        central = kfac_phases.fit_all(rows, central, shape)
        central = dataclasses.replace(central, **{k: float(f"{v:.4g}") for k, v in kfac_phases.fitted_constants(central).items()})
        phase_fit = {"rows": int(len(rows)), "data": f"data/{kfac_phases.DATA_DIR}/{kfac_phases.CSV}", "in_sample_mape_pct": {
            p: round(kfac_phases.mape(kfac_phases.predict(rows, p, central, shape), rows, p), 1) for p in kfac_phases.PHASES}}
    meta = {
        "tables": {dev: f"data/measurements/{p.name}" for dev, p in paths.items()},
        "fit": {"shape": {"value": round(shape, 4), "rms_log_error": round(shape_rms, 4),
                          "curves": [f"{m} x {th} thread(s)" for th in cpu_threads for m in SOLVER_KERNELS]},
                **fits},
        "gpu_assumptions": {"sources": ASSUMPTION_SOURCES, "superbench_launch_rows": launch_rows,
                            "phase_fit": phase_fit},
        "model": ("solver: latency + column_s n + n^3 / (rate e(n)), e(n) = 1/(1 + (n_half/n)^shape); factor: call + "
                  "copy bytes / memory rate + max(FLOPs / gemm rate, bytes / memory rate)"),
        "method": "least squares on log(model / measured); rows with p90 > 2 p10 left out; shape: grid + refine, jointly on the CPU curves",
    }
    return KernelParams(round(shape, 4), measured, central, meta)


def params_document(params: KernelParams, today: str) -> dict[str, Any]:
    """The JSON document of ``params`` (schema first, the fit date added)."""
    doc = params.to_dict()
    doc["fitted_on"] = today
    assert doc["schema"] == PARAMS_SCHEMA
    return doc
