"""`srift profile` on what GPU scripts do, run on a CPU (the CUDA-path review of issue #28):
torch.compile (B1, M4), torch >= 2.9's TF32 API (B2), bf16 autocast and bf16 weights (M17, M7),
rescaling that keeps the unattributed time (M5), and a stop that holds against
scripts that swallow it, exit early, change folder or are terminated (issue 26)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from srift.cluster import cluster_from_dict
from srift.job import Job
from srift.profile import DeviceInfo, LayerProfile, PhaseTimes, Profile, RankMemory
from srift.simulate import predict

pytest.importorskip("torch")

SRIFT = [sys.executable, "-m", "srift.cli"]

# A small MLP trained for STEPS steps; {setup} and {model} are filled per test.
TRAIN = """
import os, sys, torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)
net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
{setup}
model = {model}
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for step in range({steps}):
    x = torch.randn(16, 32, dtype=next(net.parameters()).dtype)
    {loop}
    loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def _script(tmp_path: Path, setup: str = "", model: str = "net", loop: str = "pass", steps: int = 40,
            text: str | None = None) -> Path:
    path = tmp_path / "train.py"
    path.write_text(text if text is not None else TRAIN.format(setup=setup, model=model, loop=loop, steps=steps))
    return path


def _run(tmp_path: Path, script: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*SRIFT, "profile", str(script), "--warmup", "4", "--iters", "4", "-o", "p.yaml", *extra],
                          cwd=tmp_path, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["wrapped", "in place"])
def test_a_compiled_model_is_timed_as_whole_steps_with_its_flops(tmp_path: Path, how: str) -> None:
    """B1: the aot_eager backend runs dynamo and AOTAutograd as inductor does, without a compiler."""
    compiled = ("torch.compile(net, backend='aot_eager')" if how == "wrapped"
                else "net")
    setup = "" if how == "wrapped" else "net.compile(backend='aot_eager')"
    res = _run(tmp_path, _script(tmp_path, setup=setup, model=compiled))
    assert res.returncode == 0, res.stderr
    prof = Profile.load(tmp_path / "p.yaml")
    assert prof.timing == "step" and prof.measured and prof.iterations == 4
    assert [l.name for l in prof.layers] == ["0", "1", "2"]  # the module below the compile wrapper
    assert all(l.fwd_s is None and l.bwd_s is None for l in prof.layers)  # M4: untimed, not 0 s
    ph = prof.phases
    assert ph.total_s > 0 and ph.forward_s > 0 and ph.backward_s > 0
    assert ph.forward_s + ph.backward_s + ph.optimizer_s <= ph.total_s * 1.05
    assert prof.layers[0].fwd_flops == 2 * 16 * 32 * 64  # analysed eagerly: 2 FLOPs per multiply-add


@pytest.mark.slow
def test_the_new_tf32_api_is_read_and_recorded(tmp_path: Path) -> None:
    """B2: after `fp32_precision = "tf32"`, reading the legacy flags raises; srift reads the new ones."""
    setup = ('torch.backends.cuda.matmul.fp32_precision = "tf32"\n'
             'torch.backends.cudnn.conv.fp32_precision = "tf32"')
    res = _run(tmp_path, _script(tmp_path, setup=setup))
    assert res.returncode == 0, res.stderr
    prof = Profile.load(tmp_path / "p.yaml")
    assert prof.framework["cuda.matmul.fp32_precision"] == "tf32"
    assert prof.framework["cudnn.conv.fp32_precision"] == "tf32"
    assert prof.precision == "fp32"  # a CPU run: no TF32 there


@pytest.mark.slow
@pytest.mark.parametrize(("setup", "loop", "want"), [
    ("net.to(torch.bfloat16)", "pass", "bf16"),  # M7: bf16 weights, no autocast
    ("", "torch.autocast('cpu', dtype=torch.bfloat16).__enter__() if step == 0 else None", "bf16"),  # M17
])
def test_bf16_runs_are_profiled_as_bf16(tmp_path: Path, setup: str, loop: str, want: str) -> None:
    res = _run(tmp_path, _script(tmp_path, setup=setup, loop=loop))
    assert res.returncode == 0, res.stderr
    assert Profile.load(tmp_path / "p.yaml").precision == want


