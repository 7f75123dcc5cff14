"""Dominance: a configuration another one beats on time and on money, at the median and at the
ranking quantile, is never the one chosen (srift/search/rank.py's ``order`` and ``choose``).

Each candidate is measured by four figures, lower is better: the job's hours and cost at the
median, and the same at the ranking quantile (the median times the candidate's own exp(z sigma),
srift/search/confidence.py). Without a job length, hours become seconds per sample (1 / expected
throughput) and the cost $ per million samples. A deadline is a limit on hours, a maximum cost on
cost and the objective is one or the other, so these four are "the objective and the limits at
both the median and the ranking quantile"; a budget in $/h is exact and every candidate compared
already meets it.

``a`` dominates ``b`` when ``a`` is no worse than ``b`` on every figure and better by more than
``TIE_FRACTION`` (rank.py's tie: objectives closer than it are equal) on at least one; figures
within ``TIE_FRACTION`` count as equal, so noise never makes a plan dominated. The Mixtral 8x7B
case of issue 50: 4 nodes at $30,052 / $37,960 and 65.9 / 83.3 h against 2 nodes at $30,231 /
$38,183 and 132.7 / 167.6 h: the 4-node plan is no worse on cost and half the hours, so the
2-node plan is dominated, however much simpler.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

import numpy as np


class Measured(Protocol):
    """What dominance reads of a candidate (srift/search/rank.py's Candidate)."""

    @property
    def job_hours(self) -> float | None: ...
    @property
    def job_cost_usd(self) -> float | None: ...
    @property
    def expected_throughput_samples_per_s(self) -> float: ...
    @property
    def usd_per_million_samples(self) -> float | None: ...
    def quantile_factor(self, confidence: float | None) -> float: ...


C = TypeVar("C", bound=Measured)

#: Figures closer than this fraction are equal (the same as rank.TIE_FRACTION; far below any validated error).
TIE_FRACTION = 0.01


def figures(c: Measured, confidence: float | None) -> tuple[float, float, float, float]:
    """(hours, cost, hours at the quantile, cost at the quantile), lower is better (module docstring)."""
    q = c.quantile_factor(confidence)
    if c.job_hours is not None and c.job_cost_usd is not None:
        hours, cost = c.job_hours, c.job_cost_usd
    else:
        tp = c.expected_throughput_samples_per_s
        hours = 1.0 / tp if tp > 0 else math.inf
        cost = c.usd_per_million_samples if c.usd_per_million_samples is not None else math.inf
    return hours, cost, hours * q, cost * q


def dominates(a: Measured, b: Measured, confidence: float | None) -> bool:
    """True when ``a`` is no worse than ``b`` on every figure and better by more than TIE_FRACTION on one."""
    fa, fb = np.array(figures(a, confidence)), np.array(figures(b, confidence))
    return bool(np.all(fa <= fb * (1.0 + TIE_FRACTION)) and np.any(fa < fb * (1.0 - TIE_FRACTION)))


def dominated(cands: Sequence[Measured], confidence: float | None) -> list[bool]:
    """For each candidate, whether another of ``cands`` dominates it (one pass over all pairs)."""
    if not cands:
        return []
    f = np.array([figures(c, confidence) for c in cands])  # (n, 4)
    no_worse = np.all(f[:, None, :] <= f[None, :, :] * (1.0 + TIE_FRACTION), axis=2)  # [i, j]: i no worse than j
    better = np.any(f[:, None, :] < f[None, :, :] * (1.0 - TIE_FRACTION), axis=2)
    beats = no_worse & better
    np.fill_diagonal(beats, False)
    return [bool(x) for x in beats.any(axis=0)]


def dominator(c: C, cands: Sequence[C], confidence: float | None) -> C | None:
    """The first of ``cands`` that dominates ``c``, or None."""
    return next((o for o in cands if o is not c and dominates(o, c, confidence)), None)
