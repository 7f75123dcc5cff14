"""Offers: one simulated configuration priced in every region and market at once (numpy arrays).

A ``Core`` is one simulation: node groups of given hardware and counts (``(group, count)`` parts).
An offer is a core on actual catalog rows (one per part, in one cloud and region) on a market:
its price, spot interruptions, expected throughput, job hours and cost at the median and at the
confidence, whether it meets the limits, and its objective value. Thousands of offers cost one
pass of array arithmetic, so a search over every region of three clouds simulates each hardware
once (srift/search/space.py) and prices the regions here.

Objective values are "lower is better": minus the expected throughput (``throughput``), the job
cost at the median when the length is known, else dollars per million samples (``cost``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from srift.catalog.provenance import combined, price_provenance
from srift.catalog.spec import Part, cluster_of, label_of
from srift.job import JobLength, JobRun
from srift.search import confidence as conf
from srift.search.limits import LIMIT_TOLERANCE, THROUGHPUT, Constraints
from srift.search.rank import Candidate, Exclusion
from srift.search.space import Market, Space
from srift.simulate.prediction import BatchShare, Prediction
from srift.simulate.spot import RESTART_S, checkpoint_interval_s, expectation, useful_fraction

@dataclass
class Core:
    """One simulation, shared by every region and market that prices the same hardware.

    Attributes:
        parts: ``(group index, node count)`` per node group.
        prediction: The simulation (of the groups' representative rows).
        steps: Iterations of the job at its global batch (None without a length).
        sigma_model: Log-sigma of the model's typical error (srift/search/confidence.py).
        sigma_spread: Log-sigma of the run-to-run spread (p90 iteration).
        checkpoint_s: Seconds one checkpoint takes (for spot offers).
    """

    parts: tuple[tuple[int, int], ...]
    prediction: Prediction
    steps: float | None
    sigma_model: float
    sigma_spread: float
    checkpoint_s: float

    @property
    def nodes(self) -> int:
        return sum(n for _, n in self.parts)


_DTYPES = {"core": np.int64, "row": np.int64, "row2": np.int64, "market": np.int64, "reason": np.int64, "feasible": bool}
_COLUMNS = ("core", "row", "row2", "market", "price", "rate", "throughput", "hours", "hours_q", "cost", "cost_q",
            "feasible", "reason", "objective", "tie")


class OfferTable:
    """Every priced offer of the simulated cores, as numpy columns. Offers are added in batches
    (``price_single``, ``price_pair``) and their derived columns computed in one pass when read.

    Args:
        space: The rows and markets.
        c: Limits, objective and confidence.
        length: The job's length (hours and cost; None: none).
    """

    def __init__(self, space: Space, c: Constraints, length: JobLength | None) -> None:
        self.space = space
        self.c = c
        self.length = length
        self.cores: list[Core] = []
        self._per_core: dict[str, list[float]] = {k: [] for k in ("throughput", "checkpoint", "fits", "steps", "batch",
                                                                  "sigma_model", "sigma_spread", "nodes")}
        self._core_arrays: dict[str, np.ndarray] | None = None
        self._pending: list[dict[str, np.ndarray]] = []
        self._cols: dict[str, np.ndarray] = {k: np.zeros(0, dtype=_DTYPES.get(k, float)) for k in _COLUMNS}

    # ---- adding -------------------------------------------------------------------------------
    def add_core(self, parts: tuple[tuple[int, int], ...], pred: Prediction) -> int:
        """Record a simulation; returns its index."""
        steps = self.length.steps_for(pred.global_batch_size) if self.length is not None else None
        ckpt = pred.spot.checkpoint_s if pred.spot is not None else 0.0
        core = Core(parts, pred, steps, conf.sigma_from_mape(pred.typical_error_pct),
                    conf.spread_sigma(pred.iteration_time_s, pred.p90_iteration_time_s), ckpt)
        self.cores.append(core)
        for key, value in (("throughput", pred.throughput_samples_per_s), ("checkpoint", ckpt), ("fits", pred.fits_in_memory),
                           ("steps", np.nan if steps is None else steps), ("batch", pred.global_batch_size),
                           ("sigma_model", core.sigma_model), ("sigma_spread", core.sigma_spread), ("nodes", core.nodes)):
            self._per_core[key].append(float(value))
        self._core_arrays = None
        return len(self.cores) - 1

    def core_column(self, name: str) -> np.ndarray:
        """A per-core figure as an array over cores (``throughput``, ``fits``, ``nodes``...)."""
        if self._core_arrays is None:
            self._core_arrays = {k: np.asarray(v, dtype=float) for k, v in self._per_core.items()}
        return self._core_arrays[name]

    def price_single(self, core_ids: Sequence[int], group_rows: np.ndarray, counts: np.ndarray) -> None:
        """Price one-type cores (``counts[i]`` nodes of the group, core ``core_ids[i]``) on every row of
        the group and every market within the budget."""
        s = self.space
        ids = np.asarray(core_ids, dtype=np.int64)
        for m in s.markets:
            keep = counts >= (2 if m == Market.SPOT_MIX else 1)
            if not keep.any():
                continue
            n = counts[keep][None, :]
            cid = ids[keep][None, :]
            rows = group_rows[:, None]
            price = s.price(rows, m, n)
            ok = ~np.isnan(price) & (price <= self._budget())
            rr, cc = np.nonzero(ok)
            if len(rr) == 0:
                continue
            self._pending.append({"core": cid[0, cc], "row": group_rows[rr], "row2": np.full(len(rr), -1),
                                  "market": np.full(len(rr), m), "price": price[rr, cc],
                                  "rate": s.interruptions(group_rows[rr], m, n[0, cc])})

    def price_pair(self, core_id: int, rows_a: np.ndarray, rows_b: np.ndarray, na: int, nb: int, market: Market) -> None:
        """Price a two-type core on row pairs (same cloud and region), both parts on ``market``
        (Market.ON_DEMAND or Market.SPOT)."""
        s = self.space
        price = s.price(rows_a, market, na) + s.price(rows_b, market, nb)
        ok = ~np.isnan(price) & (price <= self._budget())
        if not ok.any():
            return
        k = int(ok.sum())
        self._pending.append({"core": np.full(k, core_id), "row": rows_a[ok], "row2": rows_b[ok], "market": np.full(k, market),
                              "price": price[ok],
                              "rate": s.interruptions(rows_a[ok], market, na) + s.interruptions(rows_b[ok], market, nb)})

    def _budget(self) -> float:
        b = self.c.budget_usd_per_hour
        return np.inf if b is None else b + 1e-9

    def _derive(self, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The derived columns of new offers: expected throughput, hours and cost at the median and
        the confidence, the limit missed, the objective."""
        core = cols["core"].astype(np.int64)
        c = self.c
        tp = self.core_column("throughput")[core]
        ckpt = self.core_column("checkpoint")[core]
        rate = cols["rate"]
        spotty = rate > 0
        useful = np.ones(len(core))
        if spotty.any():
            useful[spotty] = useful_fraction(rate[spotty], ckpt[spotty])
        exp_tp = tp * useful
        price = cols["price"]
        n = len(core)
        reason = np.where(self.core_column("fits")[core] > 0, Exclusion.NONE, Exclusion.MEMORY)
        hours = hours_q = cost = cost_q = np.full(n, np.nan)
        if self.length is not None:
            hours = self.core_column("steps")[core] * self.core_column("batch")[core] / np.maximum(exp_tp, 1e-12) / 3600.0
            spot_sigma = np.zeros(n)
            if spotty.any():
                spot_sigma[spotty] = conf.spot_sigma(rate[spotty], hours[spotty], RESTART_S,
                                                     checkpoint_interval_s(rate[spotty], ckpt[spotty]))
            sigma = conf.combine(self.core_column("sigma_model")[core], self.core_column("sigma_spread")[core], spot_sigma)
            hours_q = conf.quantile(hours, sigma, c.confidence)
            cost, cost_q = hours * price, hours_q * price
            if c.deadline_hours is not None:
                reason = np.where((reason == Exclusion.NONE) & (hours_q > c.deadline_hours + LIMIT_TOLERANCE), Exclusion.DEADLINE, reason)
            if c.max_cost_usd is not None:
                reason = np.where((reason == Exclusion.NONE) & (cost_q > c.max_cost_usd + LIMIT_TOLERANCE), Exclusion.MAX_COST, reason)
        if c.goal == THROUGHPUT:
            objective, tie = -exp_tp, price
        elif self.length is not None:
            objective, tie = cost, -exp_tp
        else:
            objective, tie = price / np.maximum(exp_tp * 3600.0, 1e-300) * 1e6, -exp_tp
        return {**cols, "throughput": exp_tp, "hours": hours, "hours_q": hours_q, "cost": cost, "cost_q": cost_q,
                "feasible": reason == Exclusion.NONE, "reason": reason, "objective": objective, "tie": tie}

    # ---- reading ------------------------------------------------------------------------------
    @property
    def cols(self) -> dict[str, np.ndarray]:
        """The columns (new offers are derived and appended on the first read after they came)."""
        if self._pending:
            raw = {k: np.concatenate([p[k] for p in self._pending]) for k in self._pending[0]}
            self._pending = []
            new = self._derive(raw)
            self._cols = {k: np.concatenate([self._cols[k], new[k].astype(_DTYPES.get(k, float))]) for k in _COLUMNS}
        return self._cols

    def __len__(self) -> int:
        return len(self.cols["core"])

    def threshold(self, k: int, reach: float) -> float:
        """The objective value an unsimulated count must beat to matter: the k-th best feasible
        offer's (one per core and market), loosened by ``reach`` (a fraction: configurations
        within it of the best are what the simplicity rule compares); +inf while fewer than k."""
        t = self.cols
        f = t["feasible"]
        if not f.any():
            return np.inf
        key = t["core"][f] * 3 + t["market"][f]
        obj = t["objective"][f]
        order = np.lexsort((obj, key))
        first = np.ones(len(order), dtype=bool)
        first[1:] = key[order][1:] != key[order][:-1]
        best = np.sort(obj[order][first])
        if len(best) < k:
            return np.inf
        v = float(best[k - 1])
        if self.c.goal == THROUGHPUT:  # objective = -throughput
            return v / (1.0 + reach)
        return v * (1.0 + reach)

    def ranked(self, feasible: bool = True) -> np.ndarray:
        """Offer indices by objective, then tie-breaker; the best of each (cloud, configuration,
        market) only: the same configuration in another region is shown once, where it ranks best."""
        t = self.cols
        idx = np.nonzero(t["feasible"])[0] if feasible else np.arange(len(t["core"]))
        if len(idx) == 0:
            return idx
        order = idx[np.lexsort((t["tie"][idx], t["objective"][idx]))]
        key = self._config_key(order)
        _, first = np.unique(key, return_index=True)
        return order[np.sort(first)]

    def _config_key(self, idx: np.ndarray) -> np.ndarray:
        t = self.cols
        s = self.space
        types = int(s.type_id.max()) + 1 if len(s.type_id) else 1
        row2 = t["row2"][idx].astype(np.int64)
        t2 = np.where(row2 >= 0, s.type_id[np.maximum(row2, 0)], types)
        return ((t["core"][idx].astype(np.int64) * 3 + t["market"][idx].astype(np.int64)) * (types + 1)
                + s.type_id[t["row"][idx].astype(np.int64)]) * (types + 1) + t2

    # ---- candidates ---------------------------------------------------------------------------
    def parts(self, i: int) -> list[Part]:
        """The (instance, count, spot) parts of offer ``i``."""
        t = self.cols
        core = self.cores[int(t["core"][i])]
        m = int(t["market"][i])
        row_a = self.space.rows[int(t["row"][i])]
        (ga, na), *rest = core.parts
        if m == Market.SPOT_MIX:
            return [(row_a, 1, False), (row_a, na - 1, True)]
        if not rest:
            return [(row_a, na, m == Market.SPOT)]
        row_b = self.space.rows[int(t["row2"][i])]
        return [(row_a, na, m == Market.SPOT), (row_b, rest[0][1], m == Market.SPOT)]

    def candidate(self, i: int) -> Candidate:
        """Offer ``i`` as a Candidate: the shared simulation relabelled with this offer's
        instances, price and spot expectation."""
        t = self.cols
        core = self.cores[int(t["core"][i])]
        parts = self.parts(i)
        cluster = cluster_of(parts)
        price = float(t["price"][i])
        rate = float(t["rate"][i])
        base = core.prediction
        tp = base.throughput_samples_per_s
        spot = expectation(rate, core.checkpoint_s, tp, price) if any(s for _, _, s in parts) else None
        per_gpu = [b.per_gpu_batch for b in base.batch_split] or [base.global_batch_size // max(base.gpus, 1)]
        if len(per_gpu) < len(cluster.node_groups):  # a spot/on-demand mix of one simulated group
            per_gpu = per_gpu * len(cluster.node_groups)
        shares = [BatchShare(g.label, g.gpu, b, g.gpus) for g, b in zip(cluster.node_groups, per_gpu)]
        pred = dataclasses.replace(base, cluster=cluster.name, cost_per_hour_usd=price,
                                   usd_per_million_samples=price / (tp * 3600.0) * 1e6 if tp > 0 else None,
                                   batch_split=shares, spot=spot)
        run = at = None
        if self.length is not None and core.steps is not None:
            run = JobRun(core.steps, float(t["hours"][i]), float(t["cost"][i]))
            spot_sigma = (conf.spot_sigma(rate, run.hours, RESTART_S, checkpoint_interval_s(rate, core.checkpoint_s))
                          if rate > 0 else 0.0)
            at = conf.at_confidence(run.hours, price, conf.Uncertainty(core.sigma_model, core.sigma_spread, spot_sigma),
                                    self.c.confidence)
        row = parts[0][0]
        rows = [p[0] for p in parts]
        cand = Candidate(
            instance=cluster.name, label=label_of(parts), spot=any(s for _, _, s in parts), gpus=cluster.gpus,
            nodes=cluster.nodes, cost_per_hour_usd=price, prediction=pred, run=run, at_confidence=at,
            cloud=row.cloud, region=row.region, regions=(row.region,), host_arch=row.host_arch,
            types=len({r.instance_type for r in rows}), market=Market(int(t["market"][i])),
            hardware=tuple(sorted({r.hardware_key for r in rows}, key=repr)),
            vcpus_per_gpu=min(r.vcpus / r.gpu_count for r in rows),
            flags=tuple(sorted({f for r in rows for f in r.flags})),
            price=combined(price_provenance(r, s) for r, _, s in parts),
            families=tuple(dict.fromkeys(r.family for r in rows)),
        )
        cand.reason = Exclusion(int(t["reason"][i])).label
        cand.feasible = not cand.reason
        return cand

    def same_price_regions(self, i: int) -> tuple[str, ...]:
        """Regions where offer ``i``'s configuration is offered at the same price (same market)."""
        t = self.cols
        key = self._config_key(np.arange(len(t["core"])))
        row = self.space.rows[int(t["row"][i])]
        mask = (key == self._config_key(np.array([i]))[0]) & np.isclose(t["price"], t["price"][i], rtol=1e-9, atol=0)
        mask &= np.isclose(t["rate"], t["rate"][i], rtol=1e-9, atol=0)
        regions = sorted({self.space.rows[int(r)].region for r in t["row"][mask]} | {row.region})
        return (row.region,) + tuple(r for r in regions if r != row.region)