def test_rescaling_keeps_the_unattributed_time_scaled_with_the_work() -> None:
    """M5 by hand (the measured accuracy at twice the batch is a timing target:
    scripts/validate_self_prediction.py prints it): 10 ms of layers, 1 ms optimizer, 2 ms data, 4 ms unattributed at batch 8; at
    batch 16 the layers and the unattributed time double, the optimizer stays, data doubles."""
    layer = LayerProfile("l", "Linear", params=10, grad_bytes=40, fwd_flops=100.0, bwd_flops=200.0, fwd_s=0.004, bwd_s=0.006)
    prof = Profile("toy", 8, "fp32", [layer], device=DeviceInfo("cpu", "cpu"),
                   phases=PhaseTimes(data_s=0.002, forward_s=0.004, backward_s=0.006, optimizer_s=0.001, total_s=0.017),
                   iterations=5, timing="layers", peak_memory=[RankMemory(0, 100, 200)])
    big = prof.rescale(batch_size=16)
    assert big.phases.total_s == pytest.approx(0.004 + 0.020 + 0.001 + 0.008)
    # The predictor on the CPU it was measured on: the measured step, and that step at twice the batch.
    cpu = cluster_from_dict({"name": "here", "node_groups": [{"count": 1, "gpus_per_node": 1, "gpu": "cpu",
                                                              "intra_node": "shared-memory", "network_gbps": 0}]})
    assert predict(prof, cpu, Job(batch_size=8)).iteration_time_s == pytest.approx(0.017)
    assert predict(prof, cpu, Job(batch_size=16)).iteration_time_s == pytest.approx(0.033)
    # M11: a multi-process DDP profile's wait for its all-reduces (here 3 of the 4 ms) is not compute.
    waited = dataclasses.replace(prof, phases=dataclasses.replace(prof.phases, comm_wait_s=0.003))
    assert predict(waited, cpu, Job(batch_size=8)).iteration_time_s == pytest.approx(0.017 - 0.003)
    again = Profile.from_dict(big.to_dict())  # the new fields survive the file
    assert again.timing == "layers" and again.peak_memory == [RankMemory(0, 100, 200)]


# ---- the stop holds (issue 26) ---------------------------------------------------------------------
@pytest.mark.slow
def test_a_bare_except_cannot_swallow_the_stop(tmp_path: Path) -> None:
    loop = textwrap.dedent("""
        import torch
        from torch import nn
        net = nn.Linear(8, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        while True:
            try:
                net(torch.randn(4, 8)).sum().backward()
                opt.step()
                opt.zero_grad()
            except:
                pass
        """)
    res = _run(tmp_path, _script(tmp_path, text=loop), timeout=120)
    assert res.returncode == 0, res.stderr
    assert "did not stop when srift stopped it" in res.stderr
    assert Profile.load(tmp_path / "p.yaml").iterations == 4


@pytest.mark.slow
def test_os_exit_is_reported_with_its_status(tmp_path: Path) -> None:
    res = _run(tmp_path, _script(tmp_path, loop="os._exit(3) if step == 2 else None"))
    assert res.returncode == 3
    assert "os._exit with status 3" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.slow
