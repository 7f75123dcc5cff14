"""Host time is not data loading (issue 41): the data iterator's next() is ``data_s``; zero_grad and
the script's own Python before the forward are apart, and a batch rescale keeps them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from srift.profile import LayerProfile, PhaseTimes, Profile

pytest.importorskip("torch")

SCRIPT = textwrap.dedent('''
    import time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 10_000
        def __getitem__(self, i):
            time.sleep(0.002)  # 2 ms per sample, in the iterator's next()
            return torch.randn(16), torch.randn(4)

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Slow(), batch_size=8):
        time.sleep(0.012)  # "logging": host time, not data loading
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
''')


def test_data_iterator_time_is_data_and_logging_is_host(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "p.yaml"
    res = subprocess.run([sys.executable, "-m", "srift.cli", "profile", str(script), "--warmup", "2", "--iters", "4",
                          "-o", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ph = Profile.load(out).phases
    assert ph.data_s is not None and ph.host_s is not None and ph.zero_grad_s is not None
    # 8 samples x 2 ms sleep in next(); sleeps stay in the clock (only run-queue waits leave it).
    assert 0.015 <= ph.data_s < 0.015 + 0.012  # not the 12 ms of "logging"
    assert 0.011 <= ph.host_s < 0.012 + 0.016  # not the 16 ms of loading
    assert 0.0 < ph.zero_grad_s < ph.host_s


def test_a_batch_rescale_scales_data_loading_but_not_zero_grad_or_host_time() -> None:
    layer = LayerProfile("fc", "Linear", params=100, grad_bytes=400, fwd_flops=1e9, bwd_flops=2e9, fwd_s=0.01, bwd_s=0.02)
    phases = PhaseTimes(data_s=0.004, zero_grad_s=0.001, host_s=0.005, forward_s=0.01, backward_s=0.02,
                        optimizer_s=0.003, total_s=0.043)
    prof = Profile(name="p", batch_size=8, precision="fp32", layers=[layer], phases=phases,
                   device=Profile(name="x", batch_size=1, precision="fp32", layers=[layer]).device)
    big = prof.rescale(batch_size=16).phases
    assert big.data_s == pytest.approx(0.008)
    assert big.zero_grad_s == 0.001 and big.host_s == 0.005
    # Layers double (no fixed share recorded), data doubles, optimizer + zero_grad + host stay; rest 0.
    assert big.total_s == pytest.approx(0.008 + 0.06 + 0.003 + 0.001 + 0.005)


def test_a_profile_taken_while_the_thread_waited_for_a_core_says_so() -> None:
    from srift.profiling.load import under_load

    assert under_load([0.01, 0.03], 0.1) is None  # waited 20 ms of a 100 ms step: quiet enough
    warning = under_load([0.2, 0.4], 0.1)  # waited 300 ms per 100 ms step
    assert warning is not None and "300 ms per step" in warning and "3.0x" in warning and "quieter machine" in warning
    assert under_load([], 0.1) is None  # no run-queue reading (not Linux, CUDA)
