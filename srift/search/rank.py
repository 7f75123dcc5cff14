"""Ranking configurations: the objective's order, the Pareto frontier, what to say when nothing is
feasible, and the ONE rule on how much a more complex configuration must win by.

**Simplicity is an order.** Fewer nodes is simpler (one node is measured hundreds of times, several
nodes a handful, and every node more is one more to fail); at equal node counts, fewer instance
types; then the market (on demand < spot < a spot/on-demand mix). So 3 nodes are simpler than 38,
and 38 nodes of one type simpler than 38 of two. Predictions err, and two predictions share part of
their error (``combined_error_pct``). Where the validation measured pairs of runs of the two
predictions' group (a decoder LLM's layouts, dense or MoE), the error between them is the error of
what differs, from those pairs' residuals (srift/fitting/pairs.py, configs/perf/accuracy.json's
``pairs_*`` groups): the scaling term on one instance type and stack (1.3 % over 76 pairs of dense
Megatron runs, 13.6 % over 10 MoE pairs), the cross-GPU term on other GPUs (17.8 % over 109 MoE
pairs); other stacks share nothing. Elsewhere: on the same GPUs the compute model's error is
shared; on the same machines the smaller configuration's error is part of the larger's; across
GPU types nothing is shared. The chosen configuration is the best-ranked one that beats **every** simpler feasible
configuration by more than their combined typical error (``choose``): a 38-node cluster 19 %
faster than a 3-node one, with ±20 % of error between them, loses to the 3-node one, which is shown
first with the 38-node cluster as runner-up and a sentence saying why. The same comparison between
the top two on different GPUs, neither simpler, is a close call (``close_call``).

**Ranking at the confidence.** When limits are set (a budget, deadline or maximum cost), the order
is taken at the search's confidence quantile (throughput divided, cost multiplied, by
exp(z sigma) of each prediction's own uncertainty): a configuration whose median is high but whose
error is wide does not outrank a surer one. **Ties within noise** (objectives less than
``TIE_FRACTION`` apart, far below any validated error) go to the cheaper, then the simpler, then
the more available (offered in more regions) configuration, so noise never decides. Under the
cost objective the faster of two tied configurations goes first (a tie on cost is not a tie on time).

**Dominance first.** A configuration another one beats on hours and cost at both the median and
the ranking quantile (srift/search/dominance.py) is never chosen and never blocks a more complex
one: the simplicity rule compares only the others (the rows keep the objective's order).

**Alternatives, not neighbours.** The rows after the chosen one are the best configuration of each
other instance family (``order``), not the chosen type with one node more or less.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


from srift.catalog.provenance import PriceProvenance
from srift.job import JobRun, usd_per_million_samples
from srift.perf.accuracy import pair_typical_error
from srift.search.confidence import AtConfidence, mape_from_sigma, uncertainty_of, z_of
from srift.search.dominance import TIE_FRACTION, dominated
from srift.search.limits import THROUGHPUT
from srift.search.space import Market
from srift.simulate.prediction import Prediction



class Exclusion(IntEnum):
    """Why an offer misses the limits: the first limit it misses, NONE when it meets them all (the
    offer table's ``reason`` column holds the ints, a Candidate's ``reason`` the label)."""

    NONE = 0
    MEMORY = 1
    DEADLINE = 2
    MAX_COST = 3

    @property
    def label(self) -> str:
        """The reason as the documents name it ("" for NONE)."""
        return ("", "memory", "deadline", "max-cost")[self]


@dataclass
class Candidate:
    """One priced configuration.

    Attributes:
        instance: A spec `srift predict --instance` accepts.
        label: How tables name it (the spec, `` [Spot]`` when all on spot).
        spot: True when any node is spot.
        gpus: GPUs of the configuration.
        nodes: Nodes of the configuration.
        cost_per_hour_usd: Price of the whole configuration.
        prediction: The simulator's prediction.
        run: Steps, hours and cost of the job at the median (None without a job length).
        feasible: It meets every limit.
        reason: The limit it misses first (``memory``, ``deadline`` or ``max-cost``), else "".
        at_confidence: Job hours and cost at the search's confidence (None without a length).
        cloud: The cloud (``aws``, ``gcp``, ``lambda``, ``azure``).
        region: The region where it ranks best.
        regions: ``region`` first, then the other regions offering it at the same price.
        host_arch: ``x86_64`` or ``arm64`` (Graviton, Grace).
        supported: The current PyTorch CUDA wheel runs on its GPUs and host
            (``srift.catalog.supported``); False only with ``--include-unsupported``.
        types: Instance types in it (2 for a two-type mix).
        market: The market, simplest first (on demand, spot, one on-demand node with spot nodes).
        hardware: The ``Instance.hardware_key`` of each distinct part (what its error shares).
        vcpus_per_gpu: The fewest vCPUs per GPU of its instances (what feeds the input pipeline).
        flags: Catalog row flags of its instances (``suspect-price``, ...).
        price: Source, date and trust of its price (estimated or suspect prices are marked).
        families: Instance families of its parts (``--top`` shows the best of each).
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
    at_confidence: AtConfidence | None = None
    cloud: str = "aws"
    region: str = ""
    regions: tuple[str, ...] = ()
    host_arch: str = "x86_64"
    supported: bool = True
    types: int = 1
    market: Market = Market.ON_DEMAND
    hardware: tuple[Any, ...] = ()
    vcpus_per_gpu: float | None = None
    flags: tuple[str, ...] = ()
    price: PriceProvenance | None = None
    families: tuple[str, ...] = ()

    @property
    def expected_throughput_samples_per_s(self) -> float:
        return self.prediction.expected_throughput_samples_per_s

    @property
    def usd_per_million_samples(self) -> float | None:
        return usd_per_million_samples(self.cost_per_hour_usd, self.expected_throughput_samples_per_s)

    @property
    def job_hours(self) -> float | None:
        """Job hours at the median (p50)."""
        return None if self.run is None else self.run.hours

    @property
    def job_cost_usd(self) -> float | None:
        """Job cost at the median (p50)."""
        return None if self.run is None else self.run.cost_usd

    @property
    def infra(self) -> str:
        """SkyPilot's spelling of where it runs: ``aws/us-west-2``."""
        return f"{self.cloud}/{self.region}"

    @property
    def complexity(self) -> tuple[int, int, int]:
        """(nodes, instance types, market), compared in that order: lower is simpler."""
        return (self.nodes, self.types, self.market)

    def quantile_factor(self, confidence: float | None) -> float:
        """How much slower than its median the configuration runs at ``confidence`` (1 for None):
        exp(z sigma) of its own uncertainty (srift/search/confidence.py)."""
        if confidence is None:
            return 1.0
        if self.at_confidence is not None and self.job_hours:
            return self.at_confidence.hours / self.job_hours
        return math.exp(z_of(confidence) * uncertainty_of(self.prediction, None).sigma)