def test_a_script_that_changes_folder_gets_its_profile_where_srift_says(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    res = _run(tmp_path, _script(tmp_path, setup=f"os.chdir({str(tmp_path / 'elsewhere')!r})"))
    assert res.returncode == 0, res.stderr
    assert f"Wrote {tmp_path / 'p.yaml'}" in res.stdout
    assert (tmp_path / "p.yaml").is_file() and not (tmp_path / "elsewhere" / "p.yaml").exists()


@pytest.mark.slow
def test_a_script_that_never_steps_is_a_usage_error(tmp_path: Path) -> None:
    res = _run(tmp_path, _script(tmp_path, text="import torch\nprint('no training here')\n"))
    assert res.returncode == 2
    assert "never called optimizer.step()" in res.stderr and "To fix:" in res.stderr


@pytest.mark.slow
def test_sigterm_ends_the_scripts_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    setup = (f"import subprocess\nchild = subprocess.Popen(['sleep', '300'])\n"
             f"open({str(pidfile)!r}, 'w').write(str(child.pid))")
    script = _script(tmp_path, setup=setup, loop="import time; time.sleep(0.2)", steps=10_000)
    proc = subprocess.Popen([*SRIFT, "profile", str(script), "--warmup", "2", "--iters", "5000", "-o", "p.yaml"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        child = int(pidfile.read_text())
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not _running(child)
    assert not (tmp_path / "p.yaml").exists()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forking_script_is_profiled_and_its_children_exit_for_real(tmp_path: Path) -> None:
    """A forked child that trains and calls os._exit (multiprocessing does) is not srift's run."""
    loop = "pid = os.fork() if step == 1 else 1\n    if pid == 0:\n        opt.step(); os._exit(0)"
    res = _run(tmp_path, _script(tmp_path, loop=loop))
    assert res.returncode == 0, res.stderr
    assert Profile.load(tmp_path / "p.yaml").iterations == 4


def test_an_analysed_step_out_of_memory_is_redone_on_one_sample(monkeypatch) -> None:
    """B8: the extra analysed step runs out of GPU memory at the script's batch: srift analyses one
    sample and scales FLOPs to the batch (Linear 32 -> 64 at batch 16: 2 * 16 * 32 * 64 forward)."""
    import torch
    from torch import nn

    from srift.profiling import assemble
    from srift.profiling.hooks import LayerTimer, WallClock

    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
    timer = LayerTimer(net, net, WallClock())
    timer.want_capture = True
    net(torch.randn(16, 32)).sum().backward()
    timer.remove()
    real = assemble.analyze_layers
    calls: list[int] = []

    def small_memory(model, step):  # the full batch does not fit; one sample does
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, step)

    monkeypatch.setattr(assemble, "analyze_layers", small_memory)
    notes: list[str] = []
    layers = assemble.analyze_structure(net, timer, notes)
    assert len(calls) == 2 and layers[0].fwd_flops == 2 * 16 * 32 * 64
    assert "ran out of memory at micro-batch 16" in notes[-1]


@pytest.mark.slow
def test_a_step_captured_in_a_cuda_graph_is_refused_clearly(tmp_path: Path, monkeypatch) -> None:
    """B5, with the capture simulated: from step 3 on the step hooks see a CUDA-graph capture (they
    must do nothing then); the replays run no Python, so no measured step comes: exit 2 and why."""
    import itertools

    from srift.errors import SriftError
    from srift.profiling import runner, session

    calls = itertools.count()
    monkeypatch.setattr(session, "hooks_off", lambda: next(calls) >= 4)  # pre and post hook of steps 1-2
    script = _script(tmp_path, steps=10)
    with pytest.raises(SriftError) as err:
        runner.profile_script(script, [], warmup=2, iters=3, output=tmp_path / "p.yaml", show_progress=False)
    assert err.value.exit_code == 2 and "CUDA graph" in err.value.message
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.slow
def test_data_parallel_on_several_gpus_is_refused(tmp_path: Path) -> None:
    """B6: DataParallel's replicas would run srift's hooks from several threads (faked on a CPU by
    giving the wrapper two device ids after its first forward)."""
    text = ("import torch\nfrom torch import nn\nnet = nn.Linear(8, 2)\ndp = nn.DataParallel(net)\n"
            "opt = torch.optim.SGD(net.parameters(), lr=0.1)\nfor _ in range(20):\n"
            "    dp(torch.randn(4, 8)).sum().backward()\n    dp.device_ids = [0, 1]\n    opt.step()\n")
    script = _script(tmp_path, text=text)
    res = _run(tmp_path, script)
    assert res.returncode == 2, res.stderr
    assert "nn.DataParallel on several GPUs" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.slow
def test_reading_each_iteration_one_step_late_keeps_every_measured_step(tmp_path: Path, monkeypatch) -> None:
    """M2: on CUDA an iteration's events are read at the next step's end (no device sync). The
    same bookkeeping with the CPU clock: every measured step is kept, the last one read at the stop,
    none of the warm-up's, and every one of srift's pairs."""
    from srift.profiling import runner

    attach = runner._Session._attach

    def lazy_attach(self, opt):
        attach(self, opt)
        self.lazy = True

    monkeypatch.setattr(runner._Session, "_attach", lazy_attach)
    result = runner.profile_script(_script(tmp_path, steps=40), [], warmup=4, iters=5, output=tmp_path / "p.yaml",
                                   show_progress=False)
    prof = result.profile
    assert prof is not None and prof.iterations == 5 and prof.timing == "layers"
    # srift's pairs after the measured steps (without, with the leaf hooks), read one step late too.
    assert prof.phases.total_s_unhooked is not None and prof.measurement is not None
    assert prof.measurement.unhooked_steps == 3  # pairs(5)
    assert (prof.phases.analysed_s or 0) > 0 and (prof.phases.analysed_half_s or 0) > 0  # M6: batch 16 and 8
    assert all(l.fwd_s is not None and l.fwd_s > 0 for l in prof.layers)


def test_a_bf16_profile_predicts_bf16_and_amp_on_its_gpu_alike() -> None:
    """M17: fp16 (amp) and bf16 run the same tensor-core math on a GPU: a profile measured under bf16
    on a T4 anchors a `--precision amp` prediction on that GPU as it anchors `bf16`."""
    from srift.perf.compute import layer_times
    from srift.testing import measured_profile

    prof = measured_profile([4096, 4096], fwd=0.010, bwd=0.020, gpu="T4")
    prof.precision = "bf16"
    bf16, amp = layer_times(prof, "T4", "bf16"), layer_times(prof, "T4", "amp")
    assert list(amp.fwd_s) == list(bf16.fwd_s) == [0.010, 0.010] and list(amp.bwd_s) == [0.020, 0.020]


@pytest.mark.slow
def test_a_skipped_optimizer_step_does_not_double_an_iteration(tmp_path: Path) -> None:
    """M9: a GradScaler skips `optimizer.step()` on an overflow, so two forward/backward passes fall
    in one iteration; such iterations are left out (here every third step is skipped)."""
    text = ("import torch\nfrom torch import nn\nnet = nn.Linear(8, 2)\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
            "for i in range(60):\n    net(torch.randn(4, 8)).sum().backward()\n    if i % 3 != 2:\n"
            "        opt.step()\n    opt.zero_grad()\n")
    res = _run(tmp_path, _script(tmp_path, text=text), "--iters", "6")
    assert res.returncode == 0, res.stderr
    prof = Profile.load(tmp_path / "p.yaml")
    assert prof.batch_size == 4  # one pass of 4 samples per step, not 8
    assert prof.iterations in (3, 4) and any("left out" in n for n in prof.notes)


@pytest.mark.slow
def test_autocast_entered_inside_forward_is_seen(tmp_path: Path) -> None:
    """M7: accelerate and `@autocast` decorators enter autocast inside the model's forward."""
    text = ("import torch\nfrom torch import nn\nclass Net(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.fc = nn.Linear(8, 2)\n    def forward(self, x):\n"
            "        with torch.autocast('cpu', dtype=torch.bfloat16):\n            return self.fc(x).float()\n"
            "net = Net()\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\nfor _ in range(30):\n"
            "    net(torch.randn(4, 8)).sum().backward()\n    opt.step()\n    opt.zero_grad()\n")
    res = _run(tmp_path, _script(tmp_path, text=text))
    assert res.returncode == 0, res.stderr
    assert Profile.load(tmp_path / "p.yaml").precision == "bf16"
