"""Measured times at another batch size keep their per-call part (review item M6 of issue #28):
``t(b) = a + c * b``, the fixed share ``a`` taken from srift's analysed step timed at the
micro-batch and at half of it. Hand-calculated; the measured accuracy is a timing target that
scripts/validate_self_prediction.py prints."""

from __future__ import annotations

import dataclasses

import pytest

from srift.cluster import cluster_from_dict
from srift.job import Job
from srift.profile import LayerProfile, PhaseTimes, Profile
from srift.simulate import predict


def _measured(analysed_s: float | None = 0.030, analysed_half_s: float | None = 0.018) -> Profile:
    """Batch 8: layers 10 + 20 ms, optimizer 5 ms, data 1 ms, 4 ms unattributed (total 40 ms); the
    analysed step takes 30 ms at batch 8 and 18 ms at batch 4, so its fixed share is
    2 x 18 / 30 - 1 = 0.2 (6 ms of the 30)."""
    layer = LayerProfile("l", "Linear", params=10, grad_bytes=40, fwd_flops=1e9, bwd_flops=2e9, fwd_s=0.010, bwd_s=0.020)
    return Profile("toy", 8, "fp32", [layer], device={"name": "cpu", "kind": "cpu", "gpu": None},
                   phases=PhaseTimes(data_s=0.001, forward_s=0.010, backward_s=0.020, optimizer_s=0.005, total_s=0.040,
                                     analysed_s=analysed_s, analysed_half_s=analysed_half_s),
                   iterations=5, timing="layers")


def test_the_fixed_share_comes_from_the_two_analysed_timings() -> None:
    assert _measured().batch_fixed_fraction == pytest.approx(0.2)
    assert _measured(None, None).batch_fixed_fraction == 0.0  # not measured: time proportional to work
    assert _measured(0.030, 0.031).batch_fixed_fraction == 1.0  # half slower than full (noise): clipped
    assert _measured(0.030, 0.010).batch_fixed_fraction == 0.0  # less than half: clipped


def test_twice_the_batch_doubles_only_the_per_sample_part() -> None:
    """At batch 16 every measured time t becomes t x (0.2 + 0.8 x 2) = 1.8 t: forward 18 ms,
    backward 36 ms, unattributed 7.2 ms; the optimizer stays 5 ms, data doubles to 2 ms."""
    big = _measured().rescale(batch_size=16)
    assert big.layers[0].fwd_s == pytest.approx(0.018)
    assert big.layers[0].bwd_s == pytest.approx(0.036)
    assert big.phases.optimizer_s == pytest.approx(0.005)
    assert big.phases.total_s == pytest.approx(0.002 + 0.018 + 0.036 + 0.005 + 0.0072)
    # The same 6 ms fixed are 6/54 of the analysed step at batch 16: 2 x 30/54 - 1.
    assert big.batch_fixed_fraction == pytest.approx(6 / 54)
    cpu = cluster_from_dict({"name": "here", "node_groups": [{"count": 1, "gpus_per_node": 1, "gpu": "cpu",
                                                              "intra_node": "shared-memory", "network_gbps": 0}]})
    assert predict(_measured(), cpu, Job(batch_size=16)).iteration_time_s == pytest.approx(0.0682)
    # Without the analysed timings the old proportional rule holds: 2 x (10 + 20 + 4) + 5 + 2 ms.
    assert predict(_measured(None, None), cpu, Job(batch_size=16)).iteration_time_s == pytest.approx(0.075)


def test_half_and_four_times_the_batch_follow_the_same_line() -> None:
    """Forward 10 ms at batch 8 is 2 ms fixed + 1 ms per sample: 6 ms at batch 4, 34 ms at batch 32;
    rescaling a rescaled profile lands on the same line."""
    assert _measured().rescale(batch_size=4).layers[0].fwd_s == pytest.approx(0.006)
    assert _measured().rescale(batch_size=32).layers[0].fwd_s == pytest.approx(0.034)
    assert _measured().rescale(batch_size=16).rescale(batch_size=32).layers[0].fwd_s == pytest.approx(0.034)
    assert _measured().rescale(batch_size=16).rescale(batch_size=8).layers[0].fwd_s == pytest.approx(0.010)


def test_the_analysed_timings_survive_the_file() -> None:
    p = _measured()
    again = Profile.from_dict(p.to_dict())
    assert dataclasses.astuple(again.phases) == dataclasses.astuple(p.phases)
    assert again.batch_fixed_fraction == pytest.approx(0.2)


def test_the_profiler_times_the_step_on_the_batch_and_its_first_half() -> None:
    torch = pytest.importorskip("torch")
    from srift.profiling.batch_timing import sub_batch, time_full_and_half

    x, mask = torch.ones(6, 3), torch.ones(3)
    cut = sub_batch(((x, 5), {"mask": mask, "y": [x]}), 6, 3)
    assert cut[0][0].shape == (3, 3) and cut[0][1] == 5
    assert cut[1]["mask"].shape == (3,) and cut[1]["y"][0].shape == (3, 3)  # no batch dimension: kept whole

    net = torch.nn.Linear(3, 1)
    rows: list[int] = []

    def step(n: int):
        def run():
            rows.append(n)
            return net(x[:n]).sum()
        return run

    full_s, half_s = time_full_and_half(net, step(6), step(3), torch.device("cpu"), repeats=2)
    assert full_s > 0 and half_s > 0
    assert rows == [6, 3, 3, 6, 3, 6]  # one untimed call each, then alternating
    assert net.weight.grad is None  # srift's steps leave no gradient behind
    with pytest.raises(ValueError):
        time_full_and_half(net, step(6), step(3), torch.device("cpu"), repeats=0)
