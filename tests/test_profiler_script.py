"""`srift profile SCRIPT`: real scripts run under the profiler, checked against hand calculation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from srift.cli import main
from srift.profile import Profile

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SRIFT = [sys.executable, "-m", "srift.cli"]


def _srift(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*SRIFT, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _profile(tmp_path: Path, script: Path, *script_args: str, extra: tuple[str, ...] = ()) -> Profile:
    out = tmp_path / "p.yaml"
    res = _srift("profile", str(script), "--warmup", "2", "--iters", "5", "-o", str(out), *extra, "--", *script_args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    prof = Profile.load(out)
    assert prof.iterations == 5
    assert prof.measured
    return prof


@pytest.mark.slow
def test_plain_cnn_first_conv_has_hand_flops_and_every_layer_is_timed(tmp_path: Path) -> None:
    prof = _profile(tmp_path, EXAMPLES / "train_cnn.py", "--batch-size", "8")
    conv1 = prof.layers[0]
    assert (conv1.name, conv1.type) == ("conv1", "Conv2d")
    # 2 FLOPs per multiply-add: B * C_out * H_out * W_out * (C_in * k * k) multiply-adds.
    assert conv1.fwd_flops == 2 * 8 * 16 * 32 * 32 * (3 * 3 * 3)
    assert conv1.params == 16 * 3 * 3 * 3 + 16
    assert prof.batch_size == 8 and prof.precision == "fp32"
    assert [l.name for l in prof.layers] == ["conv1", "bn1", "relu", "pool", "conv2", "fc"]
    for layer in prof.layers:
        assert layer.fwd_s is not None and layer.fwd_s > 0, layer.name
        assert layer.bwd_s is not None and layer.fwd_s_std is not None and layer.bwd_s_std is not None
    # Layers with weights take backward time; fc's gradient is ready first, conv1's last.
    assert all(prof.layers[i].bwd_s > 0 for i in (0, 4, 5))
    assert [l.name for l in prof.gradient_order()] == ["fc", "conv2", "bn1", "conv1"]
    ph = prof.phases
    assert ph.total_s > 0 and ph.forward_s + ph.backward_s + ph.optimizer_s <= ph.total_s * 1.05
    assert sum(l.fwd_s for l in prof.layers) <= ph.forward_s * 1.05
    assert prof.optimizer.type == "SGD" and prof.optimizer.state_bytes_per_param == 4.0  # fp32 momentum
    assert prof.input_bytes_per_sample == 3 * 32 * 32 * 4
    # What autograd saves, counted on the captured batch: conv1 keeps its input images (fp32).
    assert prof.saved_tensors == "srift.saved-tensors/v1"
    assert conv1.saved_bytes == 8 * 3 * 32 * 32 * 4 and conv1.saved_half_bytes is None


@pytest.mark.slow
def test_dataloader_workers_amp_and_grad_accumulation(tmp_path: Path) -> None:
    prof = _profile(tmp_path, EXAMPLES / "train_cnn.py", "--batch-size", "4", "--workers", "2", "--amp", "--accum", "2")
    assert prof.precision == "bf16"  # the example autocasts to bfloat16 on a CPU: bf16, not amp (fp16)
    # Two micro-batches of 4 per optimizer step: batch_size is per step, FLOPs too.
    assert prof.batch_size == 8
    assert prof.layers[0].fwd_flops == 2 * 8 * 16 * 32 * 32 * 27
    assert any("2 micro-batches of 4" in n for n in prof.notes)


@pytest.mark.slow
def test_transformers_bert_from_config(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    prof = _profile(tmp_path, EXAMPLES / "train_bert.py", "--batch-size", "2", "--seq-len", "16")
    assert prof.batch_size == 2 and prof.seq_len == 16
    assert prof.optimizer.type == "AdamW" and prof.optimizer.state_bytes_per_param == 8.0
    query = next(l for l in prof.layers if l.name.endswith("layer.0.attention.self.query"))
    assert query.type == "Linear" and query.fwd_flops == 2 * 2 * 16 * 64 * 64
    # M16: the attention module calls SDPA (with a mask: on a CPU its math fallback, two bmm) in its own
    # forward: a layer of its own, 4 b s^2 hidden FLOPs, all growing with seq_len^2; timed as part of
    # the step, not as a leaf.
    sdpa = next(l for l in prof.layers if l.name.endswith("layer.0.attention.self.(ops)"))
    assert sdpa.type == "ScaledDotProductAttention" and sdpa.fwd_flops == sdpa.fwd_flops_seq2 == 4 * 2 * 16**2 * 64
    assert all(l.fwd_s is not None for l in prof.layers if not l.name.endswith(".(ops)"))


@pytest.mark.slow
def test_batch_size_override_and_default_output(tmp_path: Path) -> None:
    res = _srift("profile", str(EXAMPLES / "train_cnn.py"), "--warmup", "1", "--iters", "2", "--batch-size", "32",
                 "--", "--batch-size", "8", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    prof = Profile.load(tmp_path / "profiles" / "train_cnn.yaml")
    assert prof.batch_size == 32 and prof.iterations == 2


@pytest.mark.slow
def test_crashing_script_shows_its_traceback_and_writes_nothing(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(
        "import torch\nm = torch.nn.Linear(2, 2)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(10):\n    m(torch.randn(1, 2)).sum().backward()\n    opt.step()\n"
        "    if i == 4:\n        raise ValueError('boom in the user script')\n")
    res = _srift("profile", str(script), "--warmup", "2", "--iters", "5", "-o", "out.yaml", cwd=tmp_path)
    assert res.returncode != 0
    assert "ValueError: boom in the user script" in res.stderr and "crash.py" in res.stderr
    assert "no profile was written" in res.stderr
    assert not (tmp_path / "out.yaml").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.yaml")]


@pytest.mark.slow
def test_script_without_optimizer_step_fails_clearly(tmp_path: Path) -> None:
    script = tmp_path / "nostep.py"
    script.write_text("import torch\nm = torch.nn.Linear(2, 2)\nm(torch.randn(1, 2)).sum().backward()\n")
    res = _srift("profile", str(script), "-o", "out.yaml", cwd=tmp_path)
    assert res.returncode == 2  # an error of the input (README: every error exits 2)
    assert "never called optimizer.step()" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out.yaml").exists()


@pytest.mark.slow
def test_fewer_steps_than_asked_writes_what_was_measured_with_a_warning(tmp_path: Path) -> None:
    res = _srift("profile", str(EXAMPLES / "train_cnn.py"), "--warmup", "2", "--iters", "20", "-o", "out.yaml",
                 "--", "--epochs", "1", "--samples", "48", "--batch-size", "8", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Warning: the script ended after 6 optimizer steps" in res.stderr
    assert Profile.load(tmp_path / "out.yaml").iterations == 4


@pytest.mark.slow
def test_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    res = _srift("profile", "nope.py", cwd=tmp_path)
    assert res.returncode == 2
    assert "Error: script 'nope.py' does not exist." in res.stderr and "To fix:" in res.stderr


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_under_torchrun_records_allreduce_buckets(tmp_path: Path) -> None:
    out = tmp_path / "ddp.yaml"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
           "--no-python", *SRIFT, "profile", str(EXAMPLES / "train_ddp.py"), "--warmup", "2", "--iters", "3", "-o", str(out)]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    prof = Profile.load(out)
    assert prof.world_size == 2
    assert {b.rank for b in prof.allreduce} == {0, 1}
    # Every parameter's gradient goes through exactly one bucket on each rank.
    for rank in (0, 1):
        sizes = [b.size_bytes for b in prof.allreduce if b.rank == rank]
        assert len(sizes) >= 2 and sum(sizes) == prof.grad_bytes
    assert all(b.time_s > 0 for b in prof.allreduce)
    assert all(b.ready_to_done_s is not None and b.ready_to_done_s >= b.time_s for b in prof.allreduce)  # M12
    assert [l.name for l in prof.layers][0] == "0"  # leaves named inside the DDP wrapper
    assert prof.phases.comm_wait_s is not None and 0 <= prof.phases.comm_wait_s <= prof.phases.total_s  # M11


@pytest.mark.slow
def test_zoo_model_structural_profile_from_the_cli(tmp_path: Path) -> None:
    res = _srift("profile", "--model", "resnet50", "--batch-size", "2", "-o", "r50.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    prof = Profile.load(tmp_path / "r50.yaml")
    assert prof.params == 25_557_032 and prof.batch_size == 2 and not prof.measured
    # ResNet-50's stem: 7x7 conv, 3->64, stride 2 on 224x224 -> 112x112 outputs.
    assert prof.layers[0].fwd_flops == 2 * 2 * 64 * 112 * 112 * 3 * 7 * 7


def test_script_and_model_together_is_a_usage_error(capsys) -> None:
    assert main(["profile", "train.py", "--model", "resnet50"]) == 2
    assert "give either a training script or --model NAME" in capsys.readouterr().err


@pytest.mark.slow
def test_kfac_flag_times_the_kfac_kernels_of_every_linear_and_conv(tmp_path: Path) -> None:
    prof = _profile(tmp_path, EXAMPLES / "train_cnn.py", "--batch-size", "8", extra=("--kfac",))
    kfac = [l for l in prof.layers if l.kfac_a_dim]
    assert [l.name for l in kfac] == ["conv1", "conv2", "fc"]
    for layer in kfac:
        for f in ("kfac_factor_a_s", "kfac_factor_g_s", "kfac_inverse_a_s", "kfac_inverse_g_s", "kfac_precondition_s"):
            assert getattr(layer, f) is not None and getattr(layer, f) > 0, (layer.name, f)
    assert all(l.kfac_factor_a_s is None for l in prof.layers if not l.kfac_a_dim)
    assert any("K-FAC kernels timed on 3 layers" in n for n in prof.notes)


def test_kfac_flag_needs_a_script(capsys) -> None:
    assert main(["profile", "--model", "resnet18", "--kfac"]) == 2
    err = capsys.readouterr().err
    assert "--kfac times real kernels, so it needs a training script" in err and "To fix" in err