def pareto(cands: Iterable[Candidate]) -> list[Candidate]:
    """Candidates no other beats on both cost per hour (lower) and expected throughput (higher)."""
    out: list[Candidate] = []
    best = -1.0
    for c in sorted(cands, key=lambda c: (c.cost_per_hour_usd, -c.expected_throughput_samples_per_s)):
        if c.expected_throughput_samples_per_s > best:
            out.append(c)
            best = c.expected_throughput_samples_per_s
    return out


def objective_key(goal: str, confidence: float | None = None) -> Callable[[Candidate], tuple[float, float]]:
    """Sort key, best first: ``throughput`` (highest, then cheapest per hour) or ``cost`` (job cost
    when the length is known, else $ per million samples; then highest throughput), each at the
    ``confidence`` quantile when given (module docstring), else at the median."""
    if goal == THROUGHPUT:
        return lambda x: (-x.expected_throughput_samples_per_s / x.quantile_factor(confidence), x.cost_per_hour_usd)

    def cost(x: Candidate) -> tuple[float, float]:
        value = x.job_cost_usd if x.job_cost_usd is not None else x.usd_per_million_samples
        q = x.quantile_factor(confidence)
        return (math.inf if value is None else value * q, -x.expected_throughput_samples_per_s / q)

    return cost


