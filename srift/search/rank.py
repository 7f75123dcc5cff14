"""Ranking evaluated configurations: which meet the limits, the Pareto frontier, the objective's
order, what to say when nothing is feasible, and when the runner-up is too close to call."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from srift.job import JobRun, usd_per_million_samples
from srift.search.limits import Constraints, within
from srift.simulate.prediction import Prediction


@dataclass
class Candidate:
    """One evaluated configuration.

    Attributes:
        instance: A spec `srift predict --instance` accepts.
        label: How tables name it (the spec, `` [Spot]`` when all on spot).
        spot: True when any node is spot.
        gpus: GPUs of the configuration.
        nodes: Nodes of the configuration.
        cost_per_hour_usd: Price of the whole configuration.
        prediction: The simulator's prediction.
        run: Steps, hours and cost of the job (None without a job length).
        feasible: It meets every limit.
        reason: The limit it misses first (``memory``, ``deadline`` or ``max-cost``), else "".
    """

    instance: str
    label: str
    spot: bool
    gpus: int
    nodes: int
    cost_per_hour_usd: float
    prediction: Prediction
    run: JobRun | None = None
    feasible: bool = True
    reason: str = ""

    @property
    def expected_throughput_samples_per_s(self) -> float:
        return self.prediction.expected_throughput_samples_per_s

    @property
    def usd_per_million_samples(self) -> float | None:
        return usd_per_million_samples(self.cost_per_hour_usd, self.expected_throughput_samples_per_s)

    @property
    def job_hours(self) -> float | None:
        return None if self.run is None else self.run.hours

    @property
    def job_cost_usd(self) -> float | None:
        return None if self.run is None else self.run.cost_usd


def unmet_limit(cand: Candidate, c: Constraints) -> str:
    """The first limit a candidate misses (``memory``, ``deadline``, ``max-cost``), or ""."""
    if not cand.prediction.fits_in_memory:
        return "memory"
    if c.deadline_hours is not None and cand.job_hours is not None and not within(cand.job_hours, c.deadline_hours):
        return "deadline"
    if c.max_cost_usd is not None and cand.job_cost_usd is not None and not within(cand.job_cost_usd, c.max_cost_usd):
        return "max-cost"
    return ""


def pareto(cands: Iterable[Candidate]) -> list[Candidate]:
    """Candidates no other beats on both cost per hour (lower) and expected throughput (higher)."""
    out: list[Candidate] = []
    best = -1.0
    for c in sorted(cands, key=lambda c: (c.cost_per_hour_usd, -c.expected_throughput_samples_per_s)):
        if c.expected_throughput_samples_per_s > best:
            out.append(c)
            best = c.expected_throughput_samples_per_s
    return out


def objective_key(goal: str) -> Callable[[Candidate], tuple[float, float]]:
    """Sort key, best first: ``throughput`` (highest, then cheapest per hour) or ``cost`` (job cost
    when the length is known, else $ per million samples; then highest throughput)."""
    if goal == "throughput":
        return lambda x: (-x.expected_throughput_samples_per_s, x.cost_per_hour_usd)

    def cost(x: Candidate) -> tuple[float, float]:
        value = x.job_cost_usd if x.job_cost_usd is not None else x.usd_per_million_samples
        return (math.inf if value is None else value, -x.expected_throughput_samples_per_s)

    return cost


@dataclass(frozen=True)
class CloseCall:
    """The runner-up runs on other GPUs and trails the top choice by less than the compute
    model's typical error across GPUs: the order is not settled until the job is profiled on each.

    Attributes:
        gap: How far the runner-up trails, as a fraction (throughput lost, or cost added).
        error_pct: The larger of the two predictions' ``compute_error_pct``.
        gpus: GPUs of the top choice.
        runner_up_gpus: GPUs of the runner-up.
    """

    gap: float
    error_pct: float
    gpus: tuple[str, ...]
    runner_up_gpus: tuple[str, ...]


def close_call(top: Candidate, runner_up: Candidate, goal: str) -> CloseCall | None:
    """The close call between the top two, if it is one.

    On the same GPUs the two predictions share most of their error, so their order holds; across
    GPU types the compute model's errors are separate (``compute_error_pct``: the network's error
    is shared by two multi-node choices and does not enter), and a gap smaller than that does
    not settle which is better."""
    errs = [top.prediction.compute_error_pct, runner_up.prediction.compute_error_pct]
    gpus, other = top.prediction.gpu_types, runner_up.prediction.gpu_types
    if errs[0] is None or errs[1] is None or gpus == other:
        return None
    err = max(errs[0], errs[1])
    if goal == "throughput":
        gap = 1.0 - runner_up.expected_throughput_samples_per_s / top.expected_throughput_samples_per_s
    else:
        def cost(c: Candidate) -> float:
            value = c.job_cost_usd if top.job_cost_usd is not None else c.usd_per_million_samples
            return math.inf if value is None else value
        gap = cost(runner_up) / cost(top) - 1.0
    return CloseCall(gap, err, gpus, other) if gap * 100.0 < err else None


@dataclass
class SearchResult:
    """What `srift recommend` shows.

    Attributes:
        recommendations: The best feasible candidates, best first.
        considered: Configurations enumerated (before pruning).
        evaluated: Configurations simulated.
        frontier: Pareto-optimal evaluated candidates (throughput vs $/h), cheapest first.
        evaluated_points: (cost per hour, expected throughput, feasible, GPUs) of every evaluated one;
            GPUs names its GPU types (``A10G``, ``A10G+V100`` for a mix).
        objective: ``throughput`` or ``cost``.
        cut_by: When nothing is feasible: the limit that removed the last candidates.
        closest: When nothing is feasible: the candidate that comes closest.
        pruned: Configurations left out before simulation, by reason (``budget``, ``memory``,
            ``max_gpus``).
        best_single_node: When the chosen configuration spans several nodes: the best feasible
            one-node configuration (multi-node predictions are the least validated; see
            srift/perf/accuracy.py), or None.
    """

    recommendations: list[Candidate]
    considered: int
    evaluated: int
    frontier: list[Candidate]
    evaluated_points: list[tuple[float, float, bool, str]]
    objective: str
    cut_by: str | None = None
    closest: Candidate | None = None
    pruned: dict[str, int] = field(default_factory=dict)
    best_single_node: Candidate | None = None

    @property
    def close_call(self) -> CloseCall | None:
        """The close call between the top two recommendations, if it is one."""
        recs = self.recommendations
        return close_call(recs[0], recs[1], self.objective) if len(recs) > 1 else None


def rank(evaluated: list[Candidate], c: Constraints, considered: int, pruned: dict[str, int]) -> SearchResult:
    """Order the feasible candidates by the objective and describe the search."""
    goal = c.goal
    feasible = sorted((x for x in evaluated if x.feasible), key=objective_key(goal))
    result = SearchResult(
        recommendations=feasible[: c.top],
        considered=considered,
        evaluated=len(evaluated),
        frontier=pareto(evaluated),
        evaluated_points=[(x.cost_per_hour_usd, x.expected_throughput_samples_per_s, x.feasible, "+".join(x.prediction.gpu_types))
                          for x in evaluated],
        objective=goal,
        pruned=pruned,
        best_single_node=next((x for x in feasible if x.nodes == 1), None) if feasible and feasible[0].nodes > 1 else None,
    )
    if not feasible:
        result.cut_by, result.closest = explain_failure(evaluated, pruned)
    return result


def explain_failure(evaluated: list[Candidate], pruned: dict[str, int]) -> tuple[str, Candidate | None]:
    """Which limit removed the last candidates, and the candidate that came closest."""
    if not evaluated:
        return ("budget" if pruned.get("budget") else "memory"), None
    fits = [x for x in evaluated if x.reason != "memory"]
    if not fits:
        return "memory", min(evaluated, key=lambda x: x.prediction.memory_per_gpu_bytes)
    if any(x.reason == "deadline" for x in fits):
        return "deadline", min(fits, key=lambda x: x.job_hours if x.job_hours is not None else math.inf)
    return "max-cost", min(fits, key=lambda x: x.job_cost_usd if x.job_cost_usd is not None else math.inf)
