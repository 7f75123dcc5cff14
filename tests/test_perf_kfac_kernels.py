"""The K-FAC kernel model (srift/perf/kfac_kernels.py) on hand-computed cases, its derivation for
GPUs without a table, and its fit (srift/fitting/kfac_kernels.py): synthetic tables it must
recover, a GPU table dropped in beside the CPU's, and the shipped parameters against the shipped
tables. None of this needs torch."""

from __future__ import annotations

import csv
import dataclasses
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from srift.errors import SriftError
from srift.fitting import kfac_kernels as fit
from srift.hardware import gpu
from srift.perf.compute import kernel_rates
from srift.perf.kfac_kernels import (
    DeviceKernels, GpuAssumptions, KernelParams, MeasuredDevice, SolverCurve, derive_gpu, device_kernels, gpu_inverse_curve,
    load_params,
)

ROOT = Path(__file__).resolve().parents[1]
FLAT = SolverCurve(latency_s=0.0, rate_n3_per_s=1e9, n_half=0.0, shape=1.0)  # t = n^3 / 1e9


def kernels(**kw) -> DeviceKernels:
    base = dict(device="test", basis="test", inverse=FLAT, eigen=FLAT, gemm_flops_per_s=1e9, memory_bytes_per_s=1e9,
                call_s=1e-5, sync_s=2e-6)
    base.update(kw)
    return DeviceKernels(**base)


# ---- solver curves -------------------------------------------------------------------------
def test_solver_curve_latency_throughput_and_half_size():
    c = SolverCurve(latency_s=1e-4, rate_n3_per_s=1e9, n_half=100.0, shape=1.0)
    # n = n_half: half the asymptotic rate -> 1e6 n^3 at 5e8 per second = 2 ms, plus the latency.
    assert c.time_s(100) == pytest.approx(1e-4 + 2e-3)
    # n = 400: e = 1 / (1 + 1/4) = 0.8 -> 6.4e7 / 8e8 = 80 ms.
    assert c.time_s(400) == pytest.approx(1e-4 + 0.08)
    # shape 2 at n = 200: e = 1 / (1 + 0.25) -> 8e6 / 8e8 = 10 ms; a cost per column adds 1 us x 200.
    c2 = SolverCurve(latency_s=0.0, rate_n3_per_s=1e9, n_half=100.0, shape=2.0, column_s=1e-6)
    assert c2.time_s(200) == pytest.approx(0.01 + 2e-4)
    with pytest.raises(ValueError):
        c.time_s(0)
    with pytest.raises(SriftError, match="out of range"):
        SolverCurve(latency_s=-1.0, rate_n3_per_s=1e9, n_half=1.0, shape=1.0)


def test_methods_pick_their_curve():
    k = kernels(eigen=SolverCurve(0.0, 1e8, 0.0, 1.0))
    assert k.invert_s(100) == pytest.approx(1e-3)
    assert k.invert_s(100, "eigen") == pytest.approx(1e-2)
    with pytest.raises(SriftError, match="inverse method"):
        k.invert_s(100, "lu")


# ---- factors and preconditioning -----------------------------------------------------------
def test_factor_a_of_a_convolution_unfolds_then_forms_the_gram_product():
    k = kernels()
    # 1000 rows of 10 columns from 500 input elements: unfold reads 4 x 500 and writes, reads and
    # writes the 40 000 unfolded bytes; the d x d work moves 24 x 100 bytes; the GEMM does
    # 2 x 1000 x 100 FLOPs (compute-bound: 2e5 FLOPs / 1e9 > 4e4 bytes / 1e9).
    expected = 1e-5 + (2000 + 3 * 40_000 + 2400) / 1e9 + 2e5 / 1e9
    assert k.factor_a_s(1000, 10, unfold=True, input_elements=500) == pytest.approx(expected)
    # A Linear's rows are a view: no unfold; a bias adds a column sum (40 000) and a copy (8 x 100).
    assert k.factor_a_s(1000, 10, unfold=False, bias=True) == pytest.approx(1e-5 + (40_000 + 800 + 2400) / 1e9 + 2e-4)
    # Half-precision inputs are cast to fp32 first: 2 + 4 bytes per input element.
    assert k.factor_a_s(1000, 10, unfold=True, input_elements=500, half_input=True) == pytest.approx(expected + 3000 / 1e9)


