"""The user's limits and search options, and how a run measures against a limit.

Limits: a budget in $ per hour of the whole cluster (exact: prices are known), a deadline in hours
and a maximum job cost (both need the job's length, which the Job carries, and are met at the
stated confidence: the job's hours and cost at that quantile, srift/search/confidence.py).
`srift check` names the same three limits ``max_usd_per_hour``, ``max_hours`` and ``max_cost_usd``
(srift/jobfile.py).

The largest cluster a search takes is MAX_SEARCH_GPUS: the search's cost grows at most linearly
with ``--max-gpus`` (scripts/bench_recommend.py prints it), and beyond the largest training
clusters run today a prediction would rest on nothing measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Literal, cast, get_args

from srift.bounds import (
    MAX_BUDGET_USD_PER_HOUR, MAX_COST_USD, MAX_DEADLINE_HOURS, MAX_GLOBAL_BATCH_SIZE, MAX_SEARCH_GPUS, MAX_TOP, MIN_HOURS,
    MIN_USD, require,
)
from srift.errors import SriftError
from srift.job import DEFAULT_CONFIDENCE, JobLength, JobRun, require_confidence
from srift.jobfile import JobLimits
from srift.search.confidence import AtConfidence

# What a search optimizes (--objective): the most samples per second or the least cost.
Goal = Literal["throughput", "cost"]
OBJECTIVES: tuple[Goal, ...] = get_args(Goal)
THROUGHPUT: Final = "throughput"
COST: Final = "cost"
DEFAULT_MAX_GPUS = 64  # --max-gpus when not given (a decoder LLM's layouts: srift/search/gpu_range.py)
LIMIT_TOLERANCE = 1e-12  # a prediction this close above a limit still meets it (rounding)


def within(predicted: float, allowed: float) -> bool:
    """True when ``predicted`` meets the limit ``allowed`` (the one comparison every limit uses)."""
    return predicted <= allowed + LIMIT_TOLERANCE


@dataclass(frozen=True)
class Constraints:
    """What the user asked the search for.

    Attributes:
        budget_usd_per_hour: Whole-cluster price ceiling.
        deadline_hours: Finish the job within this many hours (needs the job's length).
        max_cost_usd: Job cost ceiling (needs the job's length).
        objective: One of OBJECTIVES (None: cost under a deadline, else throughput).
        spot: Also consider spot instances.
        mixed: Also consider mixed clusters.
        gpus: Only these canonical GPU names (empty: all).
        max_gpus: Largest cluster, in GPUs (at most MAX_SEARCH_GPUS).
        max_nodes: Largest cluster, in instances (None: no limit but max_gpus). Multi-node
            predictions are validated up to 16 nodes; this keeps a search within what you trust.
        top: How many recommendations to return.
        confidence: The deadline and the maximum cost are met at this quantile of the job's
            hours and cost (0.5: at the median).
        include_unsupported: Also search GPUs the current PyTorch CUDA wheels do not run on.
        diverse: The rows after the chosen one are the best of each other instance family (False:
            the next configurations in the objective's order, whatever their family).
        max_global_batch: Largest global batch (samples) a cluster may train without a fixed one
            (None: the model family's default, srift/search/large_batch.py).
        auto_max_gpus: ``max_gpus`` is the default, not the user's: a layout search of a decoder
            LLM derives its largest cluster from the job instead (srift/search/gpu_range.py).
    """

    budget_usd_per_hour: float | None = None
    deadline_hours: float | None = None
    max_cost_usd: float | None = None
    objective: str | None = None
    spot: bool = False
    mixed: bool = False
    gpus: frozenset[str] = frozenset()
    max_gpus: int = DEFAULT_MAX_GPUS
    max_nodes: int | None = None
    top: int = 5
    confidence: float = DEFAULT_CONFIDENCE
    include_unsupported: bool = False
    diverse: bool = True
    max_global_batch: int | None = None
    auto_max_gpus: bool = False

    def __post_init__(self) -> None:
        for name, low, high in (("budget_usd_per_hour", MIN_USD, MAX_BUDGET_USD_PER_HOUR),
                                ("deadline_hours", MIN_HOURS, MAX_DEADLINE_HOURS), ("max_cost_usd", MIN_USD, MAX_COST_USD)):
            v = getattr(self, name)
            if v is not None:
                if isinstance(v, (int, float)) and not v > 0 and not math.isnan(v):
                    raise SriftError(f"--{_flag(name)} must be positive, got {v}.", f"pass a positive --{_flag(name)}.")
                require(v, f"--{_flag(name)}", low, high, hint=f"pass --{_flag(name)} from {low:g} to {high:g}.")
        # The search enumerates every count up to max_gpus: its bound is what keeps a search short.
        if isinstance(self.max_gpus, int) and self.max_gpus > MAX_SEARCH_GPUS:
            raise SriftError(f"--max-gpus {self.max_gpus:,} is beyond the largest cluster srift searches ({MAX_SEARCH_GPUS:,} GPUs).",
                             f"pass --max-gpus {MAX_SEARCH_GPUS:,} or less.")
        for name, high in (("max_gpus", MAX_SEARCH_GPUS), ("max_nodes", MAX_SEARCH_GPUS), ("top", MAX_TOP)):
            if getattr(self, name) is None:
                continue
            require(getattr(self, name), f"--{_flag(name)}", 1, high, integer=True, hint=f"pass --{_flag(name)} from 1 to {high:,}.")
        if self.max_global_batch is not None:
            require(self.max_global_batch, "--max-global-batch", 1, MAX_GLOBAL_BATCH_SIZE, integer=True,
                    hint=f"pass --max-global-batch from 1 to {MAX_GLOBAL_BATCH_SIZE:,}.")
        require_confidence(self.confidence)
        if self.objective is not None and self.objective not in OBJECTIVES:
            raise SriftError(f"unknown objective '{self.objective}'.", "use --objective throughput or --objective cost.")

    @classmethod
    def of_check(cls, limits: JobLimits, spot: bool, confidence: float = DEFAULT_CONFIDENCE) -> "Constraints":
        """The search `srift check` runs for a job file without an instance: the cheapest
        configuration within the job file's limits (a job file sets no --max-gpus: a layout
        search derives it from the job, as `srift recommend` without one does)."""
        return cls(budget_usd_per_hour=limits.max_usd_per_hour, deadline_hours=limits.max_hours,
                   max_cost_usd=limits.max_cost_usd, objective=COST, spot=spot, top=1, confidence=confidence,
                   auto_max_gpus=True)

    def require_length(self, length: JobLength | None, global_batch_size: int | None = None) -> None:
        """Raise when a limit needs the job's length and there is none, or when the length is a
        step count and the global batch is not fixed (then a step's data grows with the GPUs, and
        more GPUs would never shorten the job)."""
        if (self.deadline_hours is not None or self.max_cost_usd is not None) and length is None:
            raise SriftError(
                "a deadline or a maximum cost needs the job's length.",
                "add --epochs E --dataset-size N, --samples N or --tokens N (or --steps N with --global-batch-size B).",
            )
        if length is not None and length.steps is not None and global_batch_size is None:
            raise SriftError(
                "--steps counts iterations, and with the per-GPU batch fixed an iteration's data grows with the GPU "
                "count, so a search could not compare configurations by it.",
                "fix the global batch with --global-batch-size B, or give the length as data: --epochs E --dataset-size N, "
                "--samples N or --tokens N.",
            )

    def node_limit(self, gpus_per_node: int) -> int:
        """The most instances of ``gpus_per_node`` GPUs a cluster may have: --max-gpus and --max-nodes."""
        n = self.max_gpus // gpus_per_node
        return n if self.max_nodes is None else min(n, self.max_nodes)

    @property
    def goal(self) -> Goal:
        """The objective: the one asked for, else cost under a deadline, else throughput."""
        if self.objective:
            return cast(Goal, self.objective)  # one of OBJECTIVES (__post_init__)
        return COST if self.deadline_hours is not None else THROUGHPUT

    @property
    def ranking_confidence(self) -> float | None:
        """The quantile the search ranks at: the confidence when a limit is set, else None (median)."""
        limits = (self.budget_usd_per_hour, self.deadline_hours, self.max_cost_usd)
        return self.confidence if any(v is not None for v in limits) else None


def _flag(name: str) -> str:
    return {"budget_usd_per_hour": "budget", "deadline_hours": "deadline", "max_cost_usd": "max-cost",
            "max_gpus": "max-gpus", "max_nodes": "max-nodes"}.get(name, name.replace("_", "-"))


@dataclass(frozen=True)
class LimitCheck:
    """One limit of `srift check` against the prediction.

    Attributes:
        limit: A LIMITS name, or ``fits_in_memory``.
        value: The allowed value (True for fits_in_memory).
        predicted: The predicted value the limit is checked against: hours and cost at the
            confidence, $/h exactly.
        margin: ``value - predicted`` (None for fits_in_memory).
        margin_pct: The margin in % of the allowed value (None for fits_in_memory).
        passed: The limit holds.
        predicted_p50: Hours or cost at the median (the same as ``predicted`` for $/h).
        confidence: The quantile ``predicted`` is at (None for $/h and memory, which are exact).
    """

    limit: str
    value: float | bool
    predicted: float | bool
    margin: float | None
    margin_pct: float | None
    passed: bool
    predicted_p50: float | bool | None = None
    confidence: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"limit": self.limit, "value": self.value, "predicted": self.predicted, "predicted_p50": self.predicted_p50,
                "confidence": self.confidence, "margin": self.margin, "margin_pct": self.margin_pct, "passed": self.passed}


def check_limits(limits: JobLimits, run: JobRun, at: AtConfidence, usd_per_hour: float,
                 fits_in_memory: bool) -> list[LimitCheck]:
    """Each limit the job file sets (in LIMITS order) against the run, then the memory fit when
    the job does not fit. Hours and cost are checked at ``at``'s confidence; $/h is exact."""
    actual = {"max_cost_usd": (at.cost_usd, run.cost_usd, at.confidence), "max_hours": (at.hours, run.hours, at.confidence),
              "max_usd_per_hour": (usd_per_hour, usd_per_hour, None)}
    rows = []
    for name, allowed in limits.items():
        predicted, p50, q = actual[name]
        assert predicted is not None  # a checked configuration is priced
        rows.append(LimitCheck(name, allowed, predicted, allowed - predicted, (allowed - predicted) / allowed * 100.0,
                               within(predicted, allowed), p50, q))
    if not fits_in_memory:
        rows.append(LimitCheck("fits_in_memory", True, False, None, None, False))
    return rows
