"""What the commands return: the typed results of predict, recommend and check, and the launch
plan of a chosen configuration (--skypilot, --torchrun), which the renderers (srift/report/)
print and srift/api.py builds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from srift.catalog.instances import Instance
from srift.catalog.provenance import PriceProvenance
from srift.job import Job
from srift.search.confidence import AtConfidence, Uncertainty
from srift.search.gpu_range import GpuRange
from srift.search.hooks import CompressionTip
from srift.search.large_batch import GlobalBatchLimit
from srift.search.limits import Constraints, LimitCheck
from srift.search.rank import SearchResult
from srift.simulate.prediction import Prediction
from srift.simulate.whatif import WhatIf

CHECK_SCHEMA = "srift.check/v1"
RECOMMEND_SCHEMA = "srift.recommend/v1"
PREDICT_SCHEMA = "srift.predict/v1"
CATALOG_SCHEMA = "srift.catalog/v1"
STALE_AFTER_DAYS = 30  # prices older than this are worth a warning


@dataclass(frozen=True)
class PriceAge:
    """How old the prices of one ``--infra`` target (a cloud, or cloud/region) are, and their source.

    Attributes:
        target: ``aws``, ``aws/us-west-2``, ``gcp``...
        as_of: The oldest dated price (ISO), None when the source records no date.
        age_days: Days since ``as_of`` (None when undated).
        source: ``bundled``, ``refreshed`` or ``bundled+refreshed`` (srift catalog refresh).
        undated_rows: Rows whose source records no date.
        rows: Rows of the target.
        refreshed_regions: Regions re-priced by ``srift catalog refresh``.
    """

    target: str
    as_of: str | None
    age_days: int | None
    source: str
    undated_rows: int
    rows: int
    refreshed_regions: tuple[str, ...] = ()

    @property
    def stale(self) -> bool:
        """Older than STALE_AFTER_DAYS, or of unknown age."""
        return self.age_days is None or self.age_days > STALE_AFTER_DAYS or self.undated_rows > 0

    def to_dict(self) -> dict[str, Any]:
        return {"as_of": self.as_of, "age_days": self.age_days, "source": self.source, "undated_rows": self.undated_rows,
                "rows": self.rows, "refreshed_regions": list(self.refreshed_regions), "stale": self.stale}


def ages_json(ages: dict[str, PriceAge]) -> dict[str, Any]:
    """``catalog_as_of`` in every JSON document: target -> its age and source."""
    return {k: v.to_dict() for k, v in ages.items()}


@dataclass(frozen=True)
class GpuOffers:
    """One GPU type of the catalog, as `srift catalog gpus` lists it.

    Attributes:
        gpu: Canonical GPU name.
        memory_gib: Memory per GPU.
        instance_types: The instance types that have it.
        counts: GPUs per instance offered.
        clouds: cloud -> {``on_demand``, ``spot``} -> (cheapest $ per GPU-hour, where) or None.
        supported: The current PyTorch CUDA wheels run on it (every host it comes with).
    """

    gpu: str
    memory_gib: float
    instance_types: tuple[str, ...]
    counts: tuple[int, ...]
    clouds: dict[str, dict[str, tuple[float, str] | None]]
    supported: bool

    @property
    def cheapest_usd_per_gpu_hour(self) -> float | None:
        """The cheapest on-demand $ per GPU-hour over the clouds."""
        prices = [m["on_demand"][0] for m in self.clouds.values() if m["on_demand"] is not None]
        return min(prices) if prices else None


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
        catalog_as_of: Age of the prices used, per cloud/region (empty for a cluster file).
        host_arch: ``x86_64``, ``arm64`` or ``mixed`` for catalog instances, None for a cluster file.
        uncertainty: The prediction's log-normal spread (model error and run-to-run; srift/search/confidence.py).
        network_fallbacks: For a multi-node EFA cluster: the prediction with one EFA interface and
            without EFA (what a launcher that does not set up every interface gets).
        price: Source, date and trust of the price (None for a cluster file).
        memory_what_if: A fine-tuning job's what-if: each memory trick or smaller setting alone,
            its memory and speed (srift/simulate/whatif.py); empty otherwise.
    """

    prediction: Prediction
    model: str
    precision: str
    optimizer: str
    kfac_strategy: str
    spot_pricing: bool
    catalog_as_of: dict[str, PriceAge] = dataclasses.field(default_factory=dict)
    host_arch: str | None = None
    uncertainty: Uncertainty | None = None
    network_fallbacks: tuple[tuple[str, Prediction], ...] = ()
    price: PriceProvenance | None = None
    memory_what_if: tuple[WhatIf, ...] = ()
    schema: str = PREDICT_SCHEMA


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
        infra: The clouds and regions searched (``--infra`` spelling).
        catalog_as_of: Age of the prices searched, per ``--infra`` target.
        network_fallbacks: The chosen configuration's prediction with one EFA interface and
            without EFA, when it is a multi-node EFA cluster (``PredictResult``).
        grad_accum_searched: The micro-batches per step searched within a fixed global batch
            (empty when only one was); ``job.grad_accum`` is the one chosen.
        global_batch_limit: The largest global batch the search kept to (without a fixed one).
        gpu_range: The GPU counts a layout search covered when ``--max-gpus`` was not given.
        global_batch_defaulted: A layout search's global batch is the family's published one
            (``global_batch_limit``), not ``--global-batch-size``.
        compression_tip: A DDP communication hook that would make the chosen configuration
            faster by more than its typical error (srift/search/hooks.py), or None.
    """

    search: SearchResult
    constraints: Constraints
    job: Job
    model: str
    precision: str
    batch_size: int
    seq_len: int | None
    infra: str
    catalog_as_of: dict[str, PriceAge] = dataclasses.field(default_factory=dict)
    network_fallbacks: tuple[tuple[str, Prediction], ...] = ()
    grad_accum_searched: tuple[int, ...] = ()
    global_batch_limit: GlobalBatchLimit | None = None
    gpu_range: GpuRange | None = None
    global_batch_defaulted: bool = False
    compression_tip: CompressionTip | None = None
    schema: str = RECOMMEND_SCHEMA


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
    region: str  # where it is priced: ``aws/us-east-1`` (several, comma-separated, for a spec across regions)
    typical_error_pct: float | None
    typical_error_basis: str
    notes: tuple[str, ...] = ()
    plan: str = "ddp"  # parallelism and checkpointing (Prediction.plan_label): ddp, fsdp+sel, ...
    stack: str | None = None  # the training stack it is priced under (Prediction.stack)


@dataclass(frozen=True)
class MetricChange:
    """One figure against the baseline's (``comparable`` False: the two configurations were chosen
    by different rules, e.g. the cheapest within the limits against the closest to them, so the
    change is not a like-with-like one and no percentage is given)."""

    base: float
    new: float
    change: float
    change_pct: float | None
    comparable: bool = True


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
        limits: Each limit against its prediction (hours and cost at the confidence).
        catalog_as_of: Age and source of the prices used, per cloud/region.
        at_confidence: Hours and cost at the job file's confidence, and the sigmas behind them.
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
    catalog_as_of: dict[str, PriceAge]
    at_confidence: AtConfidence
    change: dict[str, MetricChange] | None = None
    schema: str = CHECK_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (``--format json``, ``--out-file``)."""
        out: dict[str, Any] = {
            "schema": self.schema,
            "passed": self.passed,
            "confidence": self.at_confidence.confidence,
            "predicted_cost_usd": self.predicted_cost_usd,
            "predicted_hours": self.predicted_hours,
            f"predicted_cost_usd_{self.at_confidence.label}": self.at_confidence.cost_usd,
            f"predicted_hours_{self.at_confidence.label}": self.at_confidence.hours,
            "uncertainty": self.at_confidence.uncertainty.to_dict(),
            "cost_per_hour_usd": self.cost_per_hour_usd,
            "configuration": dataclasses.asdict(self.configuration),
            "job": {"model": self.model, "precision": self.precision, "steps": self.steps, "optimizer": self.optimizer},
            "limits": [c.to_dict() for c in self.limits],
            "catalog_as_of": ages_json(self.catalog_as_of),
        }
        if self.change is not None:
            out["change"] = {k: dataclasses.asdict(v) for k, v in self.change.items()}
        return out