def settle_ties(ranked: Sequence[Candidate], goal: str, confidence: float | None = None) -> list[Candidate]:
    """``ranked`` with every run of candidates whose objectives are within ``TIE_FRACTION`` of the
    run's first reordered: cheaper per hour (for throughput), faster (for cost: they cost the
    same), then simpler, then offered in more regions."""
    key = objective_key(goal, confidence)
    out: list[Candidate] = []
    i = 0
    while i < len(ranked):
        lead = abs(key(ranked[i])[0])
        j = i + 1
        while j < len(ranked) and abs(abs(key(ranked[j])[0]) - lead) <= TIE_FRACTION * lead:
            j += 1
        out += sorted(ranked[i:j], key=lambda c: (c.cost_per_hour_usd if goal == THROUGHPUT
                                                  else -c.expected_throughput_samples_per_s / c.quantile_factor(confidence),
                                                  c.complexity, -len(c.regions)))
        i = j
    return out


def _metric(c: Candidate, goal: str, by_job: bool, confidence: float | None = None) -> float:
    """Higher is better: throughput, or 1 / cost, at the ``confidence`` quantile when given."""
    q = c.quantile_factor(confidence)
    if goal == THROUGHPUT:
        return c.expected_throughput_samples_per_s / q
    value = c.job_cost_usd if by_job else c.usd_per_million_samples
    return 0.0 if not value else 1.0 / (value * q)


def edge(better: Candidate, worse: Candidate, goal: str, confidence: float | None = None) -> float:
    """How much ``better`` beats ``worse`` on the objective, as a fraction (negative when it does
    not): throughput gained, or cost saved relative to the other's, at the ranking quantile."""
    by_job = better.job_cost_usd is not None and worse.job_cost_usd is not None
    mw = _metric(worse, goal, by_job, confidence)
    return math.inf if mw == 0 else _metric(better, goal, by_job, confidence) / mw - 1.0


def _spot_pct(c: Candidate) -> float:
    return 100.0 * mape_from_sigma(c.at_confidence.uncertainty.spot) if c.at_confidence is not None else 0.0


def pair_error_pct(a: Prediction, b: Prediction) -> float | None:
    """The error of what differs between two predictions of one validation group and stack, from
    the validation's pairs of runs (srift/fitting/pairs.py): the scaling term on the same GPUs, the
    cross-GPU term on others; None where the two differ in group or stack, or no pair was measured."""
    if a.pair_group is None or a.pair_group != b.pair_group or a.parallelism != b.parallelism:
        return None
    return pair_typical_error(a.pair_group, a.gpu_types == b.gpu_types)


def combined_error_pct(a: Candidate, b: Candidate) -> float | None:
    """The typical error of two predictions that they do not share (None when either prediction
    has no validated figure): the validation's own figure for the pair where it has one
    (``pair_error_pct``), else their unshared parts root-sum-squared (module docstring); spot
    interruptions over the job are never shared."""
    ta, tb = a.prediction.typical_error_pct, b.prediction.typical_error_pct
    if ta is None or tb is None:
        return None
    pair = pair_error_pct(a.prediction, b.prediction)
    if pair is not None:
        base = pair
    elif a.prediction.gpu_types != b.prediction.gpu_types:
        base = math.hypot(ta, tb)
    else:
        shared = min(a.prediction.compute_error_pct or 0.0, b.prediction.compute_error_pct or 0.0)
        ra, rb = math.sqrt(max(0.0, ta * ta - shared * shared)), math.sqrt(max(0.0, tb * tb - shared * shared))
        base = math.sqrt(abs(ra * ra - rb * rb)) if a.hardware and a.hardware == b.hardware else math.hypot(ra, rb)
    return math.sqrt(base * base + _spot_pct(a) ** 2 + _spot_pct(b) ** 2)


def simpler(than: Candidate, other: Candidate) -> bool:
    """True when ``other`` is simpler than ``than``: fewer nodes, or as many and fewer instance
    types, or as many of both and a simpler market (module docstring)."""
    return other.complexity < than.complexity


def what_it_adds(complex_: Candidate, simple: Candidate) -> str:
    """``3 nodes instead of 1``, ``two instance types``, ``spot instances``: what the complex one needs."""
    out = []
    if complex_.nodes > simple.nodes:
        out.append(f"{complex_.nodes} nodes instead of {simple.nodes}")
    if complex_.types > simple.types:
        out.append("two instance types")
    if complex_.market > simple.market:
        out.append("spot and on-demand nodes together" if complex_.market == Market.SPOT_MIX else "spot instances")
    return " and ".join(out)


