"""The user's limits and search options, and how a run measures against a limit.

Limits: a budget in $ per hour of the whole cluster, a deadline in hours and a maximum job cost
(the last two need the job's length, which the Job carries). `srift check` names the same three
limits ``max_usd_per_hour``, ``max_hours`` and ``max_cost_usd`` (srift/jobfile.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from srift.bounds import (
    MAX_BUDGET_USD_PER_HOUR, MAX_COST_USD, MAX_DEADLINE_HOURS, MAX_SEARCH_GPUS, MAX_TOP, MIN_HOURS, MIN_USD, require,
)
from srift.errors import SriftError
from srift.job import JobLength, JobRun
from srift.jobfile import LIMITS

OBJECTIVES = ("throughput", "cost")
_TOLERANCE = 1e-12  # a prediction this close above a limit still meets it (rounding)


def within(predicted: float, allowed: float) -> bool:
    """True when ``predicted`` meets the limit ``allowed`` (the one comparison every limit uses)."""
    return predicted <= allowed + _TOLERANCE


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
        max_gpus: Largest cluster, in GPUs.
        top: How many recommendations to return.
    """

    budget_usd_per_hour: float | None = None
    deadline_hours: float | None = None
    max_cost_usd: float | None = None
    objective: str | None = None
    spot: bool = False
    mixed: bool = False
    gpus: frozenset[str] = frozenset()
    max_gpus: int = 64
    top: int = 5

    def __post_init__(self) -> None:
        for name, low, high in (("budget_usd_per_hour", MIN_USD, MAX_BUDGET_USD_PER_HOUR),
                                ("deadline_hours", MIN_HOURS, MAX_DEADLINE_HOURS), ("max_cost_usd", MIN_USD, MAX_COST_USD)):
            v = getattr(self, name)
            if v is not None:
                if isinstance(v, (int, float)) and not v > 0 and not math.isnan(v):
                    raise SriftError(f"--{_flag(name)} must be positive, got {v}.", f"pass a positive --{_flag(name)}.")
                require(v, f"--{_flag(name)}", low, high, hint=f"pass --{_flag(name)} from {low:g} to {high:g}.")
        # The search enumerates every count up to max_gpus: its bound is what keeps a search short.
        for name, high in (("max_gpus", MAX_SEARCH_GPUS), ("top", MAX_TOP)):
            require(getattr(self, name), f"--{_flag(name)}", 1, high, integer=True, hint=f"pass --{_flag(name)} from 1 to {high:,}.")
        if self.objective is not None and self.objective not in OBJECTIVES:
            raise SriftError(f"unknown objective '{self.objective}'.", "use --objective throughput or --objective cost.")

    @classmethod
    def of_check(cls, limits: Mapping[str, float], spot: bool) -> "Constraints":
        """The search `srift check` runs for a job file without an instance: the cheapest
        configuration within the job file's limits (keyed by LIMITS names)."""
        return cls(budget_usd_per_hour=limits.get("max_usd_per_hour"), deadline_hours=limits.get("max_hours"),
                   max_cost_usd=limits.get("max_cost_usd"), objective="cost", spot=spot, top=1)

    def require_length(self, length: JobLength | None) -> None:
        """Raise when a limit needs the job's length and there is none."""
        if (self.deadline_hours is not None or self.max_cost_usd is not None) and length is None:
            raise SriftError(
                "a deadline or a maximum cost needs the job's length.",
                "add --steps N, or --epochs E --dataset-size N.",
            )

    @property
    def goal(self) -> str:
        """The objective: the one asked for, else cost under a deadline, else throughput."""
        if self.objective:
            return self.objective
        return "cost" if self.deadline_hours is not None else "throughput"


def _flag(name: str) -> str:
    return {"budget_usd_per_hour": "budget", "deadline_hours": "deadline", "max_cost_usd": "max-cost",
            "max_gpus": "max-gpus"}.get(name, name.replace("_", "-"))


@dataclass(frozen=True)
class LimitCheck:
    """One limit of `srift check` against the prediction.

    Attributes:
        limit: A LIMITS name, or ``fits_in_memory``.
        value: The allowed value (True for fits_in_memory).
        predicted: The predicted value.
        margin: ``value - predicted`` (None for fits_in_memory).
        margin_pct: The margin in % of the allowed value (None for fits_in_memory).
        passed: The limit holds.
    """

    limit: str
    value: float | bool
    predicted: float | bool
    margin: float | None
    margin_pct: float | None
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return {"limit": self.limit, "value": self.value, "predicted": self.predicted, "margin": self.margin,
                "margin_pct": self.margin_pct, "passed": self.passed}


def check_limits(limits: Mapping[str, float], run: JobRun, usd_per_hour: float, fits_in_memory: bool) -> list[LimitCheck]:
    """Each limit the job file sets (in LIMITS order) against the run, then the memory fit when
    the job does not fit."""
    actual = {"max_cost_usd": run.cost_usd, "max_hours": run.hours, "max_usd_per_hour": usd_per_hour}
    rows = []
    for name in LIMITS:
        if name in limits:
            allowed, predicted = limits[name], actual[name]
            assert predicted is not None  # a checked configuration is priced
            rows.append(LimitCheck(name, allowed, predicted, allowed - predicted, (allowed - predicted) / allowed * 100.0,
                                   within(predicted, allowed)))
    if not fits_in_memory:
        rows.append(LimitCheck("fits_in_memory", True, False, None, None, False))
    return rows


