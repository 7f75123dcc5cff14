"""Search the catalog for the best cluster: enumerate, prune, predict, constrain, rank, Pareto.

Search space, per GPU instance type of the region (optionally filtered by GPU; AMD GPUs only when
named with --gpu, since a CUDA profile says little about a ROCm run):
  * ``n`` instances for every ``n`` with ``n x GPUs per instance <= max_gpus``, on demand, and on
    spot when spot is allowed;
  * with ``mixed``: one on-demand node plus ``n - 1`` spot nodes of the same type (the on-demand
    node keeps the job's data and rendezvous alive), and two-type mixes of the types on the
    single-type Pareto frontier (at most ``MIX_TYPES`` types, each count up to the GPU limit).

Pruning before any simulation: over the budget (prices are known), out of memory (memory depends
only on the per-GPU batch), and, for mixes, types that are not on the frontier. Everything a
prediction reuses (compute per GPU type and batch, all-reduce per topology) is cached by the
Predictor and the communication model.

Objectives: ``throughput`` (expected samples/s, highest first) or ``cost`` (job cost when a job
length is known, else $ per million samples, lowest first). Default: cost when a deadline is
given, else throughput.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from srift.catalog.instances import Instance
from srift.catalog.spec import node_group
from srift.cluster import Cluster
from srift.errors import SriftError
from srift.simulate.prediction import Prediction

MIX_TYPES = 6
NON_CUDA_ARCHITECTURES = ("rdna1",)  # AMD GPUs: considered only when named with --gpu


def cuda_gpu(name: str) -> bool:
    """True for GPUs a PyTorch CUDA job runs on as profiled (unknown names count as CUDA)."""
    from srift.hardware import gpus

    spec = gpus().get(name)
    return spec is None or spec.architecture not in NON_CUDA_ARCHITECTURES
OBJECTIVES = ("throughput", "cost")


@dataclass(frozen=True)
class Constraints:
    """What the user asked for.

    Attributes:
        budget_usd_per_hour: Whole-cluster price ceiling.
        deadline_hours: Finish the job within this many hours (needs a job length).
        max_cost_usd: Job cost ceiling (needs a job length).
        steps: Job length in iterations (or derive it from epochs x dataset_size / global batch).
        epochs: Job length in epochs (with dataset_size).
        dataset_size: Samples per epoch.
        objective: ``throughput`` or ``cost`` (None: cost under a deadline, else throughput).
        spot: Also consider spot instances.
        mixed: Also consider mixed clusters.
        gpus: Only these canonical GPU names (empty: all).
        max_gpus: Largest cluster, in GPUs.
        top: How many recommendations to return.
    """

    budget_usd_per_hour: float | None = None
    deadline_hours: float | None = None
    max_cost_usd: float | None = None
    steps: int | None = None
    epochs: float | None = None
    dataset_size: int | None = None
    objective: str | None = None
    spot: bool = False
    mixed: bool = False
    gpus: frozenset[str] = frozenset()
    max_gpus: int = 64
    top: int = 5

    def __post_init__(self) -> None:
        for name in ("budget_usd_per_hour", "deadline_hours", "max_cost_usd", "epochs"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise SriftError(f"--{_flag(name)} must be positive, got {v}.", f"pass a positive --{_flag(name)}.")
        for name in ("steps", "dataset_size", "max_gpus", "top"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise SriftError(f"--{_flag(name)} must be at least 1, got {v}.", f"pass --{_flag(name)} 1 or more.")
        if self.steps is not None and (self.epochs is not None or self.dataset_size is not None):
            raise SriftError("give either --steps or --epochs with --dataset-size, not both.", "drop one of them.")
        if (self.epochs is None) != (self.dataset_size is None):
            raise SriftError("--epochs and --dataset-size go together.", "pass both, or use --steps.")
        if (self.deadline_hours is not None or self.max_cost_usd is not None) and not self.has_length:
            raise SriftError(
                "a deadline or a maximum cost needs the job's length.",
                "add --steps N, or --epochs E --dataset-size N.",
            )
        if self.objective is not None and self.objective not in OBJECTIVES:
            raise SriftError(f"unknown objective '{self.objective}'.", "use --objective throughput or --objective cost.")

    @property
    def has_length(self) -> bool:
        return self.steps is not None or self.epochs is not None

    @property
    def goal(self) -> str:
        if self.objective:
            return self.objective
        return "cost" if self.deadline_hours is not None else "throughput"

    def job_steps(self, global_batch: int) -> float | None:
        """Iterations of the whole job on a cluster with this global batch."""
        if self.steps is not None:
            return float(self.steps)
        if self.epochs is not None and self.dataset_size is not None:
            return self.epochs * math.ceil(self.dataset_size / global_batch)
        return None


def _flag(name: str) -> str:
    return {"budget_usd_per_hour": "budget", "deadline_hours": "deadline", "max_cost_usd": "max-cost",
            "dataset_size": "dataset-size", "max_gpus": "max-gpus"}.get(name, name.replace("_", "-"))


@dataclass
class Candidate:
    """One evaluated configuration.

    ``instance`` is a spec `srift predict --instance` accepts; ``spot`` is True when any node is spot.
    """

    instance: str
    label: str
    spot: bool
    gpus: int
    cost_per_hour_usd: float
    prediction: Prediction
    expected_throughput_samples_per_s: float
    job_hours: float | None
    job_cost_usd: float | None
    feasible: bool = True
    reason: str = ""

    @property
    def usd_per_million_samples(self) -> float:
        return self.cost_per_hour_usd / (self.expected_throughput_samples_per_s * 3600.0) * 1e6

    @property
    def nodes(self) -> int:
        """Nodes of the configuration (``TYPE:COUNT[@spot]`` parts joined by ``+``)."""
        return sum(int(m.group(1)) if (m := re.search(r":(\d+)", part)) else 1 for part in self.instance.split("+"))


@dataclass
class SearchResult:
    """What `srift recommend` shows.

    Attributes:
        recommendations: The best feasible candidates, best first.
        considered: Configurations enumerated (before pruning).
        evaluated: Configurations simulated.
        frontier: Pareto-optimal evaluated candidates (throughput vs $/h), cheapest first.
        evaluated_points: (cost per hour, expected throughput, feasible) of every evaluated one.
        objective: ``throughput`` or ``cost``.
        cut_by: When nothing is feasible: the constraint that removed the last candidates.
        closest: When nothing is feasible: the candidate that comes closest.
        best_single_node: When the chosen configuration spans several nodes: the best feasible
            one-node configuration (multi-node predictions are the least validated; see
            srift/perf/accuracy.py), or None.
    """

    recommendations: list[Candidate]
    considered: int
    evaluated: int
    frontier: list[Candidate]
    evaluated_points: list[tuple[float, float, bool]]
    objective: str
    cut_by: str | None = None
    closest: Candidate | None = None
    pruned: dict[str, int] = field(default_factory=dict)
    best_single_node: Candidate | None = None


def _cluster(groups: list[tuple[Instance, int, bool]]) -> tuple[Cluster, str, str]:
    ngs = tuple(node_group(inst, n, spot) for inst, n, spot in groups)
    markets = {spot for _, _, spot in groups}
    if len(markets) > 1:
        spec = "+".join(f"{inst.instance_type}:{n}@{'spot' if spot else 'on-demand'}" for inst, n, spot in groups)
    else:
        spec = "+".join(f"{inst.instance_type}:{n}" for inst, n, _ in groups)
    label = spec if len(markets) > 1 else spec + (" [Spot]" if True in markets else "")
    return Cluster(name=spec, node_groups=ngs), spec, label


def pareto(cands: Iterable[Candidate]) -> list[Candidate]:
    """Candidates no other beats on both cost per hour (lower) and expected throughput (higher)."""
    out: list[Candidate] = []
    best = -1.0
    for c in sorted(cands, key=lambda c: (c.cost_per_hour_usd, -c.expected_throughput_samples_per_s)):
        if c.expected_throughput_samples_per_s > best:
            out.append(c)
            best = c.expected_throughput_samples_per_s
    return out


def search(
    catalog: list[Instance],
    predict: Callable[[Cluster], Prediction],
    constraints: Constraints,
    per_gpu_memory_ok: Callable[[Instance], bool] | None = None,
) -> SearchResult:
    """Find the best configurations (see module docstring).

    Args:
        catalog: Instance types to consider (one region).
        predict: Predicts one cluster (``Predictor(profile, job).predict``).
        constraints: Budget, deadline, job length, objective, search-space options.
        per_gpu_memory_ok: Cheap pre-check that the job fits on one GPU of a type (skips
            simulating types that cannot hold it); None: rely on the prediction.
    """
    c = constraints
    types = [i for i in catalog if i.on_demand_usd_per_hour is not None and (i.gpu_name in c.gpus if c.gpus else cuda_gpu(i.gpu_name))]
    if not types:
        raise SriftError("no priced instance type matches the --gpu filter in this region.",
                         "check the names with `srift catalog list`, or drop --gpu.")
    pruned = {"budget": 0, "memory": 0}
    considered = 0
    evaluated: list[Candidate] = []
    budget = c.budget_usd_per_hour if c.budget_usd_per_hour is not None else math.inf
    mem_ok = {i.instance_type: (per_gpu_memory_ok(i) if per_gpu_memory_ok else True) for i in types}
    cheapest_over: Candidate | None = None

    def consider(groups: list[tuple[Instance, int, bool]]) -> Candidate | None:
        nonlocal considered
        considered += 1
        price = sum(inst.usd_per_hour(spot) * n for inst, n, spot in groups)  # type: ignore[operator]
        if not all(mem_ok[inst.instance_type] for inst, _, _ in groups):
            pruned["memory"] += 1
            return None
        if price > budget:
            pruned["budget"] += 1
            return None
        cluster, spec, label = _cluster(groups)
        pred = predict(cluster)
        exp_tp = pred.spot["expected_throughput_samples_per_s"] if pred.spot else pred.throughput_samples_per_s
        steps = c.job_steps(pred.global_batch_size)
        hours = cost = None
        if steps is not None:
            hours = steps * pred.global_batch_size / max(exp_tp, 1e-12) / 3600.0
            cost = hours * price
        cand = Candidate(spec, label, any(s for _, _, s in groups), cluster.gpus, price, pred, exp_tp, hours, cost)
        cand.feasible, cand.reason = _check(cand, c)
        evaluated.append(cand)
        return cand

    for inst in types:
        if inst.spot_usd_per_hour is None:
            markets = [False]
        else:
            markets = [False, True] if c.spot else [False]
        for n in range(1, c.max_gpus // inst.gpu_count + 1):
            for spot in markets:
                consider([(inst, n, spot)])
            if c.mixed and c.spot and n >= 2 and inst.spot_usd_per_hour is not None:
                consider([(inst, 1, False), (inst, n - 1, True)])
        if inst.gpu_count > c.max_gpus:
            pruned["max_gpus"] = pruned.get("max_gpus", 0) + 1

    if c.mixed:
        singles = [x for x in evaluated if x.feasible and len(x.prediction.batch_split) == 1]
        front_types: list[str] = []
        for cand in pareto(singles):
            t = cand.instance.split(":")[0]
            if t not in front_types:
                front_types.append(t)
        front_types = front_types[-MIX_TYPES:]  # the faster end of the frontier
        by_name = {i.instance_type: i for i in types}
        for i, ta in enumerate(front_types):
            for tb in front_types[i + 1:]:
                a, b = by_name[ta], by_name[tb]
                if a.gpu_name == b.gpu_name:
                    continue
                for na in range(1, c.max_gpus // a.gpu_count + 1):
                    for nb in range(1, (c.max_gpus - na * a.gpu_count) // b.gpu_count + 1):
                        for spot in ([False, True] if c.spot and a.spot_usd_per_hour and b.spot_usd_per_hour else [False]):
                            consider([(a, na, spot), (b, nb, spot)])

    feasible = [x for x in evaluated if x.feasible]
    goal = c.goal
    if goal == "throughput":
        key = lambda x: (-x.expected_throughput_samples_per_s, x.cost_per_hour_usd)  # noqa: E731
    else:
        key = lambda x: (x.job_cost_usd if x.job_cost_usd is not None else x.usd_per_million_samples,  # noqa: E731
                         -x.expected_throughput_samples_per_s)
    feasible.sort(key=key)
    result = SearchResult(
        recommendations=feasible[: c.top],
        considered=considered,
        evaluated=len(evaluated),
        frontier=pareto(evaluated),
        evaluated_points=[(x.cost_per_hour_usd, x.expected_throughput_samples_per_s, x.feasible) for x in evaluated],
        objective=goal,
        pruned=pruned,
        best_single_node=next((x for x in feasible if x.nodes == 1), None) if feasible and feasible[0].nodes > 1 else None,
    )
    if not feasible:
        result.cut_by, result.closest = _explain_failure(evaluated, pruned)
        if result.cut_by == "budget":
            # Nothing was simulated: show what the cheapest configuration that fits would cost.
            fitting = [i for i in types if mem_ok[i.instance_type]]
            if fitting:
                inst = min(fitting, key=lambda i: min(p for p in (i.on_demand_usd_per_hour, i.spot_usd_per_hour if c.spot else None) if p))
                spot = bool(c.spot and inst.spot_usd_per_hour and inst.spot_usd_per_hour < (inst.on_demand_usd_per_hour or math.inf))
                budget, saved = math.inf, considered
                result.closest = consider([(inst, 1, spot)])
                considered = saved
    return result


def _check(cand: Candidate, c: Constraints) -> tuple[bool, str]:
    if not cand.prediction.fits_in_memory:
        return False, "memory"
    if c.deadline_hours is not None and cand.job_hours is not None and cand.job_hours > c.deadline_hours:
        return False, "deadline"
    if c.max_cost_usd is not None and cand.job_cost_usd is not None and cand.job_cost_usd > c.max_cost_usd:
        return False, "max-cost"
    return True, ""


def _explain_failure(evaluated: list[Candidate], pruned: dict[str, int]) -> tuple[str, Candidate | None]:
    """Which constraint removed the last candidates, and the candidate that came closest."""
    if not evaluated:
        return ("budget" if pruned.get("budget") else "memory"), None
    fits = [x for x in evaluated if x.reason != "memory"]
    if not fits:
        return "memory", min(evaluated, key=lambda x: x.prediction.memory_per_gpu_bytes)
    if any(x.reason == "deadline" for x in fits):
        return "deadline", min(fits, key=lambda x: x.job_hours if x.job_hours is not None else math.inf)
    return "max-cost", min(fits, key=lambda x: x.job_cost_usd if x.job_cost_usd is not None else math.inf)