@dataclass(frozen=True)
class SimplerChoice:
    """Why a simpler configuration was chosen over the best-ranked one.

    Attributes:
        chosen: The configuration chosen.
        over: The best-ranked configuration (shown as runner-up).
        blocker: The simpler configuration ``over`` could not beat by enough (often ``chosen``).
        edge: How much ``over`` beats ``blocker`` (fraction).
        error_pct: Their combined typical error.
        adds: What ``over`` needs that ``blocker`` does not.
    """

    chosen: Candidate
    over: Candidate
    blocker: Candidate
    edge: float
    error_pct: float
    adds: str




def choose(ranked: Sequence[Candidate], goal: str, confidence: float | None = None) -> tuple[int, SimplerChoice | None]:
    """The ONE rule: the index of the best-ranked candidate that beats every simpler candidate by
    more than their combined typical error, and why it is not the first (None when it is). Only
    candidates no other dominates are chosen or block (srift/search/dominance.py).

    Args:
        ranked: Feasible candidates, best first by the objective.
        goal: ``throughput`` or ``cost``.
        confidence: The quantile the objective is compared at (None: the median).
    """
    if len(ranked) < 2:
        return 0, None
    keys = [c.complexity for c in ranked]
    dom = dominated(ranked, confidence)
    if all(dom):  # a cycle within the tie fraction: nothing stands out, so nothing is set aside
        dom = [False] * len(ranked)
    first_block: tuple[int, int, float, float] | None = None  # (the first considered, its blocker, edge, error)
    for i, x in enumerate(ranked):
        if dom[i]:
            continue
        k = x.complexity
        blocker = None
        for j in (j for j, kj in enumerate(keys) if kj < k and not dom[j]):
            s = ranked[int(j)]
            gain = edge(x, s, goal, confidence)
            err = combined_error_pct(x, s)
            if gain * 100.0 < (err or 0.0) or gain <= 0:
                blocker = (int(j), gain, err or 0.0)
                break
        if blocker is None:
            if first_block is None:
                return i, None
            lead, b, gain, err = first_block
            top = ranked[lead]
            return i, SimplerChoice(x, top, ranked[b], gain, err, what_it_adds(top, ranked[b]))
        if first_block is None:
            first_block = (i, *blocker)
    # Unreachable: the simplest candidates have nothing simpler and pass.
    raise AssertionError("no candidate passed the simplicity rule")


@dataclass(frozen=True)
class CloseCall:
    """The runner-up runs on other GPUs (neither is simpler) and trails the chosen one by less than
    their combined typical error: the order is not settled until the job is profiled on each.

    Attributes:
        gap: How far the runner-up trails, as a fraction (throughput lost, or cost added).
        error_pct: Their combined typical error.
        gpus: GPUs of the chosen configuration.
        runner_up_gpus: GPUs of the runner-up.
    """

    gap: float
    error_pct: float
    gpus: tuple[str, ...]
    runner_up_gpus: tuple[str, ...]


def close_call(top: Candidate, runner_up: Candidate, goal: str) -> CloseCall | None:
    """The close call between the top two, if it is one (the same comparison as ``choose``)."""
    gpus, other = top.prediction.gpu_types, runner_up.prediction.gpu_types
    err = combined_error_pct(top, runner_up)
    if err is None or gpus == other or simpler(top, runner_up) or simpler(runner_up, top):
        return None
    gap = edge(top, runner_up, goal)
    return CloseCall(gap, err, gpus, other) if 0 <= gap * 100.0 < err else None


