"""The count sweep: which node counts of each hardware to simulate, and the bound that skips the
counts that cannot win, so that a search's cost grows at most linearly with ``--max-gpus``.

**The monotonicity it relies on.** For n >= 2 nodes of one hardware and a fixed per-GPU batch,
the throughput per node p(n) = T(n) / n does not increase with n: more nodes only add all-reduce
steps and network traffic (srift/perf/comm.py: ring and hierarchical all-reduce times grow with
the node count) and never make a GPU compute faster; and a job that fits in memory on n nodes fits
on more (memory per GPU does not grow with n). On spot, the useful fraction falls as nodes (and
interruptions) are added. tests/test_search_scaling.py checks both on every hardware of the
catalog for the zoo's models; the sweep checks them again on every count it simulates and, where
one fails by more than TOLERANCE, simulates every count of that hardware instead (as it does with
a fixed global batch, whose few valid counts are all simulated).

**The bound.** Between two simulated counts a < n < b of a hardware, for each of its offers
(region, market):

    T(n)       <= n p(a) u(a)                      (u: the spot useful fraction)
    $/sample   >= price per node / (p(a) u(a))
    job hours  >= samples / ((b - 1) p(a) u(a)),   job cost >= samples x price per node / (p(a) u(a))

A gap is left out ("bound") when no count in it can meet the limits or reach the threshold: the
objective value of the k-th best configuration found so far, loosened by the reach of the
simplicity rule (configurations within their combined typical error of the best are the ones the
rule compares). Otherwise its middle count is simulated and the gap split. Seeds: 1 and 2 nodes,
powers of two, the largest count and each offer's budget cap (srift/search/space.py), so a sweep
needs about log2(largest count) rounds and simulates mostly around the winners.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from srift.bounds import MAX_SEARCH_SIMULATIONS
from srift.catalog.spec import one_type_cluster
from srift.cluster import Cluster
from srift.job import JobLength
from srift.search.limits import THROUGHPUT, Constraints
from srift.search.offers import OfferTable
from srift.search.space import HardwareGroup, Market, Space, seed_counts
from srift.simulate.prediction import Prediction
from srift.simulate.spot import useful_fraction

TOLERANCE = 0.01  # relative slack on the monotonicity (the bound multiplies by 1 + TOLERANCE)
MAX_REACH = 1.0  # the simplicity rule compares configurations within at most 100 % of the best
# Feasible configurations the simplicity rule compares (the best by the objective; srift.search
# ranks no more): the recommendations are drawn from them, so the bound keeps the counts that can
# enter them (``--top`` beyond it changes nothing the search simulates).
MAX_COMPARED = 300

Progress = Callable[[int, int], None]


class CountSweep:
    """Simulates each hardware group's node counts, seeds first, then the gaps that can matter.

    Args:
        space: Rows, groups and markets.
        table: Where simulations are priced.
        predict: Predicts one cluster.
        c: Limits and options.
        length: The job's length, or None.
        dense: Simulate every count (a fixed global batch: the per-GPU batch changes with the count).
        progress: Called with (simulations done, most there could be).
        max_simulations: The cap (``capped`` once it is reached; the counts beyond it are not simulated).
    """

    def __init__(self, space: Space, table: OfferTable, predict: Callable[[Cluster], Prediction], c: Constraints,
                 length: JobLength | None, dense: bool = False, progress: Progress | None = None,
                 max_simulations: int = MAX_SEARCH_SIMULATIONS) -> None:
        self.space, self.table, self.predict, self.c, self.length = space, table, predict, c, length
        self.progress = progress
        self.max_simulations = max_simulations
        self.capped = False
        self.groups = [g for g in space.groups if g.memory_ok and g.max_count > 0]
        self.core_of: dict[tuple[int, int], int] = {}  # (group, count) -> core index
        self._counts: dict[int, list[int]] = {g.index: [] for g in self.groups}
        self._caps: dict[tuple[int, int], np.ndarray] = {}
        self.dense: set[int] = {g.index for g in self.groups} if dense else set()
        self.total = sum(int(np.count_nonzero(g.counts <= g.max_count)) for g in self.groups)
        self.simulations = 0

    # ---- simulating ---------------------------------------------------------------------------
    def simulate(self, group: HardwareGroup, counts: np.ndarray) -> None:
        """Simulate the counts not yet simulated (on spot when spot is searched, which gives the
        checkpoint time spot offers need) and price them in every region and market."""
        new = [int(n) for n in counts if (group.index, int(n)) not in self.core_of]
        room = self.max_simulations - self.simulations
        if len(new) > room:
            new, self.capped = new[:max(room, 0)], True
        if not new:
            return
        spot = self.c.spot
        ids = []
        for n in new:
            pred = self.predict(one_type_cluster(group.rep, n, spot))
            ids.append(self.table.add_core(((group.index, n),), pred))
            self.core_of[(group.index, n)] = ids[-1]
        self._counts[group.index] = sorted(self._counts[group.index] + new)
        self.simulations += len(new)
        self.table.price_single(ids, group.rows, np.asarray(new, dtype=np.int64))
        if self.progress is not None:
            self.progress(self.simulations, self.total)

    def simulated(self, group: HardwareGroup) -> np.ndarray:
        """The counts of a group simulated so far, ascending."""
        return np.asarray(self._counts.get(group.index, []), dtype=np.int64)

    def _cap(self, g: HardwareGroup, market: Market) -> np.ndarray:
        key = (g.index, market)
        if key not in self._caps:
            self._caps[key] = self.space.budget_cap(g.rows, market, self.c.budget_usd_per_hour)
        return self._caps[key]

    def _core(self, group: HardwareGroup, n: int) -> Prediction:
        return self.table.cores[self.core_of[(group.index, n)]].prediction

    # ---- the sweep ----------------------------------------------------------------------------
    def run(self) -> None:
        """Seeds, then rounds of bisection of the gaps that can matter, until none can."""
        for g in self.groups:
            self.simulate(g, g.counts[g.counts <= g.max_count] if g.index in self.dense else seed_counts(g, self.space, self.c))
        while True:
            threshold = self.table.threshold(min(max(self.c.top, 2), MAX_COMPARED), self.reach())
            todo: list[tuple[HardwareGroup, np.ndarray]] = []
            for g in self.groups:
                if g.index in self.dense:
                    todo.append((g, g.counts[g.counts <= g.max_count]))
                    continue
                mids = self._promising_midpoints(g, threshold)
                if len(mids):
                    todo.append((g, mids))
            todo = [(g, n) for g, n in todo if any((g.index, int(x)) not in self.core_of for x in n)]
            if not todo or self.capped:
                return
            for g, counts in todo:
                before = self.simulated(g)
                self.simulate(g, counts)
                if g.index not in self.dense and not self._monotone(g, before):
                    self.dense.add(g.index)

    def reach(self) -> float:
        """How far from the best the simplicity rule looks: the largest combined typical error of
        two simulated predictions (the root-sum-square of the two largest), capped at MAX_REACH."""
        errs = sorted((c.prediction.typical_error_pct or 0.0) for c in self.table.cores)[-2:]
        return min(MAX_REACH, math.hypot(*errs) / 100.0)

    def _monotone(self, g: HardwareGroup, before: np.ndarray) -> bool:
        """Whether the counts just simulated keep p(n) non-increasing and memory fit monotone (from
        2 nodes on), within TOLERANCE."""
        counts = self.simulated(g)
        counts = counts[counts >= 2]
        if len(counts) < 2:
            return True
        preds = [self._core(g, int(n)) for n in counts]
        per_node = np.array([p.throughput_samples_per_s for p in preds]) / counts
        fits = np.array([p.fits_in_memory for p in preds])
        rises = per_node[1:] > per_node[:-1] * (1.0 + TOLERANCE)
        return not rises.any() and not (fits[:-1] & ~fits[1:]).any()

    def _promising_midpoints(self, g: HardwareGroup, threshold: float) -> np.ndarray:
        """Middle counts of the gaps between simulated counts that can hold a count worth simulating."""
        sims = self.simulated(g)
        sims = sims[sims <= g.max_count]
        if len(sims) < 2:
            return sims[:0]
        a, b = sims[:-1], sims[1:]
        gap = (b - a > 1) & (a >= 2)
        if not gap.any():
            return sims[:0]
        a, b = a[gap], b[gap]
        pa = [self._core(g, int(x)) for x in a]
        per_node = np.array([p.throughput_samples_per_s for p in pa]) / a * (1.0 + TOLERANCE)
        ckpt = np.array([(p.spot.checkpoint_s if p.spot is not None else 0.0) for p in pa])
        fits_b = np.array([self._core(g, int(x)).fits_in_memory for x in b])
        c, s = self.c, self.space
        samples = self.length.data_samples if self.length is not None else None
        promising = np.zeros(len(a), dtype=bool)
        for m in s.markets:
            rows = g.rows[:, None]
            cap = self._cap(g, m)[:, None]
            hi = np.minimum(b[None, :] - 1, cap)  # the largest affordable count in each gap
            valid = (hi >= a[None, :] + 1) & fits_b[None, :]
            if not valid.any():
                continue
            rate = s.interruptions(rows, m, a[None, :] + 1)
            u = np.where(rate > 0, useful_fraction(rate, ckpt[None, :]), 1.0)
            t_ub = hi * per_node[None, :] * u
            if m == Market.SPOT_MIX:
                per_node_price = (s.on_demand[rows] + (hi - 1) * s.spot[rows]) / np.maximum(hi, 1)
            else:
                per_node_price = s.price(rows, m, 1)
            with np.errstate(invalid="ignore", divide="ignore"):
                per_sample = per_node_price / (per_node[None, :] * u)  # $ per sample-second, at best
                ok = valid & ~np.isnan(per_node_price)
                if samples is not None:
                    hours_lb = samples / (t_ub * 3600.0)
                    cost_lb = samples * per_sample / 3600.0
                    if c.deadline_hours is not None:
                        ok &= hours_lb <= c.deadline_hours
                    if c.max_cost_usd is not None:
                        ok &= cost_lb <= c.max_cost_usd
                if c.goal == THROUGHPUT:
                    best = -t_ub
                elif samples is not None:
                    best = samples * per_sample / 3600.0
                else:
                    best = per_sample / 3600.0 * 1e6
            promising |= (ok & (best <= threshold)).any(axis=0)
        a, b = a[promising], b[promising]
        # The valid count nearest below the middle (not every count exists when some cannot train
        # the job), or the first one above it; none when the gap holds none.
        valid = g.counts
        mid = (a + b) // 2
        below = valid[np.clip(np.searchsorted(valid, mid, side="right") - 1, 0, len(valid) - 1)]
        above = valid[np.clip(np.searchsorted(valid, mid, side="left"), 0, len(valid) - 1)]
        pick = np.where(below > a, below, above)
        return np.unique(pick[(pick > a) & (pick < b)])