@dataclass(frozen=True)
class LaunchGroup:
    """``nodes`` identical nodes of a configuration.

    Attributes:
        nodes: Node count.
        gpus_per_node: GPUs per node (worker processes: one per GPU).
        gpu: GPU name (srift's), or ``cpu``.
        spot: The nodes are spot (preemptible) instances.
        per_gpu_batch: Samples per GPU per iteration in this group (None when unknown).
        instance: The catalog row of the nodes; None for machines of a cluster file.
    """

    nodes: int
    gpus_per_node: int
    gpu: str
    spot: bool
    per_gpu_batch: int | None
    instance: Instance | None

    @property
    def label(self) -> str:
        """``g5.12xlarge x 3 (4 x A10G each)``, or ``2 nodes (4 x V100-32GB each)`` for a cluster file."""
        kind = f"{self.instance.instance_type} x {self.nodes}" if self.instance is not None else \
            f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
        return f"{kind} ({self.gpus_per_node} x {self.gpu} each{', spot' if self.spot else ''})"


@dataclass(frozen=True)
class LaunchPlan:
    """What to start, and what srift predicted for it.

    Attributes:
        model: The job's model or profile name.
        configuration: The configuration's spec (``g5.12xlarge:3``, ``a:1@on-demand+a:2@spot``).
        groups: Its node groups, in node-rank order.
        prediction: srift's prediction for it.
        network_fallbacks: ``(what, prediction)`` with one EFA interface and without EFA, for a
            multi-node EFA cluster (``srift.api.network_fallbacks``).
    """

    model: str
    configuration: str
    groups: tuple[LaunchGroup, ...]
    prediction: Prediction
    network_fallbacks: tuple[tuple[str, Prediction], ...] = ()

    @property
    def nodes(self) -> int:
        return sum(g.nodes for g in self.groups)

    @property
    def workers(self) -> int:
        return sum(g.nodes * g.gpus_per_node for g in self.groups)

    def summary(self) -> str:
        """One line: what runs and what srift predicts for it."""
        p = self.prediction
        cost = f" at ${p.cost_per_hour_usd:,.2f}/h" if p.cost_per_hour_usd is not None else ""
        batch = {g.per_gpu_batch for g in self.groups}
        per_gpu = f"batch {batch.pop()} per GPU, " if len(batch) == 1 and None not in batch else ""
        spot = " [Spot]" if all(g.spot for g in self.groups) else ""
        return (f"{self.model} on {self.configuration}{spot}: {self.nodes} node{'s' if self.nodes > 1 else ''}, {self.workers} workers, "
                f"{per_gpu}global batch {p.global_batch_size}; srift predicts {p.expected_throughput_samples_per_s:,.0f} "
                f"samples/s{cost}.")
