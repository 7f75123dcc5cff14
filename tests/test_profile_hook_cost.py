"""What srift's per-leaf hooks cost a step is measured (pairs of steps without and with them, after
the measured ones) and taken out of the layers, so a profile describes the script's own step
(issue 28: a profile predicts its own script; docs/profiling.md). The arithmetic is checked by hand; the measured
self-prediction is a timing target that scripts/validate_self_prediction.py prints."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from srift.profile import MEASUREMENT_METHOD, LayerProfile, MeasurementInfo, PhaseTimes, Profile

torch = pytest.importorskip("torch")

from srift.profiling.assemble import hook_cost_s, subtract_hook_cost  # noqa: E402
from srift.profiling.hooks import IterationTimes  # noqa: E402

MS = 1e-3


def _layers() -> list[LayerProfile]:
    return [LayerProfile("a", "Linear", fwd_s=2.0 * MS, bwd_s=3.0 * MS),
            LayerProfile("b", "ReLU", fwd_s=1.5 * MS, bwd_s=0.1 * MS),
            LayerProfile("c", "Dropout")]  # never timed (used under no_grad only): left alone


def _records(n: int = 4) -> list[IterationTimes]:
    # Leaf "b" is called twice per step (forward), once in backward; "a" once each.
    return [IterationTimes({0: 2.0 * MS, 1: 1.5 * MS}, {0: 3.0 * MS, 1: 0.1 * MS}, data_s=0.0, forward_s=4.0 * MS,
                           backward_s=5.0 * MS, optimizer_s=1.0 * MS, total_s=10.0 * MS, micro_batches=1,
                           layer_fwd_calls={0: 1, 1: 2}, layer_bwd_calls={0: 1, 1: 1}) for _ in range(n)]


LEAVES = [("a", torch.nn.Linear(1, 1)), ("b", torch.nn.ReLU()), ("c", torch.nn.Dropout())]


def test_the_hooks_cost_is_the_interquartile_mean_of_the_differences_within_pairs() -> None:
    # Pairs (without, with the hooks), ms: the machine slows down midway (20 -> 30 ms) and one pair
    # is disturbed: differences 1, 1, 1.2, 0.8, 9, -3; sorted -3, 0.8, 1, 1, 1.2, 9: the middle half
    # (the lowest and highest one left out) 0.8, 1, 1, 1.2 averages 1 ms. The difference of the two
    # groups' means, 173 / 6 - 163 / 6 = 1.67 ms, would carry the disturbed pair.
    unhooked = [20.0, 20.0, 30.0, 30.0, 30.0, 33.0]
    hooked = [21.0, 21.0, 31.2, 30.8, 39.0, 30.0]
    assert hook_cost_s([u * MS for u in unhooked], [h * MS for h in hooked]) == pytest.approx(1.0 * MS)
    assert hook_cost_s([10.0 * MS] * 3, [9.5 * MS] * 3) == pytest.approx(-0.5 * MS)  # noise: taken out as 0
    assert hook_cost_s([], []) == 0.0


def test_the_hooks_cost_is_taken_out_per_timed_interval_and_the_layers_still_add_up() -> None:
    layers = _layers()
    phases = PhaseTimes(forward_s=4.0 * MS, backward_s=5.0 * MS, optimizer_s=1.0 * MS, total_s=10.0 * MS)
    assert subtract_hook_cost(layers, phases, _records(), 1.0 * MS, LEAVES) == pytest.approx(1.0 * MS)
    # 5 timed intervals per step (a: 1 forward + 1 backward; b: 2 forward + 1 backward): 0.2 ms each.
    a, b, c = layers
    assert (a.fwd_s, a.bwd_s) == (pytest.approx(1.8 * MS), pytest.approx(2.8 * MS))
    assert b.fwd_s == pytest.approx(1.1 * MS)  # 1.5 - 2 x 0.2
    assert b.bwd_s == pytest.approx(0.05 * MS)  # 0.1 ms cannot give up 0.2 ms: at most half (MAX_HOOK_SHARE)
    assert c.fwd_s is None and c.bwd_s is None
    # The layers gave up 0.6 ms in forward and 0.25 ms in backward; the other 0.15 ms comes out of the
    # time between them, 3/5 in forward (3 of the 5 intervals) and 2/5 in backward: 0.09 and 0.06 ms.
    # The step loses the whole 1 ms, and the phases still add up within it.
    assert phases.total_s == pytest.approx(9.0 * MS)
    assert phases.forward_s == pytest.approx(3.31 * MS) and phases.backward_s == pytest.approx(4.69 * MS)
    assert phases.optimizer_s == pytest.approx(1.0 * MS)
    assert a.fwd_s + b.fwd_s <= phases.forward_s and a.bwd_s + b.bwd_s <= phases.backward_s


def test_no_cost_or_a_negative_one_takes_nothing_out() -> None:
    layers = _layers()
    phases = PhaseTimes(forward_s=4.0 * MS, backward_s=5.0 * MS, optimizer_s=1.0 * MS, total_s=10.0 * MS)
    assert subtract_hook_cost(layers, phases, _records(), 0.0, LEAVES) == 0.0
    assert subtract_hook_cost(layers, phases, _records(), -0.5 * MS, LEAVES) == 0.0  # a negative difference: noise
    assert phases.total_s == pytest.approx(10.0 * MS) and layers[0].fwd_s == pytest.approx(2.0 * MS)


def test_the_hook_cost_fields_survive_the_file_and_v2_profiles_still_load() -> None:
    info = MeasurementInfo(threads=1, run_queue_s=0.001, hooked_step_s=0.0102, hook_overhead_s=0.0004, unhooked_steps=20)
    prof = Profile("toy", 8, "fp32", _layers()[:1], phases=PhaseTimes(total_s=0.0098), iterations=20, timing="layers",
                   measurement=info)
    assert Profile.from_dict(prof.to_dict()).measurement == info and info.method == MEASUREMENT_METHOD
    old = prof.to_dict()
    old["measurement"] = {"method": "srift.measurement/v2", "clock": "wall", "aggregate": "interquartile-mean",
                          "threads": 1, "run_queue_s": None}  # written before srift measured its hooks' cost
    again = Profile.from_dict(old).measurement
    assert again is not None and again.method == "srift.measurement/v2" and again.hook_overhead_s is None
    assert dataclasses.replace(again, method=MEASUREMENT_METHOD).hooked_step_s is None


_SCRIPT = """
import sys, torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)
net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
x = torch.randn(16, 64)
with open(sys.argv[2], "a") as log:
    for i in range(int(sys.argv[1])):
        net(x).square().mean().backward()
        log.write("step\\n")  # before the step: srift stops the script inside its last one
        log.flush()
        opt.step()
        opt.zero_grad()