@dataclass
class SearchResult:
    """What `srift recommend` shows.

    Attributes:
        recommendations: The chosen configuration, then the runner-ups (the best-ranked first when
            a simpler one was chosen over it), then the rest by the objective.
        considered: Configurations that exist in the search space (every row, count and market).
        evaluated: Configurations priced from a simulation.
        simulated: Simulations run (one per hardware and node count, shared by every region).
        frontier: Pareto-optimal feasible-or-not candidates among those priced (throughput vs $/h),
            cheapest first.
        evaluated_points: (cost per hour, expected throughput, feasible, GPUs) of the priced ones
            (at most a few thousand, for the plot); GPUs names its GPU types (``A10G``, ``A10G+V100``
            for a mix).
        objective: ``throughput`` or ``cost``.
        cut_by: When nothing is feasible: the limit that binds (srift/search/diagnose.py), or what
            removed the last candidates (memory, budget, layout).
        closest: When nothing is feasible: the candidate that comes closest (to the binding limit,
            meeting the others).
        misses: When nothing is feasible: each job limit against the plan that meets the others
            and comes closest to it.
        pruned: Configurations left out before simulation, by reason (``budget``, ``memory``,
            ``unsupported``, ``batch``, ``max_gpus``, ``bound``: counts that could not win).
        best_single_node: When the chosen configuration spans several nodes: the best feasible
            one-node configuration, or None.
        simpler_choice: Why a simpler configuration was chosen over the best-ranked one, or None.
        confidence: The confidence limits were met at.
        regions_searched: ``cloud/region`` of every region whose rows were searched.
        families: Instance families among the feasible configurations compared (``--top`` shows
            the best of each, so fewer rows than asked means fewer families).
        best_at_median: When ranking at the confidence put another configuration first: the one
            that ranks first at the median (the view says why it lost), else None.
        ranked_at: The quantile the order (and the simplicity rule's edges) were taken at; None:
            the median (no limit set).
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
    simpler_choice: SimplerChoice | None = None
    simulated: int = 0
    confidence: float = 0.9
    regions_searched: tuple[str, ...] = ()
    families: int = 0
    best_at_median: Candidate | None = None
    ranked_at: float | None = None
    misses: list[Any] = field(default_factory=list)  # srift.search.diagnose.LimitMiss (it imports this module)

    @property
    def close_call(self) -> CloseCall | None:
        """The close call between the top two recommendations, if it is one."""
        recs = self.recommendations
        if len(recs) < 2 or self.simpler_choice is not None:
            return None
        return close_call(recs[0], recs[1], self.objective)


def order(feasible: Sequence[Candidate], goal: str, top: int, confidence: float | None = None,
          diverse: bool = True) -> tuple[list[Candidate], SimplerChoice | None]:
    """The recommendations (``top`` of them) after the simplicity rule: the chosen first, the
    best-ranked next when it was passed over, then the best of each other instance family
    (``diverse``; else every next one) in the objective's order (ranked at ``confidence`` when
    given; ties settled by ``settle_ties``)."""
    ranked = settle_ties(sorted(feasible, key=objective_key(goal, confidence)), goal, confidence)
    i, why = choose(ranked, goal, confidence)
    chosen = ranked[i]
    out = [chosen] + ([why.over] if why is not None else [])
    seen = {c.families for c in out}
    for c in ranked:
        if len(out) >= top:
            break
        if (c.families not in seen if diverse else all(c is not o for o in out)):
            out.append(c)
            seen.add(c.families)
    return out[:top], why


def families_of(cands: Iterable[Candidate]) -> int:
    """How many instance families (or family pairs of a mix) the candidates span."""
    return len({c.families for c in cands})


def explain_failure(evaluated: Sequence[Candidate], budget_pruned: bool) -> tuple[str, Candidate | None]:
    """Which limit removed the last candidates, and the candidate that came closest (hours and
    cost at the search's confidence)."""
    if not evaluated:
        return ("budget" if budget_pruned else "memory"), None
    fits = [x for x in evaluated if x.reason != Exclusion.MEMORY.label]
    if not fits:
        return Exclusion.MEMORY.label, min(evaluated, key=lambda x: x.prediction.memory_per_gpu_bytes)
    if any(x.reason == Exclusion.DEADLINE.label for x in fits):
        return Exclusion.DEADLINE.label, min(fits, key=lambda x: x.at_confidence.hours if x.at_confidence is not None else math.inf)
    return Exclusion.MAX_COST.label, min(fits, key=lambda x: x.at_confidence.cost_usd if x.at_confidence and x.at_confidence.cost_usd else math.inf)
