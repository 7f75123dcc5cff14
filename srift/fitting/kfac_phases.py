"""K-FAC's phases on GPUs against PipeFisher's per-layer measurements (data/kfac-layer-phases).

PipeFisher (kazukiosawa/pipe-fisher @16ee8dbe, ``scripts/prof_kron.py``) timed one transformer
block (BERT, T5 or OPT) on P100, V100 and RTX 3090 at batch 1-128 with ASDL's K-FAC: the Kronecker
factors of every ``nn.Linear``, their inversion and the preconditioning of the gradient, fp32. As
ASDL (asdfghjkl 0.1a5 on PyPI, ``asdl/operations/linear.py`` and ``asdl/symmatrix.py``; PipeFisher
pins it as a git submodule, not a release) computes them:

* a Linear's input ``B x T x d_in`` is flattened to ``B*T`` rows (``preprocess_in_data``): the
  factors are ``A = x^T x`` (``d_in x d_in``, no bias column for ``cov_kron``) and
  ``G = g^T g`` (``d_out x d_out``) over every token, one GEMM each;
* each factor is inverted by ``torch.linalg.cholesky`` + ``torch.cholesky_inverse`` after
  pi-damping (``cholesky_inv``), one factor at a time;
* the gradient is preconditioned as ``G^-1 grad A^-1`` (two GEMMs per Linear).

A block's Linears: query, key, value and output projections (``d x d``), the two feed-forward
Linears (``d x d_ff``, ``d_ff x d``); ``BLOCK_DIMS`` has each model's ``d`` and ``d_ff`` (their
Hugging Face configs), and the factors' memory in the data (``mem_kron_factors_mib``) is exactly
``4 sum(d_A^2 + d_G^2)`` bytes of those shapes for all 109 rows (tests check it).

The phases are priced with srift's own kernel model (``srift.perf.kfac_kernels.derive_gpu``: the
GPU's datasheet FP32 peak and clock from configs/gpus.yaml); its five K-FAC constants
(``FITTED``) are fitted here by least squares on the log of the times, each phase on its own rows,
and validated leave-one-GPU-out and leave-one-model-out (``held_out``). The inversion is priced
with ``gpu_inverse_curve``, the curve every GPU prediction without a measured table uses.

ASDL's ``update_inv`` reads ``pi`` and ``torch.all(F == 0)`` on the host and ``torch.linalg.cholesky``
checks its result there: about 2.5 host round trips per factor where the curve charges one
(``sync_s``, 10 us): under 1 % of a measured factor's 2-20 ms, so the same curve stands for both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from srift.hardware import find_gpu
from srift.perf.kfac_kernels import DeviceKernels, GpuAssumptions, derive_gpu

DATA_DIR = "kfac-layer-phases"
CSV = "pipefisher-kfac-layer-phases.csv"
PhaseName = Literal["factors", "inversion", "preconditioning"]
PHASES: tuple[PhaseName, ...] = ("factors", "inversion", "preconditioning")
MEASURED: dict[PhaseName, str] = {"factors": "time_kron_factor_ms", "inversion": "time_inverse_ms", "preconditioning": "time_precondition_ms"}
# d_model and d_ff of the profiled block (hidden_size / intermediate_size, d_model / d_ff,
# hidden_size / ffn_dim of each model's Hugging Face config).
BLOCK_DIMS: dict[str, tuple[int, int]] = {
    "bert-base": (768, 3072), "bert-large": (1024, 4096), "t5-base": (768, 3072), "t5-large": (1024, 4096),
    "opt-125m": (768, 3072), "opt-350m": (1024, 4096),
}
# The constants fitted per phase (GpuAssumptions fields), with where the fit starts.
FITTED: dict[PhaseName, dict[str, float]] = {
    "factors": {"factor_gemm_efficiency": 0.8, "call_s": 1e-4},
    "inversion": {"solver_efficiency": 0.5, "solver_cycles_per_column": 3000.0},
    "preconditioning": {"precondition_gemm_efficiency": 0.7},
}


@dataclass(frozen=True)
class BlockLinear:
    """One ``nn.Linear`` of a block: its factors' dimensions."""

    d_in: int
    d_out: int


def block_linears(model: str) -> list[BlockLinear]:
    """The Linears of one PipeFisher block (attention q, k, v, o; the two feed-forward layers)."""
    d, ff = BLOCK_DIMS[model]
    return [BlockLinear(d, d)] * 4 + [BlockLinear(d, ff), BlockLinear(ff, d)]


def factor_bytes(model: str) -> float:
    """Bytes of one block's running factors in fp32, as ASDL keeps them (no bias column)."""
    return 4.0 * sum(l.d_in**2 + l.d_out**2 for l in block_linears(model))


