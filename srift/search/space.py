"""The search space: which configurations of the catalog to consider, and which to drop before
simulating them.

Per GPU instance type of the region (optionally filtered by GPU; AMD GPUs only when named with
--gpu, since a CUDA profile says little about a ROCm run):
  * ``n`` instances for every ``n`` with ``n x GPUs per instance <= max_gpus``, on demand, and on
    spot when spot is allowed;
  * with ``mixed``: one on-demand node plus ``n - 1`` spot nodes of the same type (the on-demand
    node keeps the job's data and rendezvous alive), and two-type mixes of the types on the
    single-type Pareto frontier (at most ``MIX_TYPES`` types, each count up to the GPU limit).

Pruning before any simulation: over the budget (prices are known), out of memory (memory depends
only on the per-GPU batch), and, for mixes, types that are not on the frontier.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from srift.catalog.instances import Instance
from srift.catalog.spec import Part, cluster_of, label_of
from srift.cluster import Cluster
from srift.errors import SriftError
from srift.hardware import gpus
from srift.job import JobLength
from srift.search.limits import Constraints
from srift.search.rank import Candidate, pareto, unmet_limit
from srift.simulate.prediction import Prediction

MIX_TYPES = 6
NON_CUDA_ARCHITECTURES = ("rdna1",)  # AMD GPUs: considered only when named with --gpu


def cuda_gpu(name: str) -> bool:
    """True for GPUs a PyTorch CUDA job runs on as profiled (unknown names count as CUDA)."""
    spec = gpus().get(name)
    return spec is None or spec.architecture not in NON_CUDA_ARCHITECTURES


def instance_types(catalog: Sequence[Instance], c: Constraints) -> list[Instance]:
    """The priced types to search: those of the --gpu filter, else every CUDA GPU's.

    Raises:
        SriftError: when no type is left.
    """
    types = [i for i in catalog if i.on_demand_usd_per_hour is not None and (i.gpu_name in c.gpus if c.gpus else cuda_gpu(i.gpu_name))]
    if not types:
        raise SriftError("no priced instance type matches the --gpu filter in this region.",
                         "check the names with `srift catalog list`, or drop --gpu.")
    return types


def single_type_parts(types: Sequence[Instance], c: Constraints) -> Iterator[list[Part]]:
    """Configurations of one instance type: ``n`` nodes on each allowed market, and with ``mixed``
    one on-demand node beside ``n - 1`` spot nodes."""
    for inst in types:
        spot_ok = c.spot and inst.spot_usd_per_hour is not None
        for n in range(1, c.max_gpus // inst.gpu_count + 1):
            for spot in ([False, True] if spot_ok else [False]):
                yield [(inst, n, spot)]
            if c.mixed and spot_ok and n >= 2:
                yield [(inst, 1, False), (inst, n - 1, True)]


def frontier_types(singles: Sequence[Candidate], types: Sequence[Instance]) -> list[Instance]:
    """The instance types on the Pareto frontier of feasible one-type candidates, the faster end
    (at most MIX_TYPES), cheapest first."""
    names: list[str] = []
    for cand in pareto(singles):
        t = cand.instance.split(":")[0]
        if t not in names:
            names.append(t)
    by_name = {i.instance_type: i for i in types}
    return [by_name[t] for t in names[-MIX_TYPES:]]


def two_type_parts(front: Sequence[Instance], c: Constraints) -> Iterator[list[Part]]:
    """Mixes of two frontier types with different GPUs, every count within the GPU limit, on
    demand (and on spot when both have spot prices)."""
    for i, a in enumerate(front):
        for b in front[i + 1:]:
            if a.gpu_name == b.gpu_name:
                continue
            for na in range(1, c.max_gpus // a.gpu_count + 1):
                for nb in range(1, (c.max_gpus - na * a.gpu_count) // b.gpu_count + 1):
                    for spot in ([False, True] if c.spot and a.spot_usd_per_hour and b.spot_usd_per_hour else [False]):
                        yield [(a, na, spot), (b, nb, spot)]


def price(parts: Sequence[Part]) -> float:
    """Dollars per hour of a configuration."""
    total = 0.0
    for inst, n, spot in parts:
        usd = inst.usd_per_hour(spot)
        assert usd is not None, f"{inst.instance_type} is not priced {'on spot' if spot else 'on demand'}"
        total += usd * n
    return total


class Explorer:
    """Evaluates configurations, counting what it considers and what it prunes.

    Args:
        predict: Predicts one cluster (``Predictor(profile, job).predict``).
        c: The limits and search options.
        length: The job's length (for job hours and cost), or None.
        memory_ok: Per instance type name: whether the job fits on one of its GPUs.
    """

    def __init__(self, predict: Callable[[Cluster], Prediction], c: Constraints, length: JobLength | None,
                 memory_ok: dict[str, bool]) -> None:
        self.predict = predict
        self.c = c
        self.length = length
        self.memory_ok = memory_ok
        self.considered = 0
        self.pruned = {"budget": 0, "memory": 0}
        self.evaluated: list[Candidate] = []

    def consider(self, parts: list[Part]) -> None:
        """Prune or evaluate one configuration."""
        self.considered += 1
        if not all(self.memory_ok[inst.instance_type] for inst, _, _ in parts):
            self.pruned["memory"] += 1
        elif price(parts) > (self.c.budget_usd_per_hour if self.c.budget_usd_per_hour is not None else math.inf):
            self.pruned["budget"] += 1
        else:
            self.evaluated.append(self.evaluate(parts))

    def evaluate(self, parts: list[Part]) -> Candidate:
        """Simulate one configuration (neither counted nor pruned)."""
        cluster = cluster_of(parts)
        pred = self.predict(cluster)
        run = pred.job_run(self.length) if self.length is not None else None
        cand = Candidate(cluster.name, label_of(parts), any(s for _, _, s in parts), cluster.gpus, cluster.nodes,
                         price(parts), pred, run)
        cand.reason = unmet_limit(cand, self.c)
        cand.feasible = not cand.reason
        return cand

    def count_too_large(self, types: Sequence[Instance]) -> None:
        """Count the types whose single instance has more GPUs than the limit."""
        n = sum(1 for inst in types if inst.gpu_count > self.c.max_gpus)
        if n:
            self.pruned["max_gpus"] = n

    def cheapest_that_fits(self, types: Sequence[Instance]) -> Candidate | None:
        """One instance of the cheapest type the job fits on (spot when allowed and cheaper),
        evaluated whatever the budget: what the nearest configuration would cost."""
        fitting = [i for i in types if self.memory_ok[i.instance_type]]
        if not fitting:
            return None
        spot_ok = self.c.spot
        inst = min(fitting, key=lambda i: min(p for p in (i.on_demand_usd_per_hour, i.spot_usd_per_hour if spot_ok else None) if p))
        spot = bool(spot_ok and inst.spot_usd_per_hour and inst.spot_usd_per_hour < (inst.on_demand_usd_per_hour or math.inf))
        return self.evaluate([(inst, 1, spot)])
