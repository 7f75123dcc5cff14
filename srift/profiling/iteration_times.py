"""One iteration's marks and the times read from them: ``Pending`` holds the clock marks srift's
hooks take during an iteration (srift/profiling/hooks.py), ``iteration_times`` turns them into
``IterationTimes`` (per leaf, per phase) once its end has run, and ``steady_steps`` picks the steps
every layer and phase is averaged over (their interquartile mean, docs/profiling.md).

A leaf's backward runs from the mark of its output's gradient to the next leaf's (the last: to the
pass's end), less the paused stretches (recomputation, blocking collectives) in between.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from srift.profiling.clocks import CudaClock, WallClock
from srift.profiling.host import host_times


# What a step is for (``_Pending.role``): a measured step; after the measured ones, srift's pairs of
# one step without the leaf hooks and one with them (what the hooks cost, docs/profiling.md).
MEASURED, UNHOOKED, PAIRED = "measured", "unhooked", "paired"
# Marks in a backward pass's event list besides leaves (>= 0) and parameter-ready marks (-1).
PAUSE, RESUME = -2, -3


@dataclass
class IterationTimes:
    """What one measured iteration took."""

    layer_fwd_s: dict[int, float]
    layer_bwd_s: dict[int, float]
    data_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    total_s: float
    micro_batches: int
    recompute_s: float = 0.0
    hooked: bool = True  # False: a whole-step time (no leaf timed: compiled, or srift's unhooked steps)
    after_backward_s: float = 0.0  # end of the last backward pass to the optimizer step (DDP: its wait for comm)
    # Timed intervals per leaf: forward calls, and backward stretches (from its output's gradient
    # mark): what srift's hooks cost the step is taken out of the layers per interval.
    layer_fwd_calls: dict[int, int] = field(default_factory=dict)
    layer_bwd_calls: dict[int, int] = field(default_factory=dict)
    # Host time (srift/profiling/host.py): ``data_s`` is the data iterator's next() calls;
    # ``zero_grad_s`` the zero_grad calls; ``host_s`` the rest of the time before the first forward.
    zero_grad_s: float = 0.0
    host_s: float = 0.0


@dataclass
class Pending:
    """Marks of the iteration in progress (resolved at the step's end, or one step later on CUDA)."""

    fwd: list[tuple[int, Any, Any]] = field(default_factory=list)  # (leaf, start, end)
    bwd_events: list[tuple[int, Any]] = field(default_factory=list)  # (leaf or -1 for param-ready, mark)
    bwd_passes: list[int] = field(default_factory=list)  # index into bwd_events where a pass starts
    recompute: list[tuple[Any, Any]] = field(default_factory=list)  # (start, end) of leaf recomputations
    root_fwd: list[tuple[Any, Any]] = field(default_factory=list)
    root_bwd: list[tuple[Any, Any]] = field(default_factory=list)  # (root output's gradient, pass end)
    opt_start: Any = None
    opt_end: Any = None
    other_opt: list[tuple[Any, Any]] = field(default_factory=list)  # (start, end) of the script's other optimizers
    other_start: Any = None
    host_calls: list[tuple[str, Any, Any]] = field(default_factory=list)  # (kind, start, end): srift.profiling.host
    start: Any = None  # the iteration's start and end marks (set by the runner)
    end: Any = None
    measured: bool = False
    # MEASURED; after the measured steps, srift's pairs: UNHOOKED (leaf hooks out), then PAIRED (in).
    role: str = MEASURED
    events: list[Any] = field(default_factory=list)  # CUDA events to give back to the pool



def iteration_times(pend: Pending, clock: WallClock | CudaClock) -> IterationTimes:
    """The times of a closed, measured iteration (waits for its end mark to have run)."""
    el = clock.elapsed_s
    clock.wait(pend.end)
    fwd: dict[int, float] = defaultdict(float)
    fwd_calls: dict[int, int] = defaultdict(int)
    for i, a, b in pend.fwd:
        fwd[i] += max(el(a, b), 0.0)  # a CPU mark may be up to MARK_READ_S early (WallClock.mark)
        fwd_calls[i] += 1
    bwd, bwd_calls, backward_s = _backward_times(pend, el)
    ends = [b for _, b in pend.root_bwd if b is not None]
    last_end = pend.bwd_events[-1][1] if pend.bwd_events else (ends[-1] if ends else None)
    after_s = el(last_end, pend.opt_start) if last_end is not None and pend.opt_start is not None else 0.0
    forward_s = sum(el(a, b) for a, b in pend.root_fwd)
    opt_s = el(pend.opt_start, pend.opt_end) if pend.opt_start is not None and pend.opt_end is not None else 0.0
    opt_s += sum(el(a, b) for a, b in pend.other_opt)
    data_s, zero_grad_s, host_s = host_times(pend.host_calls, pend.start, pend.root_fwd[0][0] if pend.root_fwd else None, el)
    total_s = el(pend.start, pend.end)
    recompute_s = sum(el(a, b) for a, b in pend.recompute)
    return IterationTimes(dict(fwd), dict(bwd), data_s, forward_s, backward_s, opt_s, total_s,
                          len(pend.root_fwd), recompute_s, hooked=bool(pend.fwd), after_backward_s=max(after_s, 0.0),
                          layer_fwd_calls=dict(fwd_calls), layer_bwd_calls=dict(bwd_calls),
                          zero_grad_s=zero_grad_s, host_s=host_s)


def _backward_times(pend: Pending, el: Callable[[Any, Any], float]) -> tuple[dict[int, float], dict[int, int], float]:
    """Backward seconds per leaf, timed stretches per leaf, and the backward passes' seconds."""
    bwd: dict[int, float] = defaultdict(float)
    bwd_calls: dict[int, int] = defaultdict(int)
    for i, _ in pend.bwd_events:
        if i >= 0:
            bwd_calls[i] += 1
    backward_s = 0.0
    bounds = pend.bwd_passes + [len(pend.bwd_events)]
    for k in range(len(pend.bwd_passes)):
        events = pend.bwd_events[bounds[k]:bounds[k + 1]]
        if not events:
            continue
        # The pass ends at its last mark (the engine's end-of-pass callback). A leaf's backward
        # runs from its mark to the next leaf's (the last: to the pass's end), less the paused
        # stretches (recomputation, blocking collectives) in between.
        backward_s += el(events[0][1], events[-1][1])
        cur, since = -1, None
        for i, mark in events:
            if i >= 0 or i == PAUSE:
                if cur >= 0 and since is not None:
                    bwd[cur] += max(el(since, mark), 0.0)
                since = None if i == PAUSE else mark
                if i >= 0:
                    cur = i
            elif i == RESUME:
                since = mark
        if cur >= 0 and since is not None:
            bwd[cur] += max(el(since, events[-1][1]), 0.0)
    if not pend.bwd_passes:  # no leaf timed (compiled, or the unhooked steps): the root's passes
        backward_s = sum(el(a, b) for a, b in pend.root_bwd if b is not None)
    return bwd, bwd_calls, backward_s


def middle_half(values: list[float]) -> list[int]:
    """Indices (ascending) of the middle half of ``values`` by value: the lowest and highest
    ``floor(n / 4)`` left out; below 4 values, all of them."""
    cut = len(values) // 4
    order = sorted(range(len(values)), key=lambda k: values[k])
    return sorted(order[cut:len(values) - cut])


def interquartile_mean(values: list[float]) -> float:
    """The mean of ``middle_half(values)`` (0 for none)."""
    keep = middle_half(values)
    return statistics.fmean(values[k] for k in keep) if keep else 0.0


def steady_steps(records: list[IterationTimes]) -> list[int]:
    """Indices of the middle half of the measured steps by their total time (the fastest and
    slowest ``floor(n / 4)`` left out; below 4 steps, all of them: ``middle_half``). Other work on the machine only
    ever lengthens a step, in bursts: the trimmed mean leaves those steps out (and the odd step that
    runs early because the previous one overran) while averaging the rest, steadier than a median
    over a few dozen steps. Every layer and phase is averaged over these same steps, so the layers'
    times still add up within their phase's, which trimming each quantity on its own would not keep."""
    return middle_half([r.total_s for r in records])

