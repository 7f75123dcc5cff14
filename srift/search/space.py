"""The search space: which configurations of the catalog exist, which are left out before any
simulation, and which share one simulation.

Per GPU instance type of the selected clouds and regions (``--infra``; optionally filtered by GPU;
AMD GPUs only when named with --gpu, since a CUDA profile says little about a ROCm run; GPUs the
current PyTorch CUDA wheels do not run on only with ``--include-unsupported``):

* ``n`` instances for every ``n`` with ``n x GPUs per instance <= max_gpus``, on demand, and on
  spot when spot is allowed;
* with ``mixed``: one on-demand node beside ``n - 1`` spot nodes of the same type (the on-demand
  node keeps the job's data and rendezvous alive), and two-type mixes of the types on the
  single-type Pareto frontier, within one cloud and region (srift/search/mixes.py).

**One simulation per hardware, not per region.** A prediction depends on the hardware (GPU,
vCPUs, links, network: ``Instance.hardware_key``), not on where it runs or what it costs, so the
rows of every region (and the same hardware under two names) form one ``HardwareGroup``: each
node count is simulated once and priced in every region at once (srift/search/offers.py).

Left out before simulating, and counted: over the budget (prices are known), out of memory (a
cheap per-type pre-check), GPUs the wheels do not run on, and with a fixed global batch, counts
whose GPUs do not divide it (srift never changes the global batch silently); for a layout search,
counts no layout divides or that could not meet the deadline at any layout (``count_ok``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from srift.catalog.instances import Instance
from srift.catalog.support import supported
from srift.errors import SriftError
from srift.hardware import gpus
from srift.search.limits import Constraints

NON_CUDA_ARCHITECTURES = ("rdna1",)  # AMD GPUs: considered only when named with --gpu


class Market(IntEnum):
    """The market of one type's configuration, simplest first: all on demand, all on spot, one
    on-demand node with n-1 spot nodes (the offer table's ``market`` column holds the ints)."""

    ON_DEMAND = 0
    SPOT = 1
    SPOT_MIX = 2

    @property
    def label(self) -> str:
        """The market as the documents and tables name it."""
        return ("on-demand", "spot", "spot/on-demand mix")[self]


def cuda_gpu(name: str) -> bool:
    """True for GPUs a PyTorch CUDA job runs on as profiled (unknown names count as CUDA)."""
    spec = gpus().get(name)
    return spec is None or spec.architecture not in NON_CUDA_ARCHITECTURES


def wheel_runs(inst: Instance) -> bool:
    """False only for hardware the current PyTorch CUDA wheels are known not to run on
    (``srift.catalog.supported``); a GPU srift has no datasheet for is not left out on a guess."""
    return gpus().get(inst.gpu_name) is None or supported(inst)[0]


@dataclass(frozen=True)
class TypeSelection:
    """The catalog rows a search prices.

    Attributes:
        rows: Priced rows of the wanted GPUs (the --gpu filter, else every CUDA GPU), without
            unsupported hardware unless asked for.
        unsupported: Rows left out because the current PyTorch wheels do not run on them.
    """

    rows: list[Instance]
    unsupported: list[Instance]


def instance_types(catalog: Sequence[Instance], c: Constraints) -> TypeSelection:
    """The priced rows to search (see ``TypeSelection``).

    Raises:
        SriftError: when no row is left, saying whether the GPU filter or the supported-hardware
            rule removed them.
    """
    wanted = [i for i in catalog if i.on_demand_usd_per_hour is not None and (i.gpu_name in c.gpus if c.gpus else cuda_gpu(i.gpu_name))]
    if not wanted:
        raise SriftError("no priced instance type matches the --gpu filter in the selected clouds and regions.",
                         "check the names with `srift catalog gpus`, or drop --gpu.")
    if c.include_unsupported:
        return TypeSelection(wanted, [])
    ok = [i for i in wanted if wheel_runs(i)]
    if not ok:
        reason = supported(wanted[0])[1]
        raise SriftError(f"no instance type left: {reason}", "pass --include-unsupported to search them anyway (with an older PyTorch).")
    return TypeSelection(ok, [i for i in wanted if not wheel_runs(i)])


@dataclass
class HardwareGroup:
    """Catalog rows with one hardware (``Instance.hardware_key``): simulated once per node count.

    Attributes:
        index: Position in the search's group list.
        rows: Indices into the search's row list (every region and name with this hardware).
        rep: The row whose cluster is simulated (any: they predict alike).
        memory_ok: The job fits on one of its GPUs (cheap pre-check).
        counts: Node counts that exist (GPU limit; with a fixed global batch, those dividing it).
        max_count: The largest count any of its offers can afford (budget) within ``counts``.
    """

    index: int
    rows: np.ndarray
    rep: Instance
    memory_ok: bool
    counts: np.ndarray
    max_count: int = 0

    @property
    def gpu_count(self) -> int:
        return self.rep.gpu_count


@dataclass
class Space:
    """What a search prices: rows (as arrays) grouped by hardware, the markets, the counts.

    Attributes:
        rows: The priced rows.
        groups: One per hardware.
        markets: The markets searched.
        on_demand, spot, rate: Per row: on-demand and spot $/h per node (NaN when none) and spot
            interruptions per node-hour.
        place: Per row: index of its (cloud, region) in ``places``.
        places: The (cloud, region) pairs of the rows.
        type_id: Per row: index of its (cloud, instance type) (the same type in several regions).
        considered: Configurations that exist (every row, count and market within the GPU limit).
        pruned: Left out before simulating, by reason (``budget``, ``memory``, ``unsupported``,
            ``batch``, ``max_gpus``).
    """

    rows: list[Instance]
    groups: list[HardwareGroup]
    markets: tuple[Market, ...]
    on_demand: np.ndarray
    spot: np.ndarray
    rate: np.ndarray
    place: np.ndarray
    places: list[tuple[str, str]]
    type_id: np.ndarray
    considered: int = 0
    pruned: dict[str, int] = field(default_factory=dict)

    def price(self, rows: np.ndarray, market: Market, n: np.ndarray | int) -> np.ndarray:
        """$/h of ``n`` nodes of each row on a market (NaN where the row has no such price)."""
        if market == Market.ON_DEMAND:
            return self.on_demand[rows] * n
        if market == Market.SPOT:
            return self.spot[rows] * n
        return self.on_demand[rows] + self.spot[rows] * (np.asarray(n) - 1)

    def interruptions(self, rows: np.ndarray, market: Market, n: np.ndarray | int) -> np.ndarray:
        """Spot interruptions per hour of the whole configuration."""
        if market == Market.ON_DEMAND:
            return np.zeros(np.broadcast(rows, n).shape)
        return self.rate[rows] * (np.asarray(n) - (1 if market == Market.SPOT_MIX else 0))

    def market_counts(self, market: Market, counts: np.ndarray) -> np.ndarray:
        """The counts a market has (a spot/on-demand mix needs two nodes)."""
        return counts[counts >= 2] if market == Market.SPOT_MIX else counts

    def budget_cap(self, rows: np.ndarray, market: Market, budget: float | None) -> np.ndarray:
        """Per row, the most nodes of that market within the budget (0 when not priced there)."""
        big = np.iinfo(np.int64).max // 4
        if market == Market.ON_DEMAND:
            unit, fixed = self.on_demand[rows], np.zeros(len(rows))
        elif market == Market.SPOT:
            unit, fixed = self.spot[rows], np.zeros(len(rows))
        else:
            unit, fixed = self.spot[rows], self.on_demand[rows] - self.spot[rows]
        priced = ~np.isnan(unit) & ~np.isnan(fixed)
        if budget is None:
            return np.where(priced, big, 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            cap = np.floor((budget + 1e-9 - np.nan_to_num(fixed)) / np.where(priced, unit, 1.0))
        return np.where(priced, np.clip(cap, 0, big), 0).astype(np.int64)


@dataclass(frozen=True)
class CountFilter:
    """A ``count_ok`` that answers for many counts at once: ``mask(instance, nodes)`` is a bool per
    count of ``nodes`` (a search asks it of every count of every hardware group)."""

    mask: Callable[[Instance, np.ndarray], np.ndarray]

    def __call__(self, inst: Instance, nodes: int) -> bool:
        return bool(self.mask(inst, np.array([nodes], dtype=np.int64))[0])


def build_space(selection: TypeSelection, c: Constraints, memory_ok: Callable[[Instance], bool] | None = None,
                global_batch_size: int | None = None, count_ok: Callable[[Instance, int], bool] | None = None) -> Space:
    """Group the rows by hardware, fix each group's counts, and count what exists and what is left
    out before any simulation (``global_batch_size``: the fixed samples of one micro-batch over
    all GPUs, which a count's GPUs must divide; ``count_ok(instance, nodes)``: the counts that can
    train the job and meet its limits, srift.search.search)."""
    rows = selection.rows
    markets = (Market.ON_DEMAND,) + ((Market.SPOT,) if c.spot else ()) + ((Market.SPOT_MIX,) if c.spot and c.mixed else ())
    places: dict[tuple[str, str], int] = {}
    types: dict[tuple[str, str], int] = {}
    by_key: dict[tuple[object, ...], list[int]] = {}
    for i, r in enumerate(rows):
        places.setdefault((r.cloud, r.region), len(places))
        types.setdefault((r.cloud, r.instance_type), len(types))
        by_key.setdefault(r.hardware_key, []).append(i)
    space = Space(
        rows=rows, groups=[], markets=markets,
        on_demand=np.array([np.nan if r.on_demand_usd_per_hour is None else r.on_demand_usd_per_hour for r in rows]),
        spot=np.array([np.nan if r.spot_usd_per_hour is None else r.spot_usd_per_hour for r in rows]),
        rate=np.array([r.spot_interruption_per_hour for r in rows]),
        place=np.array([places[(r.cloud, r.region)] for r in rows], dtype=np.int64),
        places=list(places), type_id=np.array([types[(r.cloud, r.instance_type)] for r in rows], dtype=np.int64),
    )
    pruned = {"budget": 0, "memory": 0, "unsupported": 0, "batch": 0, "layout": 0, "max_gpus": 0}
    considered = 0
    for key, idx in by_key.items():
        rep = rows[idx[0]]
        members = np.asarray(idx, dtype=np.int64)
        all_counts = np.arange(1, c.node_limit(rep.gpu_count) + 1, dtype=np.int64)
        if len(all_counts) == 0:
            pruned["max_gpus"] += len(idx)
            continue
        counts = all_counts
        if global_batch_size is not None:
            # The global batch is fixed: a count whose GPUs do not divide it would change it.
            counts = all_counts[global_batch_size % (all_counts * rep.gpu_count) == 0]
        if isinstance(count_ok, CountFilter):
            counts = counts[count_ok.mask(rep, counts)]
        elif count_ok is not None:
            counts = counts[np.fromiter((count_ok(rep, int(n)) for n in counts), dtype=bool, count=len(counts))]
        fits = memory_ok(rep) if memory_ok is not None else True
        group = HardwareGroup(len(space.groups), members, rep, fits, counts)
        for m in markets:
            n_all = len(space.market_counts(m, all_counts))
            priced = int(np.count_nonzero(~np.isnan(space.price(members, m, 1))))
            considered += priced * n_all
            pruned["layout" if count_ok is not None else "batch"] += priced * (n_all - len(space.market_counts(m, counts)))
            if not fits:
                pruned["memory"] += priced * len(space.market_counts(m, counts))
                continue
            cap = space.budget_cap(members, m, c.budget_usd_per_hour)
            mc = space.market_counts(m, counts)
            over = (mc[None, :] > cap[:, None]).sum()
            pruned["budget"] += int(over) - int(np.count_nonzero(np.isnan(space.price(members, m, 1)))) * len(mc)
            within = mc[mc <= cap.max()] if len(cap) else mc[:0]
            group.max_count = max(group.max_count, int(within.max()) if len(within) else 0)
        space.groups.append(group)
    for r in selection.unsupported:
        n = c.node_limit(r.gpu_count)
        per_market = sum(1 for m in markets if (r.usd_per_hour(m == Market.SPOT) if m != Market.SPOT_MIX else r.spot_usd_per_hour) is not None)
        pruned["unsupported"] += n * per_market
    space.considered = considered + pruned["unsupported"]
    space.pruned = {k: v for k, v in pruned.items() if v or k == "memory"}  # memory's count is said even when 0
    return space


def seed_counts(group: HardwareGroup, space: Space, c: Constraints) -> np.ndarray:
    """The first counts a sweep simulates: 1 and 2 nodes, powers of two, the largest count, and
    each offer's budget cap (its most affordable cluster), within the group's counts."""
    counts = group.counts[group.counts <= group.max_count]
    if len(counts) == 0:
        return counts
    top = int(counts.max())
    seeds = {1, 2, top}
    seeds.update(2 ** k for k in range(int(math.log2(top)) + 1))
    for m in space.markets:
        cap = space.budget_cap(group.rows, m, c.budget_usd_per_hour)
        seeds.update(int(x) for x in np.unique(cap) if 0 < x <= top)
    # Snap each seed to an existing count (with a fixed global batch not every count exists).
    idx = np.searchsorted(counts, np.fromiter(seeds, dtype=np.int64), side="right") - 1
    return np.unique(counts[idx[idx >= 0]])
