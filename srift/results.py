"""What the commands return: the typed results of predict, recommend and check, which the
renderers (srift/report/) print and srift/api.py builds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from srift.job import Job
from srift.search.limits import Constraints, LimitCheck
from srift.search.rank import SearchResult
from srift.simulate.prediction import Prediction

CHECK_SCHEMA = "srift.check/v1"
PREDICT_SCHEMA = "srift.predict/v1"
CATALOG_SCHEMA = "srift.catalog/v1"


@dataclass(frozen=True)
class PredictResult:
    """`srift predict`: one job on one cluster.

    Attributes:
        prediction: The simulator's prediction.
        model: The profile's name.
        precision: The precision the job trains at.
        optimizer: ``sgd`` or ``kfac``.
        kfac_strategy: The K-FAC strategy (K-FAC only).
        spot_pricing: The cluster was priced on spot.
    """

    prediction: Prediction
    model: str
    precision: str
    optimizer: str
    kfac_strategy: str
    spot_pricing: bool


@dataclass(frozen=True)
class RecommendResult:
    """`srift recommend`: the search and the job it searched for.

    Attributes:
        search: What the search found.
        constraints: The limits and search options.
        job: The job (its length gives job hours and cost).
        model: The profile's name.
        precision: The precision the job trains at.
        batch_size: Per-GPU batch of the fastest GPU.
        seq_len: Sequence length (sequence models), else None.
        region: Catalog region.
    """

    search: SearchResult
    constraints: Constraints
    job: Job
    model: str
    precision: str
    batch_size: int
    seq_len: int | None
    region: str


@dataclass(frozen=True)
class CheckedConfiguration:
    """The configuration `srift check` judged: the job file's instance, or what recommend chose."""

    instance: str
    spot: bool
    gpus: int
    chosen_by: str
    global_batch_size: int
    iteration_time_s: float
    throughput_samples_per_s: float  # expected: spot interruptions included
    bottleneck: str
    region: str
    typical_error_pct: float | None
    typical_error_basis: str
    plan: str = "ddp"  # parallelism and checkpointing (Prediction.plan_label): ddp, fsdp+sel, ...


@dataclass(frozen=True)
class MetricChange:
    """One figure against the baseline's."""

    base: float
    new: float
    change: float
    change_pct: float | None


@dataclass(frozen=True)
class CheckResult:
    """`srift check`: a job's predicted cost and hours against its limits (schema srift.check/v1).

    Attributes:
        passed: Every limit holds.
        predicted_cost_usd: Cost of the whole job.
        predicted_hours: Hours of the whole job.
        cost_per_hour_usd: Price of the configuration.
        configuration: What ran.
        model, precision, steps, optimizer: The job.
        limits: Each limit against its prediction.
        catalog_as_of: Date of the catalog's prices.
        change: Cost, hours and $/h against a baseline result (``--compare-to``), or None.
    """

    passed: bool
    predicted_cost_usd: float
    predicted_hours: float
    cost_per_hour_usd: float
    configuration: CheckedConfiguration
    model: str
    precision: str
    steps: float
    optimizer: str
    limits: list[LimitCheck]
    catalog_as_of: str | None
    change: dict[str, MetricChange] | None = None
    schema: str = CHECK_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (``--format json``, ``--out-file``)."""
        out: dict[str, Any] = {
            "schema": self.schema,
            "passed": self.passed,
            "predicted_cost_usd": self.predicted_cost_usd,
            "predicted_hours": self.predicted_hours,
            "cost_per_hour_usd": self.cost_per_hour_usd,
            "configuration": dataclasses.asdict(self.configuration),
            "job": {"model": self.model, "precision": self.precision, "steps": self.steps, "optimizer": self.optimizer},
            "limits": [c.to_dict() for c in self.limits],
            "catalog_as_of": self.catalog_as_of,
        }
        if self.change is not None:
            out["change"] = {k: dataclasses.asdict(v) for k, v in self.change.items()}
        return out
