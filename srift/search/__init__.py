"""Search the catalog for the best cluster: enumerate, prune, predict, constrain, rank, Pareto.

``space`` says which configurations exist and which are pruned before simulating (over the
budget, out of memory), ``rank`` orders what was simulated, ``limits`` holds what the user asked
for. Everything a prediction reuses (compute per GPU type and batch, all-reduce per topology) is
cached by the Predictor and the communication model.

Objectives: ``throughput`` (expected samples/s, highest first) or ``cost`` (job cost when a job
length is known, else $ per million samples, lowest first). Default: cost when a deadline is
given, else throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from srift.catalog.instances import Instance
from srift.cluster import Cluster
from srift.job import JobLength
from srift.search.limits import Constraints
from srift.search.rank import SearchResult, rank
from srift.search.space import Explorer, frontier_types, instance_types, single_type_parts, two_type_parts
from srift.simulate.prediction import Prediction


def search(
    catalog: Sequence[Instance],
    predict: Callable[[Cluster], Prediction],
    constraints: Constraints,
    length: JobLength | None = None,
    per_gpu_memory_ok: Callable[[Instance], bool] | None = None,
) -> SearchResult:
    """Find the best configurations (see module docstring).

    Args:
        catalog: Instance types to consider (one region).
        predict: Predicts one cluster (``Predictor(profile, job).predict``).
        constraints: Limits, objective and search-space options.
        length: The job's length (job hours and cost; needed by a deadline or a maximum cost).
        per_gpu_memory_ok: Cheap pre-check that the job fits on one GPU of a type (skips
            simulating types that cannot hold it); None: rely on the prediction.

    Raises:
        SriftError: for a deadline or maximum cost without a length, or no type to search.
    """
    c = constraints
    c.require_length(length)
    types = instance_types(catalog, c)
    explorer = Explorer(predict, c, length, {i.instance_type: (per_gpu_memory_ok(i) if per_gpu_memory_ok else True) for i in types})
    for parts in single_type_parts(types, c):
        explorer.consider(parts)
    explorer.count_too_large(types)
    if c.mixed:
        singles = [x for x in explorer.evaluated if x.feasible and len(x.prediction.batch_split) == 1]
        for parts in two_type_parts(frontier_types(singles, types), c):
            explorer.consider(parts)
    result = rank(explorer.evaluated, c, explorer.considered, explorer.pruned)
    if result.cut_by == "budget":
        # Nothing was simulated: show what the cheapest configuration that fits would cost.
        result.closest = explorer.cheapest_that_fits(types)
    return result