def test_factor_gram_product_is_memory_bound_below_the_ridge():
    # Arithmetic intensity d/2 FLOP per byte: at d = 4 (2 FLOP/byte) on a device with a ridge of
    # 10 FLOP/byte the product reads 4 x 1e6 x 4 bytes at 1e9 B/s rather than computing 3.2e7 FLOPs at 1e10.
    k = kernels(gemm_flops_per_s=1e10, call_s=0.0)
    rows, d = 1e6, 4
    assert k.gemm_s(2 * rows * d**2, 4 * rows * d) == pytest.approx(16e6 / 1e9)
    assert k.factor_g_s(rows, d, copy=False) == pytest.approx((24 * 16 + 16e6) / 1e9)
    # A convolution's gradient is copied to rows first: read + write of its 16 MB.
    assert k.factor_g_s(rows, d, copy=True) == pytest.approx((24 * 16 + 3 * 16e6) / 1e9)


def test_step_and_preconditioning():
    k = kernels()
    # step(): pack, fused-buffer copy and division, unpack, running average: 84 bytes per element.
    assert k.factor_step_s(100) == pytest.approx(1e-5 + 84 * 1e4 / 1e9)
    # G^-1 grad A^-1 of a 20 x 30 block: 2 x 30 x 20 x 50 = 60 000 FLOPs; the GEMMs read the block
    # twice and both square matrices (4 x (2 x 600 + 900 + 400) = 10 000 bytes: compute-bound
    # 6e-5 s > 1e-5 s); 8 passes over the 2 400-byte block; a call and a host read.
    assert k.precondition_s(30, 20) == pytest.approx(1e-5 + 2e-6 + 6e-5 + 8 * 2400 / 1e9)
    # eigen: four GEMMs and eleven passes.
    assert k.precondition_s(30, 20, "eigen") == pytest.approx(1e-5 + 2e-6 + 1.2e-4 + 11 * 2400 / 1e9)


# ---- GPUs without a table --------------------------------------------------------------------
def test_a_gpu_without_a_table_derives_its_figures_from_its_datasheet():
    a = GpuAssumptions(inverse_flops_per_n3=2.0, solver_to_gemm=0.5, eigen_bytes_per_n3=1.0, eigen_flops_per_n3=3.0,
                       tile=100.0, latency_passes=2.0, sync_s=1e-5, eigen_column_launches=1.0, launch_gap_s=4e-6,
                       factor_gemm_efficiency=0.9, precondition_gemm_efficiency=0.8, solver_efficiency=0.5,
                       solver_cycles_per_column=4000.0, call_s=2e-5)
    k = derive_gpu("V100-16GB", "fp32", 1.5, a)
    r = kernel_rates("V100-16GB", "fp32")
    spec = gpu("V100-16GB")  # 15.7 TFLOP/s FP32, 1530 MHz boost, no power cap
    assert k.gemm_flops_per_s == pytest.approx(0.9 * 15.7e12) and k.precondition_flops_per_s == pytest.approx(0.8 * 15.7e12)
    assert k.memory_bytes_per_s == r.memory_bytes_per_s and k.call_s == 2e-5
    # Cholesky inverse (the GPU curve fitted on PipeFisher's timings): 2 n^3 FLOPs at half the FP32
    # peak, 4000 cycles per column at 1530 MHz, a sync; no rise of throughput with n.
    n = 1024
    assert k.inverse == gpu_inverse_curve("V100-16GB", 1.5, a) and k.inverse.n_half == 0.0
    assert k.invert_s(n) == pytest.approx(1e-5 + 4000 * n / 1530e6 + 2.0 * n**3 / (0.5 * 15.7e12))
    assert k.invert_s(64) == pytest.approx(1e-5 + 4000 * 64 / 1530e6 + 2.0 * 64**3 / (0.5 * 15.7e12))
    # eigh (no GPU measurement): from the compute model; half throughput at 100 x sqrt(80 SMs).
    solver = 0.5 * r.matmul_flops_per_s
    assert 1 / k.eigen.rate_n3_per_s == pytest.approx(1.0 / r.memory_bytes_per_s + 3.0 / solver)
    assert k.eigen.n_half == pytest.approx(100 * math.sqrt(spec.sm_count)) and k.eigen.shape == 1.5
    assert k.eigen.latency_s == pytest.approx(2 * r.launch_s + 1e-5) and k.eigen.column_s == pytest.approx(4e-6)
    # K-FAC's GEMMs stay FP32 under amp (autocast is off in the hooks) and under tf32 (srift's K-FAC
    # turns TF32 off around them: review item P3 of issue 28).
    fp32 = derive_gpu("A100-80GB", "fp32", 1.5, a).gemm_flops_per_s
    assert fp32 == pytest.approx(0.9 * gpu("A100-80GB").fp32_tflops * 1e12 / gpu("A100-80GB").clock_derate)
    assert derive_gpu("A100-80GB", "amp", 1.5, a).gemm_flops_per_s == fp32
    assert derive_gpu("A100-80GB", "tf32", 1.5, a).gemm_flops_per_s == fp32


