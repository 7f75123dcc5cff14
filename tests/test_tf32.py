"""PyTorch's TF32 default: ``fp32`` runs convolutions in TF32 and matmuls in FP32 on Ampere and
newer, ``fp32-strict`` runs everything in FP32, ``tf32`` both in TF32; the profiler records both
flags and labels the run from them."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from srift.cli import main
from srift.job import Job
from srift.perf import compute as C
from srift.profile import Profile
from srift.profiling import assemble
from srift.zoo import load_builtin_profile


def test_math_mode_per_layer_kind():
    assert [C.math_mode("fp32", k) for k in ("conv", "matmul", "attention", "norm")] == ["tf32", "fp32", "fp32", "fp32"]
    assert {C.math_mode("fp32-strict", k) for k in C.KINDS} == {"fp32"}
    assert {C.math_mode("tf32", k) for k in C.KINDS} == {"tf32"}
    assert {C.math_mode("amp", k) for k in C.KINDS} == {"amp"}


def test_fp32_convolutions_run_like_tf32_and_matmuls_like_strict_fp32():
    prof = load_builtin_profile("resnet50", batch_size=64)
    kinds = np.array([C.layer_kind(l.type) for l in prof.layers])
    t = {p: C.layer_times(prof, "A100-40GB", p) for p in ("fp32", "fp32-strict", "tf32")}
    conv, fc = kinds == "conv", kinds == "matmul"
    np.testing.assert_allclose(t["fp32"].bwd_s[conv], t["tf32"].bwd_s[conv])
    np.testing.assert_allclose(t["fp32"].bwd_s[fc], t["fp32-strict"].bwd_s[fc])
    assert t["fp32-strict"].bwd_s[conv].sum() > 1.3 * t["tf32"].bwd_s[conv].sum()
    # Memory-bound layers (BatchNorm, ReLU) do not care about the TF32 flags.
    other = ~(conv | fc)
    np.testing.assert_allclose(t["fp32"].bwd_s[other], t["fp32-strict"].bwd_s[other])
    # Before Ampere there are no TF32 units: the three are the same.
    v100 = [C.layer_times(prof, "V100-16GB", p).total_s for p in ("fp32", "fp32-strict", "tf32")]
    assert v100[0] == pytest.approx(v100[1]) == pytest.approx(v100[2])


@pytest.mark.slow
def test_p4d_fp32_reflects_tf32_convolutions_and_fp32_strict_does_not(capsys):
    def throughput(precision: str) -> float:
        assert main(["predict", "--model", "resnet50", "--instance", "p4d.24xlarge", "--precision", precision,
                     "--data-loading", "synthetic", "--format", "json"]) == 0
        return json.loads(capsys.readouterr().out)["throughput_samples_per_s"]

    fp32, strict, tf32 = throughput("fp32"), throughput("fp32-strict"), throughput("tf32")
    # ResNet-50 is convolutions but for its classifier: PyTorch's default runs at TF32 speed, and
    # strict FP32 far below it (an A100 has 19.5 TFLOP/s of FP32 against 156 of TF32; the
    # memory-bound layers cap the gain).
    assert fp32 == pytest.approx(tf32, rel=0.01)
    assert strict < 0.7 * tf32
    # BERT is matmuls: PyTorch's default fp32 runs them in FP32.
    bert = load_builtin_profile("bert-large-squad", batch_size=8)
    assert C.layer_times(bert, "A100-40GB", "fp32").total_s == pytest.approx(C.layer_times(bert, "A100-40GB", "fp32-strict").total_s)


def test_precision_label_from_the_two_flags():
    assert C.precision_label(cudnn_tf32=True, matmul_tf32=False) == "fp32"  # PyTorch's default
    assert C.precision_label(cudnn_tf32=False, matmul_tf32=False) == "fp32-strict"
    assert C.precision_label(cudnn_tf32=True, matmul_tf32=True) == "tf32"
    assert C.precision_label(cudnn_tf32=False, matmul_tf32=True) == "tf32"


@pytest.fixture
def tf32_switches():
    """Set PyTorch's two TF32 flags in a test; both restored afterwards."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32

    def set_(cudnn: bool, matmul: bool) -> None:
        torch.backends.cudnn.allow_tf32 = cudnn
        torch.backends.cuda.matmul.allow_tf32 = matmul

    yield set_
    set_(*saved)


def test_the_profiler_records_both_flags_and_labels_the_run(tf32_switches):
    m = types.SimpleNamespace(timer=types.SimpleNamespace(autocast=None), clock_kind="cuda", model=torch.nn.Linear(1, 1))
    tf32_switches(True, False)  # PyTorch's default
    notes: list[str] = []
    assert assemble._precision(m, notes) == "fp32"
    flags = assemble.tf32_flags()
    assert flags["cudnn.allow_tf32"] == "True" and flags["cuda.matmul.allow_tf32"] == "False"
    assert "float32_matmul_precision" in flags and "cudnn.allow_tf32" in assemble._versions()
    tf32_switches(False, False)
    assert assemble._precision(m, notes) == "fp32-strict"
    tf32_switches(False, True)
    assert assemble._precision(m, notes) == "tf32" and "not for convolutions" in notes[-1]
    tf32_switches(True, True)
    assert assemble._precision(m, notes) == "tf32" and assemble.tf32_flags()["cuda.matmul.allow_tf32"] == "True"
    cpu = types.SimpleNamespace(timer=types.SimpleNamespace(autocast=None), clock_kind="cpu", model=torch.nn.Linear(1, 1))
    assert assemble._precision(cpu, notes) == "fp32"


@pytest.mark.slow
def test_profiles_of_either_fp32_load_and_jobs_take_fp32_strict(tmp_path):
    old = load_builtin_profile("resnet50")
    assert old.precision == "fp32"  # written before fp32-strict existed: PyTorch's default
    path = tmp_path / "strict.yaml"
    Profile("toy", 8, "fp32-strict", old.layers[:3]).save(path)
    assert Profile.load(path).precision == "fp32-strict"
    assert Job(precision="fp32-strict").precision == "fp32-strict"
