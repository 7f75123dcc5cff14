"""One profile on a loaded machine (issue 28: a profile predicts its own script): srift's CPU clock
leaves out the time other processes take the training thread's core, and the measured steps are
aggregated by their interquartile mean, so a disturbed step does not move the profile. Checked by
hand; the measured self-prediction is a timing target that scripts/validate_self_prediction.py
prints (docs/profiling.md)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time

import pytest

from srift.errors import SriftError
from srift.profile import (
    INTERQUARTILE_MEAN, MEASUREMENT_METHOD, WALL, WALL_LESS_RUN_QUEUE, DeviceInfo, LayerProfile, MeasurementInfo, PhaseTimes,
    Profile,
)

torch = pytest.importorskip("torch")

from srift.profiling.assemble import _phases  # noqa: E402
from srift.profiling.hooks import IterationTimes, RunQueue, WallClock, steady_steps  # noqa: E402


def _step(total_s: float) -> IterationTimes:
    return IterationTimes({0: 0.5 * total_s}, {0: 0.4 * total_s}, data_s=0.0, forward_s=0.5 * total_s,
                          backward_s=0.4 * total_s, optimizer_s=0.1 * total_s, total_s=total_s, micro_batches=1)


def test_the_steady_steps_leave_out_a_quarter_at_each_end_by_total_time() -> None:
    # Totals 7, 1, 100, 3, 2, 5, 4, 6 ms: sorted 1..7, 100; the middle half is 3, 4, 5, 6 ms (indices 3, 6, 5, 7).
    steps = [_step(t / 1000) for t in (7.0, 1.0, 100.0, 3.0, 2.0, 5.0, 4.0, 6.0)]
    assert steady_steps(steps) == [3, 5, 6, 7]
    phases = _phases(steps)
    assert phases.total_s == pytest.approx(0.0045)  # (3 + 4 + 5 + 6) / 4 ms; the mean of all would be 16 ms
    # The spread of every step is still reported: sqrt(squared deviations from 16 summed / 7) = sqrt(8092 / 7) = 34 ms.
    assert phases.total_s_std == pytest.approx(0.034)
    assert steady_steps(steps[:3]) == [0, 1, 2] and steady_steps([]) == []  # below 4 steps: all of them


def test_one_interrupted_step_does_not_move_the_phases() -> None:
    """Seven 10 ms steps and one of 90 ms (another process ran): the profile says 10 ms, where the
    mean over the steps (v1 profiles) said 20 ms."""
    phases = _phases([_step(0.010)] * 7 + [_step(0.090)])
    assert phases.total_s == pytest.approx(0.010)
    assert phases.forward_s == pytest.approx(0.005) and phases.optimizer_s == pytest.approx(0.001)


def _spin() -> None:  # a child that keeps one core busy
    while True:
        pass


@pytest.mark.slow  # busy processes pinned to a core for about a second
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_the_cpu_clock_leaves_out_the_time_other_processes_hold_the_core() -> None:
    """Two busy processes share this thread's core: the wall time of a fixed amount of work is
    about three times its CPU time; srift's clock reads about the CPU time (the thread's own
    work), the reference being ``time.thread_time``, a clock of its own."""
    if not RunQueue().available:
        pytest.skip("this kernel has no per-thread schedstat")
    clock = WallClock()
    assert clock.name == WALL_LESS_RUN_QUEUE
    cpu = sorted(os.sched_getaffinity(0))[0]
    before = os.sched_getaffinity(0)
    ctx = multiprocessing.get_context("fork")
    hogs = [ctx.Process(target=_spin, daemon=True) for _ in range(2)]
    try:
        os.sched_setaffinity(0, {cpu})
        for h in hogs:
            h.start()
            assert h.pid is not None
            os.sched_setaffinity(h.pid, {cpu})
        time.sleep(0.05)
        wall0, cpu0, mark0 = time.perf_counter(), time.thread_time(), clock.mark()
        x = 0
        while time.thread_time() - cpu0 < 0.3:  # 0.3 s of this thread's own work
            x += 1
        mark1, cpu1, wall1 = clock.mark(), time.thread_time(), time.perf_counter()
    finally:
        for h in hogs:
            h.kill()
            h.join()
        os.sched_setaffinity(0, before)
    own_s, work_s, wall_s = mark1 - mark0, cpu1 - cpu0, wall1 - wall0
    assert wall_s > 1.8 * work_s  # the hogs did take the core
    assert own_s == pytest.approx(work_s, rel=0.25)
    # The plain wall clock (v1 profiles) reads the whole wait.
    plain = WallClock(correct=False)
    assert plain.name == "wall" and plain.waited_s() == 0.0


def test_a_blocking_wait_stays_in_the_cpu_clock() -> None:
    """Sleeping (a DataLoader queue, a collective) is not waiting for a core: it counts, as it would
    on an idle machine."""
    clock = WallClock()
    a = clock.mark()
    time.sleep(0.05)
    assert clock.mark() - a == pytest.approx(0.05, abs=0.02)


def _profile(measurement: MeasurementInfo | None) -> Profile:
    layer = LayerProfile("l", "Linear", params=10, grad_bytes=40, fwd_flops=1e9, bwd_flops=2e9, fwd_s=0.010, bwd_s=0.020)
    return Profile("toy", 8, "fp32", [layer], device=DeviceInfo("cpu", "cpu"), phases=PhaseTimes(total_s=0.035),
                   iterations=5, timing="layers", measurement=measurement)


def test_how_the_times_were_taken_survives_the_file_and_older_profiles_still_load() -> None:
    info = MeasurementInfo(clock=WALL_LESS_RUN_QUEUE, threads=1, run_queue_s=0.0125)
    again = Profile.from_dict(_profile(info).to_dict())
    assert again.measurement == info
    assert info.method == MEASUREMENT_METHOD and info.aggregate == INTERQUARTILE_MEAN
    old = _profile(info).to_dict()
    del old["measurement"]  # a profile written before srift recorded it: v1 (means, wall clock)
    assert Profile.from_dict(old).measurement is None
    bad = _profile(dataclasses.replace(info, clock="sundial")).to_dict()
    with pytest.raises(SriftError, match="measurement.clock"):
        Profile.from_dict(bad)


def test_a_profiled_script_records_its_clock_threads_and_aggregate(tmp_path) -> None:
    from srift.profiling.runner import profile_script

    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom torch import nn\ntorch.set_num_threads(1)\nnet = nn.Linear(16, 4)\n"
                      "opt = torch.optim.SGD(net.parameters(), lr=0.1)\nfor _ in range(50):\n"
                      "    net(torch.randn(8, 16)).sum().backward()\n    opt.step()\n    opt.zero_grad()\n")
    threads = torch.get_num_threads()
    try:
        result = profile_script(script, [], warmup=3, iters=4, output=tmp_path / "p.yaml", show_progress=False)
    finally:
        torch.set_num_threads(threads)
    m = Profile.load(tmp_path / "p.yaml").measurement
    assert result.profile is not None and m is not None
    assert m.threads == 1 and m.aggregate == INTERQUARTILE_MEAN and m.method == MEASUREMENT_METHOD
    assert m.clock == (WALL_LESS_RUN_QUEUE if RunQueue().available else WALL)
    assert m.run_queue_s is None or m.run_queue_s >= 0.0


def test_a_cpu_mark_retries_a_read_a_preemption_fell_in(monkeypatch) -> None:
    """The thread preempted for 5 ms between reading the clock and reading its run-queue wait: the
    wait would come off the interval that ends at this mark (fresh-clone-check saw a layer's mean
    forward at -0.52 ms, a profile srift then refused to load); the mark reads both again."""
    from srift.profiling import clocks

    clock = WallClock()

    class Queue:  # the wait so far: 5 ms booked while the first read was under way
        reads = iter([0.010, 0.015, 0.015])

        def waited_s(self) -> float:
            return next(self.reads)

    now = iter([1.000, 1.005 + 1e-6,  # first try: 5 ms passed between the two clock reads (preempted)
                1.006, 1.006 + 1e-6,  # second try: a 1 us read
                1.007, 1.007 + 1e-6])
    monkeypatch.setattr(clocks.time, "perf_counter", lambda: next(now))
    clock.run_queue = Queue()  # type: ignore[assignment]
    start = clock.mark()
    assert start == pytest.approx(1.006 - 0.015)  # the second try: clock and wait read together
    end = clock.mark()
    assert end - start == pytest.approx(0.001)  # the 1 ms between the marks (without the retry: 1 us)
