"""Which form of the GPU Cholesky inverse PipeFisher's timings support (data/kfac-layer-phases).

Each form has two constants, fitted like the shipped one (least squares on log time over the
inversion rows, srift/fitting/kfac_phases.py) and held out the same ways (the GPU; the block
width, whose models share their factor shapes). Every form charges one host sync per call and
``7 n^3 / 3`` FLOPs at a share ``eff`` of the GPU's FP32 peak; they differ in what else a call costs:

* ``per column`` (shipped, ``gpu_inverse_curve``): ``cycles`` clock cycles per column;
* ``per call``: a fixed ``latency`` per call;
* ``rising throughput``: no extra cost, the throughput rising with ``n`` to half at
  ``tile * sqrt(SMs)`` (the form of the compute-model curve srift used before).

Usage::

    python scripts/kfac_inverse_forms.py
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from srift.fitting import kfac_phases as KP  # noqa: E402
from srift.hardware import gpu as gpu_spec  # noqa: E402
from srift.job import FP32  # noqa: E402
from srift.perf.kfac_kernels import load_params  # noqa: E402

FLOPS_PER_N3 = 7.0 / 3.0
Form = Callable[[str, int, np.ndarray], float]


def _peak(g: str) -> float:
    s = gpu_spec(g)
    return s.peak_flops(FP32) / s.clock_derate


def per_column(g: str, n: int, x: np.ndarray) -> float:
    s = gpu_spec(g)
    eff, cycles = x
    return cycles * n / ((s.sustained_clock_mhz or s.boost_clock_mhz) * 1e6) + FLOPS_PER_N3 * n**3 / (eff * _peak(g))


def per_call(g: str, n: int, x: np.ndarray) -> float:
    eff, latency = x
    return latency + FLOPS_PER_N3 * n**3 / (eff * _peak(g))


def rising(g: str, n: int, x: np.ndarray) -> float:
    eff, tile = x
    half = tile * math.sqrt(gpu_spec(g).sm_count)
    return FLOPS_PER_N3 * n**3 * (1.0 + (half / n) ** load_params().shape) / (eff * _peak(g))


FORMS: dict[str, tuple[Form, tuple[float, float], str]] = {
    "per column (shipped)": (per_column, (0.5, 3000.0), "cycles per column"),
    "per call": (per_call, (0.5, 1e-3), "s per call"),
    "rising throughput": (rising, (0.5, 128.0), "tile"),
}


def predict(rows: pd.DataFrame, form: Form, x: np.ndarray, sync_s: float) -> np.ndarray:
    return np.array([sum(sync_s + form(r.gpu, d, x) for l in KP.block_linears(r.model) for d in (l.d_in, l.d_out))
                     for r in rows.itertuples()])


def fit(rows: pd.DataFrame, form: Form, x0: tuple[float, float], sync_s: float) -> np.ndarray:
    measured = rows["time_inverse_ms"].to_numpy(float) * 1e-3
    res = least_squares(lambda z: np.log(predict(rows, form, np.exp(z), sync_s)) - np.log(measured), np.log(x0))
    return np.exp(res.x)


def mape(rows: pd.DataFrame, pred: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / (rows["time_inverse_ms"].to_numpy(float) * 1e-3) - 1.0)) * 100.0)


def held_out(rows: pd.DataFrame, key: str, form: Form, x0: tuple[float, float], sync_s: float) -> np.ndarray:
    out = np.zeros(len(rows))
    for value in rows[key].unique():
        test = (rows[key] == value).to_numpy()
        out[test] = predict(rows[test], form, fit(rows[~test], form, x0, sync_s), sync_s)
    return out


def main() -> None:
    rows = KP.load_rows(Path(__file__).resolve().parents[1] / "data")
    sync_s = load_params().gpu_assumptions.sync_s
    print(f"PipeFisher's inversion timings ({len(rows)} rows): MAPE % of each form of the GPU Cholesky inverse")
    print(f"{'form':<24}{'fit':>7}{'GPU out':>9}{'width out':>11}   constants (fitted on every row)")
    for name, (form, x0, unit) in FORMS.items():
        x = fit(rows, form, x0, sync_s)
        cells = [mape(rows, predict(rows, form, x, sync_s))] + [mape(rows, held_out(rows, k, form, x0, sync_s)) for k in ("gpu", "width")]
        print(f"{name:<24}" + "".join(f"{c:{w}.1f}" for c, w in zip(cells, (7, 9, 11))) + f"   eff {x[0]:.3g}, {unit} {x[1]:.3g}")


if __name__ == "__main__":
    main()
