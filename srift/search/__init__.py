"""Search the catalog for the best cluster: enumerate, prune, simulate, price, constrain, rank.

``space`` says which configurations exist and which are left out before simulating (over the
budget, out of memory, unsupported GPUs, a global batch that does not divide) and groups the rows
of every region by hardware; ``sweep`` simulates each hardware's node counts once, skipping the
counts a bound shows cannot win; ``mixes`` adds two-type clusters; ``offers`` prices every
simulation in every region and market at once and checks the limits at the confidence
(``confidence``); ``rank`` orders what meets them and applies the simplicity rule; ``limits``
holds what the user asked for.

Objectives: ``throughput`` (expected samples/s, highest first) or ``cost`` (job cost when a job
length is known, else $ per million samples, lowest first). Default: cost when a deadline is
given, else throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from srift.bounds import MAX_SEARCH_SIMULATIONS
from srift.catalog.instances import Instance
from srift.catalog.provenance import price_provenance
from srift.catalog.spec import cluster_of, label_of
from srift.cluster import Cluster
from srift.job import JobLength
from srift.search.bounded import Bound, run_bounded
from srift.search.diagnose import binding, limit_misses
from srift.search.limits import Constraints
from srift.search.mixes import sweep_mixes
from srift.search.offers import OfferTable
from srift.search.rank import Candidate, Exclusion, SearchResult, explain_failure, families_of, objective_key, order, pareto
from srift.search.space import Market, Space, build_space, instance_types, wheel_runs
from srift.search.sweep import MAX_COMPARED, CountSweep, Progress
from srift.simulate.prediction import Prediction

MAX_POINTS = 5000  # priced configurations kept for the plot
MAX_TIE_REGIONS = 20  # the best-ranked configurations whose regions are counted before ranking (ties)


@dataclass(frozen=True)
class SweepOptions:
    """How the counts are swept.

    Attributes:
        bound: ``cluster -> samples/s`` no prediction on it exceeds (None: unknown), known without
            simulating: the counts are then swept best bound first (srift/search/bounded.py).
        max_simulations: The cap on simulations (MAX_SEARCH_SIMULATIONS, docs/limits.md).
        compared: The best configurations a bounded sweep keeps exact (MAX_COMPARED, what the
            ranking compares; fewer only where a test wants pruning on a small catalog).
    """

    bound: Bound | None = None
    max_simulations: int = MAX_SEARCH_SIMULATIONS
    compared: int = MAX_COMPARED


def search(
    catalog: Sequence[Instance],
    predict: Callable[[Cluster], Prediction],
    constraints: Constraints,
    length: JobLength | None = None,
    per_gpu_memory_ok: Callable[[Instance], bool] | None = None,
    global_batch_size: int | None = None,
    progress: Progress | None = None,
    exhaustive: bool = False,
    grad_accum: int = 1,
    count_ok: Callable[[Instance, int], bool] | None = None,
    sweep_options: SweepOptions = SweepOptions(),
) -> SearchResult:
    """Find the best configurations (see module docstring).

    Args:
        catalog: Catalog rows to consider (any clouds and regions).
        predict: Predicts one cluster (``Predictor(profile, job).predict``).
        constraints: Limits, objective, confidence and search-space options.
        length: The job's length (job hours and cost; needed by a deadline or a maximum cost).
        per_gpu_memory_ok: Cheap pre-check that the job fits on one GPU of a type (skips
            simulating types that cannot hold it); None: rely on the prediction.
        global_batch_size: The job's fixed global batch, if any (counts that do not divide it are
            left out rather than changing it).
        progress: Called with (simulations done, most there could be) as the search goes.
        exhaustive: Simulate every count instead of bounding (what tests and benchmarks compare the
            bound against).
        grad_accum: Micro-batches per optimizer step: with a fixed global batch, each micro-batch
            (the global batch / grad_accum) must divide over the GPUs.
        count_ok: ``(instance, nodes) -> bool``: the counts that can train the job and meet its
            limits, instead of the global batch dividing over the GPUs (a layout's data parallelism
            takes only part of them); the counts are then bounded as without a fixed global batch.
        sweep_options: A throughput bound to sweep by, and the cap on simulations.

    Raises:
        SriftError: for a deadline or maximum cost without a length, a step count without a
            fixed global batch, or no type to search.
    """
    c = constraints
    c.require_length(length, global_batch_size)
    per_micro_batch = None if global_batch_size is None else global_batch_size // grad_accum
    space = build_space(instance_types(catalog, c), c, per_gpu_memory_ok, None if count_ok else per_micro_batch, count_ok)
    table = OfferTable(space, c, length)
    sweep = CountSweep(space, table, predict, c, length,
                       dense=exhaustive or (global_batch_size is not None and count_ok is None), progress=progress,
                       max_simulations=sweep_options.max_simulations)
    if sweep_options.bound is not None and not exhaustive:
        run_bounded(sweep, sweep_options.bound, sweep_options.compared)
    else:
        sweep.run()
    simulated = sweep.simulations
    if c.mixed and not sweep.capped:
        simulated += sweep_mixes(sweep, predict, c, global_batch_size)
    return _result(table, c, simulated, predict, sweep.max_simulations if sweep.capped else None)


def _candidate(table: OfferTable, i: int) -> Candidate:
    cand = table.candidate(i)
    cand.supported = all(wheel_runs(inst) for inst, _, _ in table.parts(i))
    return cand


def _result(table: OfferTable, c: Constraints, simulated: int, predict: Callable[[Cluster], Prediction],
            cap: int | None = None) -> SearchResult:
    space = table.space
    t = table.cols
    ranked = table.ranked()
    feasible = [_candidate(table, int(i)) for i in ranked[:MAX_COMPARED]]
    # Where each is offered settles ties (more regions: more available); the leaders are where ties matter.
    for cand_i, cand in zip(ranked[:MAX_TIE_REGIONS], feasible):
        cand.regions = table.same_price_regions(int(cand_i))
    recs, why = order(feasible, c.goal, c.top, c.ranking_confidence, c.diverse) if feasible else ([], None)
    for cand_i, cand in zip(ranked, feasible):
        if any(cand is r for r in recs) and len(cand.regions) <= 1:
            cand.regions = table.same_price_regions(int(cand_i))
    nodes = table.core_column("nodes")[t["core"].astype(np.int64)] if len(t["core"]) else np.zeros(0)
    best_single = None
    if recs and recs[0].nodes > 1:
        one = ranked[nodes[ranked] == 1] if len(ranked) else ranked
        best_single = _candidate(table, int(one[0])) if len(one) else None
    pruned = dict(space.pruned)
    bound = space.considered - len(table) - sum(pruned.values())
    if bound > 0:
        pruned["bound" if cap is None else "cap"] = bound  # what the cap left unsimulated, when it bound
    result = SearchResult(
        recommendations=recs, considered=space.considered, evaluated=len(table), simulated=simulated,
        frontier=_frontier(table), evaluated_points=_points(table), objective=c.goal, pruned=pruned,
        best_single_node=best_single, simpler_choice=why, confidence=c.confidence,
        regions_searched=tuple(f"{cloud}/{region}" for cloud, region in space.places),
        families=families_of(feasible), ranked_at=c.ranking_confidence,
    )
    if recs and c.ranking_confidence is not None:
        first = min(feasible, key=objective_key(c.goal))
        if first.instance != recs[0].instance and (result.simpler_choice is None or first is not result.simpler_choice.over):
            result.best_at_median = first
    if not recs:
        everything = table.ranked(feasible=False)
        closest_pool = [_candidate(table, int(i)) for i in _closest_pool(table, everything)]
        result.cut_by, result.closest = explain_failure(closest_pool, bool(pruned.get("budget")))
        if not closest_pool and pruned.get("layout"):  # count_ok left no count to simulate
            result.cut_by = "layout"
        if result.cut_by == "budget":
            result.closest = _cheapest_that_fits(space, c, predict)
        result.misses = limit_misses(table, c, lambda i: _candidate(table, i)) if result.cut_by in ("deadline", "max-cost") else []
        binds = binding(result.misses)
        if binds is not None:
            result.cut_by, result.closest = binds.limit, binds.closest
    return result


def _closest_pool(table: OfferTable, idx: np.ndarray) -> np.ndarray:
    """The offers that can come closest to a limit: least memory, fewest hours, lowest cost."""
    t = table.cols
    if len(idx) == 0:
        return idx
    picks = {int(idx[np.argmin(t["hours_q"][idx])]) if not np.isnan(t["hours_q"][idx]).all() else int(idx[0])}
    if not np.isnan(t["cost_q"][idx]).all():
        picks.add(int(idx[np.nanargmin(t["cost_q"][idx])]))
    mem = np.array([table.cores[int(t["core"][i])].prediction.memory_per_gpu_bytes for i in idx])
    picks.add(int(idx[np.argmin(mem)]))
    fits = idx[t["reason"][idx] != Exclusion.MEMORY]
    if len(fits):
        picks.add(int(fits[np.nanargmin(np.where(np.isnan(t["hours_q"][fits]), np.inf, t["hours_q"][fits]))]))
        cq = np.where(np.isnan(t["cost_q"][fits]), np.inf, t["cost_q"][fits])
        picks.add(int(fits[np.argmin(cq)]))
    return np.array(sorted(picks), dtype=np.int64)


def _frontier(table: OfferTable) -> list[Candidate]:
    """Pareto-optimal priced configurations (price vs expected throughput), cheapest first."""
    t = table.cols
    if not len(t["core"]):
        return []
    order_ = np.lexsort((-t["throughput"], t["price"]))
    tp = t["throughput"][order_]
    running = np.maximum.accumulate(np.concatenate([[-1.0], tp[:-1]]))
    keep = order_[tp > running]
    return pareto(_candidate(table, int(i)) for i in keep)


def _points(table: OfferTable) -> list[tuple[float, float, bool, str]]:
    """(price, expected throughput, feasible, GPU types) of the priced configurations, at most MAX_POINTS."""
    t = table.cols
    n = len(t["core"])
    idx = np.arange(n) if n <= MAX_POINTS else np.linspace(0, n - 1, MAX_POINTS).round().astype(np.int64)
    gpus = ["+".join(core.prediction.gpu_types) for core in table.cores]
    return [(float(t["price"][i]), float(t["throughput"][i]), bool(t["feasible"][i]), gpus[int(t["core"][i])]) for i in idx]


def _cheapest_that_fits(space: Space, c: Constraints, predict: Callable[[Cluster], Prediction]) -> Candidate | None:
    """One instance of the cheapest type the job fits on (spot when allowed and cheaper), priced
    whatever the budget: what the nearest configuration would cost."""
    fitting = [g for g in space.groups if g.memory_ok]
    if not fitting:
        return None
    best: tuple[float, Instance, bool] | None = None
    for g in fitting:
        for r in g.rows:
            inst = space.rows[int(r)]
            for spot in ([False, True] if c.spot else [False]):
                p = inst.usd_per_hour(spot)
                if p is not None and (best is None or p < best[0]):
                    best = (p, inst, spot)
    if best is None:
        return None
    price, inst, spot = best
    parts = [(inst, 1, spot)]
    cluster = cluster_of(parts)
    pred = predict(cluster)
    return Candidate(cluster.name, label_of(parts), spot, cluster.gpus, cluster.nodes, price, pred,
                     cloud=inst.cloud, region=inst.region, regions=(inst.region,), host_arch=inst.host_arch,
                     supported=wheel_runs(inst), market=Market.SPOT if spot else Market.ON_DEMAND, hardware=(inst.hardware_key,),
                     vcpus_per_gpu=inst.vcpus / inst.gpu_count, flags=inst.flags,
                     price=price_provenance(inst, spot), families=(inst.family,))
