"""Timing K-FAC kernels on real tensors (what `srift profile --kfac` records)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from srift.profiling.kfac_timing import measure_kfac  # noqa: E402


@pytest.mark.slow
def test_every_linear_and_conv_gets_positive_times_and_gradients_are_restored():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    x, y = torch.randn(5, 3, 8, 8), torch.randint(0, 4, (5,))
    before = [torch.full_like(p, 7.0) for p in model.parameters()]
    for p, g in zip(model.parameters(), before):
        p.grad = g.clone()
    times = measure_kfac(model, lambda: nn.functional.cross_entropy(model(x), y))
    assert sorted(times) == ["0", "3"]
    for t in times.values():
        assert min(t.factor_a_s, t.factor_g_s, t.inverse_a_s, t.inverse_g_s, t.precondition_s) > 0
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), before))


def test_layers_the_step_does_not_reach_are_left_out_and_bad_repeats_rejected():
    model = nn.ModuleDict({"used": nn.Linear(3, 2), "unused": nn.Linear(3, 2)})
    x = torch.randn(4, 3)
    assert list(measure_kfac(model, lambda: model["used"](x).sum(), repeats=1)) == ["used"]
    with pytest.raises(ValueError, match="repeats"):
        measure_kfac(model, lambda: model["used"](x).sum(), repeats=0)


def test_a_grouped_conv_is_timed_as_the_sum_of_its_groups():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 6, 3, groups=2), nn.Flatten(), nn.Linear(6 * 4 * 4, 3))
    x, y = torch.randn(3, 4, 6, 6), torch.randint(0, 3, (3,))
    times = measure_kfac(model, lambda: nn.functional.cross_entropy(model(x), y), repeats=1)
    assert sorted(times) == ["0", "2"]
    t = times["0"]
    assert min(t.factor_a_s, t.factor_g_s, t.inverse_a_s, t.inverse_g_s, t.precondition_s) > 0
