"""K-FAC's GPU phases: PipeFisher's block timings (data/kfac-layer-phases), the fitted constants
shipped in configs/perf/kfac_kernels.json, a transformer block's factors priced by hand, and
`srift predict --optimizer kfac` on a zoo transformer."""

from __future__ import annotations

from pathlib import Path

import pytest

from srift import api
from srift.fitting import kfac_phases as KP
from srift.job import Job
from srift.perf.kfac_kernels import DeviceKernels, SolverCurve, device_kernels, load_params
from srift.simulate.breakdown import FACTOR_COMPUTE, INVERSION
from srift.simulate.kfac import kfac_blocks, kfac_memory_bytes
from srift.zoo import load_builtin_profile

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def test_the_factor_memory_pipefisher_reports_is_the_blocks_factor_shapes():
    rows = KP.load_rows(DATA)
    assert len(rows) == 109 and set(rows["gpu"]) == {"P100", "V100-16GB", "RTX-3090"}
    for r in rows.itertuples():
        # bert-base: 10 factors of 768 and 2 of 3072 (q, k, v, o; fc1's G, fc2's A): 94.5 MiB.
        assert KP.factor_bytes(r.model) / 2**20 == pytest.approx(r.mem_kron_factors_mib, abs=1e-9)
    assert KP.factor_bytes("bert-base") == 4 * (10 * 768**2 + 2 * 3072**2)


def test_the_shipped_constants_are_the_fit_of_the_data():
    params = load_params()
    refit = KP.fit_all(KP.load_rows(DATA), params.gpu_assumptions, params.shape)
    for name, value in KP.fitted_constants(refit).items():
        assert getattr(params.gpu_assumptions, name) == pytest.approx(value, rel=2e-3), name


ROUND = DeviceKernels("test", "round numbers", SolverCurve(1e-5, 1e12, 0.0, 1.0, 1e-6), SolverCurve(1e-5, 1e11, 0.0, 1.0),
                      gemm_flops_per_s=1e13, memory_bytes_per_s=1e12, call_s=1e-5, sync_s=2e-6, precondition_flops_per_s=5e12)


def test_a_transformer_blocks_factor_flops_and_bytes_by_hand():
    # bert-base's feed-forward input Linear (768 -> 3072, bias) at batch 2 x 128 tokens: the factors'
    # rows are every token, 256.
    prof = load_builtin_profile("bert-base", 2)
    fc = next(b for b in kfac_blocks(prof) if b.name == "layers.0.fc")
    assert (fc.a_dim, fc.g_dim, fc.rows, fc.width, fc.bias, fc.conv) == (769, 3072, 256.0, 768, True, False)
    # A = [x, 1]^T [x, 1]: 2 x 256 x 768^2 FLOPs at 1e13/s; reads the 256 x 768 fp32 rows (786 432 B)
    # once for the GEMM and once for the bias column; 24 + 8 bytes per element of the 768^2 Gram.
    a_s = 1e-5 + (786_432 + 32 * 768**2) / 1e12 + 2 * 256 * 768**2 / 1e13
    assert ROUND.factor_a_s(fc.rows, fc.width, fc.conv, fc.input_elements, False, fc.bias) == pytest.approx(a_s)
    # G = g^T g over the 256 x 3072 output gradient: 2 x 256 x 3072^2 FLOPs, 24 bytes per element.
    g_s = 1e-5 + 24 * 3072**2 / 1e12 + 2 * 256 * 3072**2 / 1e13
    assert ROUND.factor_g_s(fc.rows, fc.g_dim, fc.conv) == pytest.approx(g_s)
    # Preconditioning G^-1 grad A^-1: 2 x 769 x 3072 x (769 + 3072) FLOPs at its own rate.
    block = 4 * 769 * 3072
    read = 4 * (769**2 + 3072**2) + 2 * block
    pre = 1e-5 + 2e-6 + max(2 * 769 * 3072 * (769 + 3072) / 5e12, read / 1e12) + 8 * block / 1e12
    assert ROUND.precondition_s(769, 3072) == pytest.approx(pre)
    # Factors and inverses of the whole model in fp32.
    assert kfac_memory_bytes(prof) == 8 * sum(b.a_dim**2 + b.g_dim**2 for b in kfac_blocks(prof))


def test_predict_kfac_on_a_zoo_transformer_prices_that_models_factors():
    k = device_kernels("A100-40GB")

    def by_hand(seq: int) -> tuple[float, float]:
        # gpt2's 48 block Linears and its 768 x 50257 head, every token a row of the factors.
        blocks = kfac_blocks(load_builtin_profile("gpt2", 4, seq_len=seq))
        assert len(blocks) == 49 and {b.rows for b in blocks} == {4.0 * seq}
        factors = sum(k.factor_a_s(b.rows, b.width, b.conv, b.input_elements, False, b.bias) + k.factor_g_s(b.rows, b.g_dim, b.conv)
                      + k.factor_step_s(b.a_dim) + k.factor_step_s(b.g_dim) for b in blocks)
        inversion = sum(k.invert_s(d) for b in blocks for d in (b.a_dim, b.g_dim)) + 2 * k.sync_s * len(blocks)
        return factors, inversion

    for seq in (256, 512):
        job = Job(batch_size=4, seq_len=seq, precision="fp32", optimizer="kfac", kfac_strategy="naive")
        phases = dict(api.predict(job, model="gpt2", instance="p4d.24xlarge").prediction.breakdown)
        factors, inversion = by_hand(seq)
        assert phases[FACTOR_COMPUTE] == pytest.approx(factors / job.kfac_factor_steps, rel=1e-6)
        assert phases[INVERSION] == pytest.approx(inversion / job.kfac_inv_steps, rel=1e-6)


def test_the_inversion_predictions_use_is_the_one_validated_on_pipefisher():
    # bert-base's block on the V100, any batch: 10 factors of 768 and 2 of 3072, Cholesky-inverted one
    # by one; PipeFisher measured 49.09-49.19 ms (data/kfac-layer-phases). The curve every V100
    # prediction uses (no measured table) prices it within 10 %.
    k = device_kernels("V100-16GB")
    predicted = 10 * k.invert_s(768) + 2 * k.invert_s(3072)
    rows = KP.load_rows(DATA)
    measured = rows[(rows.model == "bert-base") & (rows.gpu == "V100-16GB")]["time_inverse_ms"] * 1e-3
    assert measured.between(0.049, 0.0492).all() and len(measured) == 7
    assert predicted == pytest.approx(KP.phase_s(k, "bert-base", 128.0, "inversion"))
    assert abs(predicted / measured.mean() - 1) < 0.10