def test_a_slower_solver_assumption_slows_every_inversion():
    central = device_kernels("RTX 2080 Ti")
    shipped = load_params().gpu_assumptions
    slow = device_kernels("RTX 2080 Ti", assumptions=dataclasses.replace(shipped, solver_efficiency=shipped.solver_efficiency / 2))
    for n in (256, 1024, 4608):
        assert slow.invert_s(n) > central.invert_s(n)
    # At large n the cubic term dominates: half the rate is almost twice the time.
    assert slow.invert_s(32768) / central.invert_s(32768) == pytest.approx(2.0, rel=0.02)
    # eigh's rate follows solver_to_gemm.
    slow_eigh = device_kernels("RTX 2080 Ti", assumptions=dataclasses.replace(shipped, solver_to_gemm=0.35))
    assert slow_eigh.invert_s(4608, "eigen") > central.invert_s(4608, "eigen")
    assert slow_eigh.invert_s(4608) == central.invert_s(4608)


def test_measured_tables_are_used_where_they_exist():
    curve = SolverCurve(1e-5, 1e10, 100.0, 1.4)
    m = MeasuredDevice(curve, curve, 2e12, 3e11, 1e-5, 1e-5)
    params = KernelParams(1.4, {"cpu": {"1": m, "2": m}, "H100": {"all": m}})
    h100 = device_kernels("h100", params=params)
    assert h100.basis.startswith("measured") and h100.inverse == curve and h100.gemm_flops_per_s == 2e12
    assert device_kernels("cpu", threads=2, params=params).basis.endswith("(cpu, 2 thread(s))")
    with pytest.raises(SriftError, match="4 CPU thread"):
        device_kernels("cpu", threads=4, params=params)
    # Another GPU is derived; asking for assumptions overrides a table (sensitivity studies).
    assert device_kernels("A100-80GB", params=params).basis.startswith("derived")
    assert device_kernels("H100", params=params, assumptions=GpuAssumptions()).basis.startswith("derived")


# ---- the fit ------------------------------------------------------------------------------------
def test_fit_curve_recovers_a_known_curve():
    true = SolverCurve(latency_s=5e-5, rate_n3_per_s=8e10, n_half=400.0, shape=1.3)
    n = np.array([64, 128, 256, 512, 1024, 2048, 4096], dtype=float)
    t = np.array([true.time_s(x) for x in n])
    got = fit.fit_curve(n, t, 1.3)
    assert got.rms_log_error < 1e-6
    assert got.curve.rate_n3_per_s == pytest.approx(8e10, rel=1e-4) and got.curve.n_half == pytest.approx(400, rel=1e-4)
    assert got.curve.latency_s == pytest.approx(5e-5, rel=1e-3)


