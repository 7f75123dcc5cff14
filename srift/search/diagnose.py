"""When nothing meets the limits: which limit binds, and the plan that comes closest to it.

For each job limit set (a deadline, a maximum cost; a budget in $/h is exact and prunes before the
search, srift/search/space.py), the plan that meets **every other** limit (and fits in memory)
and comes closest to this one: the fastest within the maximum cost for the deadline, the cheapest
within the deadline for the maximum cost, both at the search's confidence. A limit binds when such
a plan exists, that is, when relaxing it alone would let a plan through; the closest plan is the
binding limit's that misses it by the least (relative to the limit). When neither limit can be met
even with the other dropped, each one's closest plan is taken over every plan that fits.

Issue 50's Llama 3 70B case (deadline 48 h, at most $5,000): many plans finish within 48 h and the
cheapest of them costs about $29.5k, while no plan costs $5,000 whatever its hours, so the maximum
cost binds and the cheapest plan within 48 h is shown, not the fastest plan of all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from srift.search.limits import LIMIT_TOLERANCE, Constraints
from srift.search.offers import OfferTable
from srift.search.rank import Candidate, Exclusion

DEADLINE = Exclusion.DEADLINE.label
MAX_COST = Exclusion.MAX_COST.label


@dataclass(frozen=True)
class LimitMiss:
    """One limit against the plan that comes closest to it while meeting the others.

    Attributes:
        limit: ``deadline`` or ``max-cost``.
        allowed: The limit (hours or $).
        closest: That plan, or None when no plan fits in memory.
        predicted: Its hours or cost at the confidence.
        others_met: The plan meets every other limit (False: none does, so it was taken over every plan that fits).
    """

    limit: str
    allowed: float
    closest: Candidate | None
    predicted: float | None
    others_met: bool

    @property
    def miss_pct(self) -> float | None:
        """By how much the closest plan misses the limit, in % of it (negative: it meets it)."""
        return None if self.predicted is None else (self.predicted / self.allowed - 1.0) * 100.0

    @property
    def binds(self) -> bool:
        """Relaxing this limit alone lets a plan through."""
        return self.closest is not None and self.others_met

    def to_dict(self) -> dict[str, object]:
        return {"limit": self.limit, "allowed": self.allowed, "closest": None if self.closest is None else self.closest.instance,
                "predicted": self.predicted, "miss_pct": self.miss_pct, "others_met": self.others_met, "binds": self.binds}


def limit_misses(table: OfferTable, c: Constraints, candidate: Callable[[int], Candidate]) -> list[LimitMiss]:
    """Each job limit set, against the plan that meets the others and comes closest (module docstring)."""
    t = table.cols
    if not len(t["core"]):
        return []
    fits = t["reason"] != Exclusion.MEMORY
    values = {DEADLINE: (c.deadline_hours, t["hours_q"]), MAX_COST: (c.max_cost_usd, t["cost_q"])}
    meets = {name: np.ones(len(fits), dtype=bool) if allowed is None else
             np.nan_to_num(v, nan=np.inf) <= allowed + LIMIT_TOLERANCE for name, (allowed, v) in values.items()}
    out = []
    for name, (allowed, v) in values.items():
        if allowed is None:
            continue
        others = fits.copy()
        for other, m in meets.items():
            if other != name:
                others &= m
        pool, others_met = (others, True) if others.any() else (fits, False)
        if not pool.any():
            out.append(LimitMiss(name, allowed, None, None, False))
            continue
        idx = np.nonzero(pool)[0]
        i = int(idx[np.argmin(np.nan_to_num(v[idx], nan=np.inf))])
        out.append(LimitMiss(name, allowed, candidate(i), float(v[i]), others_met))
    return out


def binding(misses: list[LimitMiss]) -> LimitMiss | None:
    """The binding limit whose closest plan misses it by the least (any limit's when none binds alone)."""
    shown = [m for m in misses if m.binds] or [m for m in misses if m.closest is not None]
    return min(shown, key=lambda m: m.miss_pct if m.miss_pct is not None else np.inf, default=None)
