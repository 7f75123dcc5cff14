"""The bounded sweep: the node counts of a search whose predictions come with a cheap upper bound
on their throughput (a layout search: srift/simulate/layout/bound.py), simulated best bound first
and only while they can change the answer.

A layout search breaks the count sweep's monotonicity (srift/search/sweep.py: a larger count can
admit a faster layout), so without a bound every count is simulated. With one, each (hardware,
count) gets, before any simulation, the best objective any of its offers could reach: its price is
known, its throughput at most the bound, its hours and cost at least what that throughput gives.
A count is left out ("bound") when that best is worse than the MAX_COMPARED-th best simulated
offer's, loosened by the simplicity rule's reach (``OfferTable.threshold``): it cannot enter the
configurations the ranking compares, so the ranking sees exactly the MAX_COMPARED best of
simulating every count, and the rows, the simpler choice and the families are theirs. (``--top``
does not narrow it, as it narrows the count sweep's bound: the rows after the first are the best
of each other family among those MAX_COMPARED, which a narrower bound would leave incomplete.)
A count whose bound cannot meet the limits (deadline, maximum cost) cannot be feasible: it is
simulated only while no configuration meets them (what came closest is then reported).

Two bounds: a loose one, the blocks' compute alone (shared by every instance type of a GPU, so
every count gets it at once), and a tight one, with the communication the layout search bounds a
slot with (per cluster, computed only for the counts the loose one keeps, when the sweep reaches
them; the layout search reuses its slots). One node of each hardware is always simulated (the
best single-node configuration is reported). Counts go in batches of BATCH, best bound first, the
thresholds tightening after each. Every simulation is checked against its bound; one above it
(beyond TOLERANCE) stops the pruning and the rest are simulated. The sweep's cap
(MAX_SEARCH_SIMULATIONS, docs/limits.md) ends a search that would still simulate more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from srift.catalog.spec import one_type_cluster
from srift.cluster import Cluster
from srift.search.limits import THROUGHPUT
from srift.search.space import HardwareGroup, Market
from srift.search.sweep import MAX_COMPARED, TOLERANCE, CountSweep

BATCH = 8  # counts simulated between two updates of the thresholds

Bound = Callable[[Cluster, bool], "float | None"]  # (cluster, tight) -> samples/s at most, or None


@dataclass
class Pairs:
    """The (hardware, count) pairs of a bounded sweep, as columns.

    Attributes:
        group: Index into the sweep's groups.
        count: Nodes.
        bound: Throughput bound (samples/s; inf where there is none): the loose one until
            ``tight`` says the tight one replaced it.
        best: The best objective any offer of the pair can reach under ``bound`` (inf: none can
            meet the limits).
        tight: The tight bound is in ``bound``.
        done: Simulated.
    """

    group: np.ndarray
    count: np.ndarray
    bound: np.ndarray
    best: np.ndarray
    tight: np.ndarray
    done: np.ndarray


def _optimism(sweep: CountSweep, g: HardwareGroup, counts: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """The best objective each count of ``g`` can reach with throughput at most ``bound``."""
    s, c = sweep.space, sweep.c
    samples = sweep.length.data_samples if sweep.length is not None else None
    best = np.full(len(counts), np.inf)
    rows = g.rows[:, None]
    budget = np.inf if c.budget_usd_per_hour is None else c.budget_usd_per_hour + 1e-9
    for m in s.markets:
        price = s.price(rows, m, counts[None, :])
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = ~np.isnan(price) & (price <= budget) & ((counts >= 2) | (m != Market.SPOT_MIX))[None, :]
            per_sample = price / bound[None, :]  # $ per sample-second, at best
            if samples is not None:
                if c.deadline_hours is not None:
                    ok &= (samples / (bound * 3600.0) <= c.deadline_hours)[None, :]
                if c.max_cost_usd is not None:
                    ok &= samples * per_sample / 3600.0 <= c.max_cost_usd
            if c.goal == THROUGHPUT:
                value = np.broadcast_to(-bound[None, :], price.shape)
            elif samples is not None:
                value = samples * per_sample / 3600.0
            else:
                value = per_sample / 3600.0 * 1e6
        best = np.minimum(best, np.where(ok, value, np.inf).min(axis=0, initial=np.inf))
    return best


def _bound(sweep: CountSweep, bound: Bound, g: HardwareGroup, n: int, tight: bool) -> float:
    found = bound(one_type_cluster(g.rep, n, sweep.c.spot), tight)
    return np.inf if found is None else float(found)


def pairs_of(sweep: CountSweep, bound: Bound) -> Pairs:
    """Every count of every group of ``sweep`` with its loose bound and the best objective under it."""
    cols: list[list[np.ndarray]] = [[], [], [], []]
    for i, g in enumerate(sweep.groups):
        counts = g.counts[g.counts <= g.max_count]
        bounds = np.array([_bound(sweep, bound, g, int(n), False) for n in counts], dtype=float)
        for col, values in zip(cols, (np.full(len(counts), i), counts, bounds, _optimism(sweep, g, counts, bounds))):
            col.append(values)
    group, count, bounds, best = (np.concatenate(col) if col else np.zeros(0) for col in cols)
    n = len(group)
    return Pairs(group.astype(np.int64), count.astype(np.int64), bounds, best, np.zeros(n, dtype=bool),
                 np.zeros(n, dtype=bool))


def _tighten(sweep: CountSweep, bound: Bound, pairs: Pairs, i: int) -> None:
    g = sweep.groups[int(pairs.group[i])]
    b = min(pairs.bound[i], _bound(sweep, bound, g, int(pairs.count[i]), True))
    pairs.bound[i] = b
    pairs.best[i] = _optimism(sweep, g, pairs.count[i:i + 1], np.array([b]))[0]
    pairs.tight[i] = True


def _next_batch(sweep: CountSweep, bound: Bound, pairs: Pairs, threshold: float) -> np.ndarray:
    """Up to BATCH pairs not simulated that can still matter, best bound first (each one's tight
    bound computed when it is reached)."""
    must = pairs.count == 1
    # A count whose bound cannot meet the limits cannot be feasible: simulated only while nothing
    # is (what comes closest to them is then said, srift.search.explain_failure).
    if np.isinf(threshold) and sweep.table.cols["feasible"].any():
        threshold = np.finfo(float).max
    picked: list[int] = []
    left = np.nonzero(~pairs.done)[0]
    for i in left[np.argsort(pairs.best[left], kind="stable")]:
        if len(picked) >= BATCH:
            break
        if pairs.best[i] > threshold and not must[i]:
            continue
        if not pairs.tight[i]:
            _tighten(sweep, bound, pairs, int(i))
        if pairs.best[i] <= threshold or must[i]:
            picked.append(int(i))
    if len(picked) < BATCH:  # the single nodes the order did not reach
        rest = np.nonzero(must & ~pairs.done)[0]
        picked.extend(int(i) for i in rest[:BATCH - len(picked)] if int(i) not in picked)
    return np.asarray(picked, dtype=np.int64)


def run_bounded(sweep: CountSweep, bound: Bound, compared: int = MAX_COMPARED) -> None:
    """Simulate the counts of ``sweep``'s groups that can change the answer (module docstring;
    ``compared``: the best offers kept exact, MAX_COMPARED but in tests)."""
    pairs = pairs_of(sweep, bound)
    trusted = True
    while not sweep.capped:
        if trusted:
            pick = _next_batch(sweep, bound, pairs, sweep.table.threshold(compared, sweep.reach()))
        else:
            pick = np.nonzero(~pairs.done)[0]
        if not len(pick):
            return
        pairs.done[pick] = True
        for gi in np.unique(pairs.group[pick]):
            mine = pick[pairs.group[pick] == gi]
            g = sweep.groups[int(gi)]
            sweep.simulate(g, pairs.count[mine])
            got = np.array([sweep.table.cores[sweep.core_of[(g.index, int(n))]].prediction.throughput_samples_per_s
                            for n in pairs.count[mine] if (g.index, int(n)) in sweep.core_of])
            if len(got) == len(mine) and (got > pairs.bound[mine] * (1.0 + TOLERANCE)).any():
                trusted = False  # a bound that does not hold: simulate the rest
