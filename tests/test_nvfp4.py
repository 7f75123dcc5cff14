"""``--fp8 nvfp4``: Transformer Engine's NVFP4 recipe on Blackwell, priced by hand (4-bit values with an
E4M3 scale per 16, the GEMMs at the dense FP4 peak, one quantizing pass per GEMM operand) and refused
where the GPUs have no FP4 tensor cores."""

from __future__ import annotations

import json

import pytest

from srift.hardware import gpu as gpu_spec
from srift.job import MXFP8, NVFP4
from srift.perf.compute import kernel_rates, layer_times
from srift.perf.fp8 import (
    fp8_cast_bytes_per_element, fp8_peak_ratio, fp8_saved_bytes, fp8_times, fp8_unsupported, fp8_weight_cache_bytes,
    gemm_peak_flops,
)
from srift.perf import compute as C
from srift.zoo import llm_arch
from srift.zoo.llm import decoder_profile

B200_8 = ["predict", "--model", "llama3-8b", "--instance", "p6-b200.48xlarge", "--layout", "tp=1,pp=1,cp=1",
          "--global-batch-size", "8", "--seq-len", "4096"]


def test_nvfp4_bytes_per_element_by_hand() -> None:
    # E2M1: half a byte; one E4M3 scale (1 byte) per 16 values.
    assert fp8_saved_bytes(NVFP4) == pytest.approx(0.5 + 1 / 16)
    # Weights: a rowwise and a columnwise copy, each scaled per 16 x 16 block.
    assert fp8_weight_cache_bytes(NVFP4) == pytest.approx(2 * (0.5 + 1 / 256))
    # The quantizing pass: read bf16 (2), write two 4-bit copies with scales (2 x 0.5625), amax read (2).
    assert fp8_cast_bytes_per_element(NVFP4) == pytest.approx(2 + 2 * 0.5625 + 2)


def test_the_gemms_run_at_the_datasheets_dense_fp4_peak() -> None:
    b200 = gpu_spec("B200")
    assert b200.fp4_tflops == 9000.0  # HGX B200: 144 PFLOPS sparse FP4 / 8 GPUs / 2
    assert gemm_peak_flops(b200, NVFP4) == 9000e12 and gemm_peak_flops(b200, MXFP8) == 4500e12
    assert fp8_peak_ratio("B200", NVFP4) == pytest.approx(b200.peak_flops("bf16") / 9000e12)
    assert "no NVFP4 tensor cores" in str(fp8_unsupported("H100", NVFP4))
    assert fp8_unsupported("GB200", NVFP4) is None


def test_a_linear_layers_nvfp4_time_by_hand() -> None:
    arch = llm_arch("llama3-8b")
    prof = decoder_profile(arch, batch_size=1, seq_len=4096, precision="bf16")
    times = layer_times(prof, "B200", "bf16", C.load_params())
    fwd, bwd = fp8_times(prof, times, "B200", NVFP4)
    rates = kernel_rates("B200", "bf16")
    ratio = gpu_spec("B200").peak_flops("bf16") / 9000e12
    i = next(k for k, layer in enumerate(prof.layers) if layer.name.endswith("q_proj"))
    layer = prof.layers[i]
    rows = 4096  # batch 1 x 4096 tokens
    cast = 5.125 / rates.memory_bytes_per_s
    assert fwd[i] == pytest.approx((times.fwd_s[i] - rates.launch_s) * ratio + rates.launch_s + rows * layer.kfac_a_dim * cast)
    assert bwd[i] == pytest.approx((times.bwd_s[i] - rates.launch_s) * ratio + rates.launch_s + rows * layer.kfac_g_dim * cast)
    norm = next(k for k, layer in enumerate(prof.layers) if layer.type != "Linear")
    assert (fwd[norm], bwd[norm]) == (times.fwd_s[norm], times.bwd_s[norm])  # not a GEMM: bf16 as it was


def _json(srift_cli, args: list[str]) -> dict:
    code, out = srift_cli([*args, "--format", "json"])
    assert code == 0, out
    return json.loads(out)


def test_nvfp4_is_faster_than_mxfp8_on_b200_and_says_it_is_unvalidated(srift_cli) -> None:
    bf16, mx, fp4 = (_json(srift_cli, [*B200_8, *extra]) for extra in ([], ["--fp8", "mxfp8"], ["--fp8", "nvfp4"]))
    assert fp4["iteration_time_s"] < mx["iteration_time_s"] < bf16["iteration_time_s"]
    assert fp4["fp8"] == "nvfp4" and fp4["beyond_validated"] == ["NVFP4 GEMMs (no measured run)"]
    assert mx["beyond_validated"] == []
    assert any(n.startswith("NVFP4 GEMMs (Transformer Engine's NVFP4BlockScaling)") for n in fp4["notes"])
    # The weight workspace of 4-bit copies is smaller than MXFP8's 8-bit one.
    assert fp4["memory_breakdown_bytes"]["weights"] < mx["memory_breakdown_bytes"]["weights"]


@pytest.mark.parametrize("extra, says", [
    (["--instance", "p5.48xlarge"], "no NVFP4 tensor cores"),
    (["--parallelism", "fsdp"], "not modelled"),
])
def test_nvfp4_where_it_does_not_run_is_refused(srift_cli, extra: list[str], says: str) -> None:
    args = [*B200_8, "--fp8", "nvfp4"]
    if extra[0] == "--instance":
        args[args.index("--instance") + 1] = extra[1]
    else:
        args += extra
    code, out = srift_cli(args)
    assert code == 2 and says in out and "To fix:" in out and "Traceback" not in out
