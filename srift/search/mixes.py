"""Two-type mixed clusters (``--mixed``), bounded to the frontier.

Only hardware on the Pareto frontier of the one-type configurations (the faster end, at most
MIX_TYPES) is mixed, two GPU types at a time, within one cloud and region. For each count ``na``
of one (1, 2, 4, ... and its largest simulated count), the other fills what is left: one node,
or as many nodes as the budget and the GPU limit leave (at most MIX_FILLS distinct fills over the
regions' prices). A mix's all-reduce waits for its slower part, so it pays only where it fills a
gap the single types leave; this keeps the number of mixes simulated linear in the largest cluster
instead of quadratic. Like one-type configurations, each mix is simulated once per hardware and
priced in every region that offers both types.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from srift.catalog.spec import cluster_of
from srift.cluster import Cluster
from srift.search.limits import Constraints
from srift.search.offers import OfferTable
from srift.search.space import HardwareGroup, Market, Space
from srift.search.sweep import CountSweep
from srift.simulate.prediction import Prediction

MIX_TYPES = 6
MIX_FILLS = 3


def frontier_groups(space: Space, table: OfferTable, limit: int = MIX_TYPES) -> list[HardwareGroup]:
    """The hardware groups on the Pareto frontier (price vs expected throughput) of the feasible
    one-type offers, the faster end (at most ``limit``), cheapest first."""
    t = table.cols
    single = np.array([len(table.cores[int(k)].parts) == 1 for k in t["core"]], dtype=bool) if len(t["core"]) else np.zeros(0, bool)
    idx = np.nonzero(t["feasible"] & single)[0]
    if len(idx) == 0:
        return []
    order = idx[np.lexsort((-t["throughput"][idx], t["price"][idx]))]
    best = -1.0
    groups: list[int] = []
    for i in order:
        if t["throughput"][i] > best:
            best = float(t["throughput"][i])
            g = table.cores[int(t["core"][i])].parts[0][0]
            if g in groups:
                groups.remove(g)
            groups.append(g)
    return [space.groups[g] for g in groups[-limit:]]


def _pairs_by_place(space: Space, a: HardwareGroup, b: HardwareGroup) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs (a row, b row) in the same cloud and region."""
    ra, rb = [], []
    for i in a.rows:
        for j in b.rows:
            if space.place[i] == space.place[j]:
                ra.append(i)
                rb.append(j)
    return np.asarray(ra, dtype=np.int64), np.asarray(rb, dtype=np.int64)


def sweep_mixes(sweep: CountSweep, predict: Callable[[Cluster], Prediction], c: Constraints,
                global_batch_size: int | None) -> int:
    """Simulate and price the two-type mixes (module docstring); returns how many were simulated."""
    space, table = sweep.space, sweep.table
    front = frontier_groups(space, table)
    markets = (Market.ON_DEMAND, Market.SPOT) if c.spot else (Market.ON_DEMAND,)
    done: dict[tuple[int, int, int, int], int] = {}
    skipped = 0
    for i, ga in enumerate(front):
        for gb in front[i + 1:]:
            if ga.rep.gpu_name == gb.rep.gpu_name:
                continue
            rows_a, rows_b = _pairs_by_place(space, ga, gb)
            if len(rows_a) == 0:
                continue
            for first, second, r1, r2 in ((ga, gb, rows_a, rows_b), (gb, ga, rows_b, rows_a)):
                sims = sweep.simulated(first)
                counts = {int(x) for x in sims if x & (x - 1) == 0} | ({int(sims.max())} if len(sims) else set())
                for n1 in sorted(counts):
                    fills = {n2 for m in markets for n2 in _fills(space, c, first, second, r1, r2, n1, m)}
                    for n2 in sorted(fills):
                        na, nb = (n1, n2) if first is ga else (n2, n1)
                        key = (ga.index, na, gb.index, nb)
                        if key in done:
                            continue
                        # Simulated on spot when spot is searched: the checkpoint time prices spot offers.
                        pred = predict(cluster_of([(ga.rep, na, c.spot), (gb.rep, nb, c.spot)]))
                        if global_batch_size is not None and pred.global_batch_size != global_batch_size:
                            skipped += 1  # the speed split cannot hit the global batch exactly
                            done[key] = -1
                            continue
                        core = done[key] = table.add_core(((ga.index, na), (gb.index, nb)), pred)
                        for m in markets:
                            table.price_pair(core, rows_a, rows_b, na, nb, m)
    if skipped:
        space.pruned["batch"] = space.pruned.get("batch", 0) + skipped
    simulated = sum(1 for v in done.values() if v >= 0)
    space.considered += simulated * len(markets)
    return simulated


def _fills(space: Space, c: Constraints, first: HardwareGroup, second: HardwareGroup, r1: np.ndarray, r2: np.ndarray,
           n1: int, market: Market) -> list[int]:
    """Counts of ``second`` beside ``n1`` nodes of ``first``: one, and what the GPU and node limits and each
    region's budget leave (at most MIX_FILLS distinct)."""
    gpu_room = (c.max_gpus - n1 * first.gpu_count) // second.gpu_count
    if c.max_nodes is not None:
        gpu_room = min(gpu_room, c.max_nodes - n1)
    if gpu_room < 1:
        return []
    caps = np.full(len(r1), gpu_room, dtype=np.int64)
    if c.budget_usd_per_hour is not None:
        left = c.budget_usd_per_hour + 1e-9 - space.price(r1, market, n1)
        unit = space.price(r2, market, 1)
        with np.errstate(invalid="ignore"):
            caps = np.where(np.isnan(left) | np.isnan(unit), 0, np.minimum(caps, np.floor(left / unit))).astype(np.int64)
    caps = np.unique(caps[caps >= 1])
    if len(caps) == 0:
        return []
    if len(caps) > MIX_FILLS:
        caps = caps[np.linspace(0, len(caps) - 1, MIX_FILLS).round().astype(int)]
    return sorted({1, *map(int, caps)})