def load_rows(data: Path) -> pd.DataFrame:
    """The rows with the canonical GPU (``gpu``) and the factors' rows per step (``tokens``)."""
    rows = pd.read_csv(Path(data) / DATA_DIR / CSV)
    rows["gpu"] = rows["gpu_label_in_filename"].map(find_gpu)
    rows["model"] = rows["model_config"]
    rows["tokens"] = rows["batch_size"] * rows["seq_len"]
    # The block's width: the base models (768 / 3072) and the large ones (1024 / 4096) share their
    # factor shapes, so holding one model out leaves its shapes in the fit; holding a width out does not.
    rows["width"] = rows["model"].map(lambda m: BLOCK_DIMS[m][0])
    return rows


def phase_s(k: DeviceKernels, model: str, tokens: float, phase: PhaseName) -> float:
    """Seconds of one K-FAC phase of a block on the kernel model ``k``."""
    lin = block_linears(model)
    if phase == "factors":
        return sum(k.factor_a_s(tokens, l.d_in, False) + k.factor_g_s(tokens, l.d_out, False) for l in lin)
    if phase == "inversion":
        return sum(k.invert_s(l.d_in) + k.invert_s(l.d_out) for l in lin)
    return sum(k.precondition_s(l.d_in, l.d_out) for l in lin)


def predict(rows: pd.DataFrame, phase: PhaseName, assumptions: GpuAssumptions, shape: float) -> np.ndarray:
    """Predicted seconds of ``phase`` for every row, with the kernel model predictions use."""
    kernels = {g: derive_gpu(g, "fp32", shape, assumptions) for g in rows["gpu"].unique()}
    return np.array([phase_s(kernels[r.gpu], r.model, r.tokens, phase) for r in rows.itertuples()])


def fit_phase(rows: pd.DataFrame, phase: PhaseName, base: GpuAssumptions, shape: float) -> GpuAssumptions:
    """``base`` with ``phase``'s constants fitted on ``rows`` (least squares on log time)."""
    names = list(FITTED[phase])
    measured = rows[MEASURED[phase]].to_numpy(float) * 1e-3

    def with_x(x: np.ndarray) -> GpuAssumptions:
        return dataclasses.replace(base, **dict(zip(names, (float(v) for v in np.exp(x)))))

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(predict(rows, phase, with_x(x), shape)) - np.log(measured)

    x0 = np.log([FITTED[phase][n] for n in names])
    return with_x(least_squares(resid, x0, method="trf").x)


def fit_all(rows: pd.DataFrame, base: GpuAssumptions, shape: float) -> GpuAssumptions:
    """Every phase's constants fitted on ``rows`` (factors first: preconditioning shares its call cost)."""
    out = base
    for phase in PHASES:
        out = fit_phase(rows, phase, out, shape)
    return out


def held_out(rows: pd.DataFrame, key: str, base: GpuAssumptions, shape: float) -> dict[PhaseName, np.ndarray]:
    """Per phase, each row's prediction from the constants fitted without the row's ``key`` value."""
    out: dict[PhaseName, np.ndarray] = {p: np.full(len(rows), np.nan) for p in PHASES}
    for _, idx in rows.groupby(key).groups.items():
        pos = rows.index.get_indexer(idx)
        train = rows.drop(index=idx)
        fitted = fit_all(train, base, shape)
        for p in PHASES:
            out[p][pos] = predict(rows.iloc[pos], p, fitted, shape)
    return out


def mape(pred: np.ndarray, rows: pd.DataFrame, phase: PhaseName) -> float:
    measured = rows[MEASURED[phase]].to_numpy(float) * 1e-3
    return float(np.mean(np.abs(pred / measured - 1.0)) * 100.0)


def fitted_constants(assumptions: GpuAssumptions) -> dict[str, float]:
    """The fitted fields of ``assumptions`` by name."""
    return {n: getattr(assumptions, n) for per in FITTED.values() for n in per}


PhaseTable = dict[PhaseName, dict[str, float]]


def validation_table(rows: pd.DataFrame, base: GpuAssumptions, shape: float,
                     fitted: GpuAssumptions | None = None) -> PhaseTable:
    """MAPE % per phase: in-sample (``fitted``, default refitted on every row), leave-one-GPU-out
    (``logo``) and leave-one-model-out (``lomo``), the refits starting from ``base``."""
    fitted = fitted or fit_all(rows, base, shape)
    logo = held_out(rows, "gpu", base, shape)
    lomo = held_out(rows, "model", base, shape)
    table: PhaseTable = {}
    for p in PHASES:
        table[p] = {"fit": mape(predict(rows, p, fitted, shape), rows, p), "logo": mape(logo[p], rows, p), "lomo": mape(lomo[p], rows, p)}
    return table


def by_group(rows: pd.DataFrame, key: str, preds: dict[PhaseName, np.ndarray], phase: PhaseName) -> dict[str, float]:
    """MAPE % of ``preds[phase]`` per value of ``key``."""
    out = {}
    for value, idx in rows.groupby(key).groups.items():
        pos = rows.index.get_indexer(idx)
        out[str(value)] = mape(preds[phase][pos], rows.iloc[pos], phase)
    return out