def _write_table(path: Path, inverse: SolverCurve, eigen: SolverCurve, gemm: float, mem: float, threads: int = 1) -> None:
    """A synthetic table in scripts/measure_kfac_kernels.py's columns, timed by the model itself."""
    k = DeviceKernels("x", "x", inverse, eigen, gemm, mem, 0.0)
    rows = []
    for n in (64, 128, 256, 512, 1024, 2048):
        for kernel, c in (("cholesky_inverse", inverse), ("eigh", eigen)):
            t = c.time_s(n)
            rows.append([kernel, n, 1, t, t, t, 5, threads, "", "", "", ""])
    for cin, hw, d_out in ((16, 32, 32), (64, 16, 128), (128, 8, 256), (32, 28, 64)):
        label = f"net conv (8, {cin}, {hw}, {hw})"
        r, width = 8 * hw * hw, cin * 9
        elems = 8 * cin * hw * hw
        unfold = (4 * elems + 3 * 4 * r * width) / mem
        fa = k.factor_a_s(r, width, True, elems)
        fg = k.factor_g_s(r, d_out, True)
        rows += [["factor_a", width, 1, fa, fa, fa, 5, threads, label, r, 4 * r * width, 2 * r * width**2],
                 ["unfold", width, 1, unfold, unfold, unfold, 5, threads, label, r, 4 * r * width, ""],
                 ["factor_g", d_out, 1, fg, fg, fg, 5, threads, label, r, 4 * r * d_out, 2 * r * d_out**2]]
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if path.stat().st_size == 0:
            w.writerow(["kernel", "n", "batch", "median_s", "p10_s", "p90_s", "repeats", "threads", "layer", "rows", "bytes", "flop"])
        w.writerows(rows)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    (tmp_path / "measurements").mkdir()
    shutil.copytree(ROOT / "data" / "superbench-results", tmp_path / "superbench-results",
                    ignore=shutil.ignore_patterns("v0.*"))
    return tmp_path


@pytest.mark.slow
def test_a_gpu_table_dropped_in_is_fitted_and_used(data_dir: Path):
    cpu = data_dir / "measurements" / "kfac-kernels-cpu.csv"
    cpu.touch()
    for threads, scale in ((1, 1.0), (2, 1.8)):
        _write_table(cpu, SolverCurve(0.0, 5e10 * scale, 300.0, 1.2), SolverCurve(0.0, 1e10 * scale, 200.0, 1.2),
                     6e10 * scale, 3e9 * scale, threads)
    gpu_table = data_dir / "measurements" / "kfac-kernels-h100.csv"
    gpu_table.touch()
    _write_table(gpu_table, SolverCurve(8e-5, 5e12, 1500.0, 1.2), SolverCurve(8e-5, 4e11, 1500.0, 1.2), 4e13, 2e12)
    params = fit.fit_kernel_params(data_dir)
    assert params.shape == pytest.approx(1.2, rel=0.02)
    assert set(params.measured) == {"cpu", "H100"} and set(params.measured["cpu"]) == {"1", "2"}
    h100 = device_kernels("H100", params=params)
    assert h100.basis == "measured: data/measurements/kfac-kernels-H100.csv (H100)"
    assert h100.inverse.rate_n3_per_s == pytest.approx(5e12, rel=0.05)
    assert h100.gemm_flops_per_s == pytest.approx(4e13, rel=0.02)
    assert h100.memory_bytes_per_s == pytest.approx(2e12, rel=0.02)
    # The assumptions' launch figures come from SuperBench's kernel-launch rows (milliseconds there).
    assert 5e-6 < params.gpu_assumptions.launch_gap_s < 6e-6 and 9e-6 < params.gpu_assumptions.sync_s < 1.1e-5
    # The document round-trips.
    again = KernelParams.from_dict(fit.params_document(params, "today"))
    assert again.measured["H100"]["all"] == params.measured["H100"]["all"] and again.shape == params.shape


@pytest.mark.slow
def test_shipped_parameters_are_the_fit_of_the_shipped_tables():
    fresh = fit.fit_kernel_params(ROOT / "data")
    shipped = load_params(str(ROOT / "configs" / "perf" / "kfac_kernels.json"))
    assert shipped.shape == pytest.approx(fresh.shape, rel=1e-3)
    assert set(shipped.measured) == set(fresh.measured)
    for dev, per in fresh.measured.items():
        for threads, m in per.items():
            s = shipped.measured[dev][threads]
            assert s.inverse.rate_n3_per_s == pytest.approx(m.inverse.rate_n3_per_s, rel=1e-3)
            assert s.gemm_flops_per_s == pytest.approx(m.gemm_flops_per_s, rel=1e-3)
    # The CPU's solver curves follow the model's form closely (the factor kernels less so: see docs/kfac.md).
    assert shipped.meta["fit"]["shape"]["rms_log_error"] < 0.15