"""


def _run(tmp_path: Path, steps: int, warmup: int = 3, iters: int = 4) -> tuple[Profile, int]:
    from srift.profiling.runner import profile_script

    script, log = tmp_path / "train.py", tmp_path / "steps.log"
    script.write_text(_SCRIPT)
    threads = torch.get_num_threads()
    try:
        result = profile_script(script, [str(steps), str(log)], warmup=warmup, iters=iters, output=tmp_path / "p.yaml",
                                show_progress=False, overwrite=True)
    finally:
        torch.set_num_threads(threads)
    assert result.profile is not None
    return Profile.load(tmp_path / "p.yaml"), len(log.read_text().splitlines())


def test_a_profiled_script_runs_unhooked_steps_after_the_measured_ones_and_takes_out_their_difference(tmp_path) -> None:
    prof, ran = _run(tmp_path, steps=100)
    assert ran == 3 + 4 + 2 * 2  # warm-up, measured (hooked), then 2 pairs: without and with the hooks
    m, ph = prof.measurement, prof.phases
    assert m is not None and m.method == MEASUREMENT_METHOD and m.unhooked_steps == 2
    assert prof.iterations == 4 and prof.timing == "layers"
    assert m.hooked_step_s is not None and m.hook_overhead_s is not None and m.hook_overhead_s >= 0.0
    assert ph.total_s_unhooked is not None and ph.total_s_unhooked > 0
    assert ph.total_s == pytest.approx(m.hooked_step_s - m.hook_overhead_s)
    # The layers still add up within their phase (what test_profiler_script checks of every profile).
    assert all(l.fwd_s is not None and l.fwd_s >= 0 and l.bwd_s is not None and l.bwd_s >= 0 for l in prof.layers)
    assert sum(l.fwd_s for l in prof.layers) <= ph.forward_s * (1 + 1e-9)
    assert sum(l.bwd_s for l in prof.layers) <= ph.backward_s * (1 + 1e-9)
    assert ph.forward_s + ph.backward_s + ph.optimizer_s <= ph.total_s * 1.05


def test_a_script_ending_among_srifts_pairs_keeps_what_it_measured(tmp_path) -> None:
    prof, ran = _run(tmp_path, steps=14, iters=6)  # 3 warm-up + 6 measured + 2 of 3 pairs and a half
    assert ran == 14 and prof.iterations == 6
    assert prof.measurement is not None and prof.measurement.unhooked_steps == 2
    assert any("ended after 2 of srift's 3 pairs" in n for n in prof.notes)


def test_a_script_ending_before_the_unhooked_steps_says_the_hooks_cost_stays_in(tmp_path) -> None:
    prof, ran = _run(tmp_path, steps=7)
    assert ran == 7 and prof.iterations == 4
    assert prof.measurement is not None and prof.measurement.hook_overhead_s is None
    assert prof.phases.total_s_unhooked is None
    assert any("before srift's pairs" in n for n in prof.notes)
