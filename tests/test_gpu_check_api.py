"""The calls the team's GPU check (gpu-check's probes.py, kept beside the repository) makes into
srift keep working (issue 28: keep the GPU check working as the code changes). Its ``events`` probe
times a deep MLP with ``LayerTimer`` and closes each step with ``finish_iteration``; here the same
calls on the CPU clock."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from srift.profiling.hooks import LayerTimer, WallClock  # noqa: E402


def test_finish_iteration_times_every_leaf_within_its_step() -> None:
    depth = 12
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(depth)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    xb = torch.randn(8, 64)
    clock = WallClock()
    timer = LayerTimer(model, model, clock)
    recs = []
    for _ in range(4):  # as the probe: forward, backward, optimizer marks, sync, finish
        model(xb).square().mean().backward()
        timer.optimizer_start()
        opt.step()
        timer.optimizer_end()
        opt.zero_grad(set_to_none=True)
        clock.sync()
        recs.append(timer.finish_iteration(None, 0.0, True))
    assert timer.finish_iteration(None, 0.0, False) is None  # not measured: nothing to resolve
    timer.remove()
    for rec in recs:
        assert rec is not None
        assert sorted(rec.layer_fwd_s) == list(range(depth)) == sorted(rec.layer_bwd_s)
        assert all(t > 0 for t in rec.layer_fwd_s.values()) and all(t > 0 for t in rec.layer_bwd_s.values())
        # The leaves run inside their pass, and the passes and optimizer inside the step.
        assert sum(rec.layer_fwd_s.values()) <= rec.forward_s
        assert sum(rec.layer_bwd_s.values()) <= rec.backward_s * (1 + 1e-9)
        assert rec.forward_s + rec.backward_s + rec.optimizer_s <= rec.total_s
        assert rec.optimizer_s > 0
