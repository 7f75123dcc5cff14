"""The figures `srift recommend`'s sentence quotes beyond each row's own, computed once for the
sentence and the JSON document alike (srift/report/recommend_view.py): a row against the chosen one
(``vs_chosen``), the objective at the ranking quantile (``ranked_objective``), why the median's
first is not chosen, and, when nothing meets the limits, each limit against the plan closest to it
(srift/search/diagnose.py). tests/test_recommend_consistency.py checks that every number the
sentence quotes is in the JSON."""

from __future__ import annotations

from typing import Any

from srift.report.format import usd
from srift.search.dominance import TIE_FRACTION, dominates
from srift.search.limits import THROUGHPUT
from srift.search.rank import Candidate, SearchResult, edge


def _tokens(cand: Candidate) -> float | None:
    """Expected tokens/s of a sequence model's candidate, else None."""
    return cand.prediction.expected_throughput_tokens_per_s


def rate_text(cand: Candidate) -> str:
    """``3,855 samples/s`` or, for a sequence model, ``102,669 tokens/s``."""
    tokens = _tokens(cand)
    return f"{tokens:,.0f} tokens/s" if tokens is not None else f"{cand.expected_throughput_samples_per_s:,.0f} samples/s"


def ranked_value(c: Candidate, goal: str, confidence: float | None) -> float:
    """The objective at the ranking quantile: expected samples/s divided, or the job cost (else $ per
    million samples) multiplied, by the candidate's quantile factor (JSON ``ranked_objective``)."""
    q = c.quantile_factor(confidence)
    if goal == THROUGHPUT:
        return c.expected_throughput_samples_per_s / q
    return ((c.job_cost_usd if c.job_cost_usd is not None else c.usd_per_million_samples) or 0.0) * q


def versus_chosen(c: Candidate, top: Candidate) -> tuple[float, float]:
    """(throughput, $/h) of ``c`` relative to the chosen ``top``, as fractions: what the sentence
    quotes and the JSON carries (``vs_chosen``)."""
    return (c.expected_throughput_samples_per_s / top.expected_throughput_samples_per_s - 1,
            c.cost_per_hour_usd / top.cost_per_hour_usd - 1)


def vs_json(c: Candidate, top: Candidate) -> dict[str, float]:
    dt, dc = versus_chosen(c, top)
    return {"throughput_change": dt, "cost_per_hour_change": dc}


def median_clause(result: SearchResult, lead: Candidate, m: Candidate) -> str:
    """Why ``m``, first at the median, is not chosen: ``lead`` (first at the ranking quantile)
    dominates it, or is ahead (or tied and faster, or cheaper) at the quantile."""
    lv, mv = ranked_value(lead, result.objective, result.confidence), ranked_value(m, result.objective, result.confidence)
    versus = (f"{lv:,.0f} against {mv:,.0f} samples/s" if result.objective == THROUGHPUT else f"{usd(lv)} against {usd(mv)}")
    tie = "cheaper" if result.objective == THROUGHPUT else "faster"
    if dominates(lead, m, result.ranked_at):
        hours = (f"; {lead.job_hours:,.1f} h against {m.job_hours:,.1f} h at the median"
                 if lead.job_hours is not None and m.job_hours is not None else "")
        return (f" {m.label} ranks first at the median ({rate_text(m)}), but {lead.label} is within {TIE_FRACTION:.0%} "
                f"of it or better on both time and cost, at the median and at {result.confidence:.0%} confidence, and "
                f"better on one ({versus} at {result.confidence:.0%} confidence{hours}): a plan another beats on "
                f"time and cost is never chosen, and ties go to the {tie}.")
    ahead = "ahead" if edge(lead, m, result.objective, result.confidence) > TIE_FRACTION else f"within {TIE_FRACTION:.0%} and {tie}"
    return (f" {m.label} has the better median ({rate_text(m)}, ±{m.prediction.typical_error_pct or 0:.1f} %) but with "
            f"limits set srift ranks at {result.confidence:.0%} confidence, where {lead.label} is {ahead} ({versus}).")


def miss_clauses(found: SearchResult, c: Any) -> list[str]:
    """For each job limit when nothing meets them all: the plan that meets the others and comes
    closest to it, and by how much it misses (srift/search/diagnose.py)."""
    words = {"deadline": (f"the deadline of {c.deadline_hours:g} h" if c.deadline_hours else "", "takes", "h"),
             "max-cost": (f"the maximum cost of {usd(c.max_cost_usd)}" if c.max_cost_usd else "", "costs", "$")}
    out = []
    for m in found.misses:
        name, verb, unit = words[m.limit]
        others = " and ".join(words[o.limit][0] for o in found.misses if o is not m) or "the other limits"
        if m.closest is None or m.predicted is None or m.miss_pct is None:
            out.append(f"nothing fits in memory to meet {name}")
            continue
        value = f"{m.predicted:,.1f} h" if unit == "h" else usd(m.predicted)
        best = "fastest" if m.limit == "deadline" else "cheapest"
        at = f"{value} at {found.confidence:.0%} confidence"
        if m.binds:
            out.append(f"{name} binds: the {best} plan within {others}, {m.closest.label}, {verb} {at}, "
                       f"{m.miss_pct:,.0f} % over it")
        elif m.miss_pct <= 0:
            out.append(f"{name} alone can be met (the {best} plan, {m.closest.label}, {verb} {at}), so it does not bind")
        else:
            out.append(f"{name} is missed by every plan: the {best}, {m.closest.label}, {verb} {at}, {m.miss_pct:,.0f} % over it")
    return out
