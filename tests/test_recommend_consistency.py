"""Issue 50: recommendations right by their own numbers: no dominated choice, the binding limit
named with the plan closest to it, layouts the stack runs, like-with-like check comparisons."""

import csv
from pathlib import Path

import pytest

from srift.job import JobLength
from srift.report.recommend_view import batch_cell, miss_clauses, why
from srift.search import search
from srift.search.dominance import dominated, dominates
from srift.search.limits import Constraints
from srift.simulate.layout_rules import MIN_CP_TOKENS_PER_RANK, cp_efficient, megatron_runs, megatron_split
from srift.simulate.layouts import stage_layers
from srift.testing import SpeedModel, instance

ROOT = Path(__file__).resolve().parents[1]
B_QUAD = instance("b.quad", "GB", 4, 3.5, None)
SAMPLES = JobLength(samples=360_000)


def test_a_plan_beaten_on_time_and_cost_is_never_chosen():
    # b.quad x n with perfect scaling (node_penalty 0) and one error for every node count: every
    # count costs the same per job ($3.50 x 360,000 / 480 / 3,600 = $0.729) at the median and at
    # the p90, and n nodes take 1/n of the hours. The old tie rule gave the simplest (1 node); the
    # 3-node plan is no worse on cost and a third of the hours, so it dominates 1 and 2 and is chosen.
    speeds = SpeedModel({"GB": 120.0}, node_penalty=0.0, typical_error_pct={"node": 15.0, "nodes": 15.0})
    r = search([B_QUAD], speeds, Constraints(diverse=False, deadline_hours=10.0, max_gpus=12), SAMPLES)
    top = r.recommendations[0]
    assert top.instance == "b.quad:3" and r.simpler_choice is None
    assert top.job_cost_usd == pytest.approx(3 * 3.5 * 360_000 / 1440 / 3600)
    one, two = (next(c for c in r.recommendations if c.instance == f"b.quad:{n}") for n in (1, 2))
    assert dominates(top, one, 0.9) and dominates(top, two, 0.9) and not dominates(one, top, 0.9)
    assert dominated(r.recommendations, 0.9) == [False, True, True]


def test_figures_within_the_tie_fraction_do_not_dominate():
    # 3 % slower per extra node: b.quad:2 costs 3.1 % more per job than b.quad:1 and takes 48 % of its
    # hours; neither is no worse on everything, so neither dominates and the simplicity rule decides.
    speeds = SpeedModel({"GB": 120.0}, node_penalty=0.03, typical_error_pct={"node": 15.0, "nodes": 15.0})
    r = search([B_QUAD], speeds, Constraints(diverse=False, deadline_hours=10.0, max_gpus=8), SAMPLES)
    assert dominated(r.recommendations, 0.9) == [False, False]


def test_the_binding_limit_is_named_with_the_plan_closest_to_it():
    # No validation figures: the p90 is the median. b.quad:1 takes 750 s (0.2083 h) for $0.7292,
    # b.quad:2 (864 samples/s) 416.7 s (0.1157 h) for $0.8102; a.small is slower than both.
    # Deadline 0.15 h and at most $0.75: within the deadline only b.quad:2, 8.0 % over the cost;
    # within the cost the fastest is b.quad:1, 38.9 % over the deadline. Both bind; the cost by less.
    catalog = [instance("a.small", "GA", 1, 1.0, None), B_QUAD]
    c = Constraints(diverse=False, deadline_hours=0.15, max_cost_usd=0.75, max_gpus=8)
    r = search(catalog, SpeedModel({"GA": 100.0, "GB": 120.0}), c, SAMPLES)
    assert not r.recommendations and r.cut_by == "max-cost" and r.closest.instance == "b.quad:2"
    by = {m.limit: m for m in r.misses}
    assert by["max-cost"].binds and by["max-cost"].predicted == pytest.approx(7.0 * 360_000 / 864 / 3600)
    assert by["max-cost"].miss_pct == pytest.approx((7.0 * 360_000 / 864 / 3600 / 0.75 - 1) * 100)
    assert by["deadline"].binds and by["deadline"].closest.instance == "b.quad:1"
    assert by["deadline"].miss_pct == pytest.approx((750 / 3600 / 0.15 - 1) * 100)
    text = "; ".join(miss_clauses(r, c))
    assert "the maximum cost of $0.75 binds: the cheapest plan within the deadline of 0.15 h, b.quad:2, costs $0.81" in text
    assert "the deadline of 0.15 h binds: the fastest plan within the maximum cost of $0.75, b.quad:1, takes 0.2 h" in text


def test_a_limit_every_plan_meets_alone_does_not_bind():
    # At most $0.50: nothing costs that little (the cheapest, b.quad:1, $0.729), whatever its hours;
    # the deadline of 1 h alone is met by b.quad:2, so only the cost binds.
    c = Constraints(diverse=False, deadline_hours=1.0, max_cost_usd=0.5, max_gpus=8)
    r = search([B_QUAD], SpeedModel({"GB": 120.0}), c, SAMPLES)
    by = {m.limit: m for m in r.misses}
    assert r.cut_by == "max-cost" and r.closest.instance == "b.quad:1" and by["max-cost"].binds
    assert not by["deadline"].binds and by["deadline"].miss_pct < 0
    assert "the deadline of 1 h alone can be met" in "; ".join(miss_clauses(r, c))


def test_megatron_core_splits_blocks_over_pipeline_and_virtual_stages():
    # megatron-core 0.16.1 transformer_block.get_num_layers_to_build: the blocks per rank (with the
    # embedding and loss when n + 2 divides by PP) must divide by VP.
    assert not megatron_runs(80, 2, 12, stage_layers)  # Llama 3 70B: 41 (or 40) a rank
    assert not megatron_runs(32, 2, 12, stage_layers)  # Mixtral: 17 (or 16) a rank
    assert not megatron_runs(126, 8, 12, stage_layers)  # Llama 3.1 405B: 16 a rank
    # the recipes':
    assert megatron_runs(80, 4, 5, stage_layers) and megatron_runs(126, 8, 8, stage_layers) and megatron_runs(32, 4, 8, stage_layers)
    assert megatron_split(126, 8, stage_layers) == (16,) * 8 and megatron_split(80, 4, stage_layers) == (20,) * 4
    # 80 over PP 6 (neither 82 nor 80 divides): srift's split 12, 14, 14, 14, 13, 13 has unequal
    # middle ranks, which num_layers_in_first/last_pipeline_stage cannot express.
    assert megatron_split(80, 6, stage_layers) is None and not megatron_runs(80, 6, 1, stage_layers)


def test_the_fewest_tokens_per_cp_rank_come_from_the_published_runs():
    per_rank = []
    for f in (ROOT / "data" / "llm-parallel-layouts").glob("*.csv"):
        for row in csv.DictReader(f.open()):
            if row.get("cp") and int(row["cp"]) > 1 and row.get("seq_len"):
                per_rank.append(int(row["seq_len"]) // int(row["cp"]))
    assert min(per_rank) == MIN_CP_TOKENS_PER_RANK == 4096
    assert not cp_efficient(4096, 4) and cp_efficient(8192, 2) and cp_efficient(4096, 1)


def test_a_layout_row_shows_micro_batch_times_micro_batches():
    from srift.api import recommend
    from srift.job import Job

    res = recommend(Job(seq_len=4096, length=JobLength(tokens=10**9)), Constraints(max_gpus=16, gpus=frozenset({"H100"})),
                    model="llama3-8b", infra="aws/us-east-1")
    top = res.search.recommendations[0]
    lay = top.prediction.layout
    assert batch_cell(top) == f"{lay.micro_batch} x {lay.grad_accum}"
    assert lay.micro_batch * lay.grad_accum * lay.dp == res.job.global_batch_size
    assert lay.cp == 1  # 4,096 tokens: no CP (fewer than MIN_CP_TOKENS_PER_RANK a rank)
    assert why(res.search)


# ---- the sentence quotes the JSON's numbers -----------------------------------------------------
_NUMBER = __import__("re").compile(r"([+-]?)\$?(\d[\d,]*(?:\.\d+)?)(\s?%)?")


def _leaves(doc, out):
    if isinstance(doc, dict):
        for v in doc.values():
            _leaves(v, out)
    elif isinstance(doc, list):
        for v in doc:
            _leaves(v, out)
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        out.append(float(doc))
    return out


def _labels(doc, out):
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("label", "instance", "chosen", "over", "blocker", "closest", "infra") and isinstance(v, str):
                out.add(v)
            _labels(v, out)
    elif isinstance(doc, list):
        for v in doc:
            _labels(v, out)
    return out


def unquoted_figures(doc: dict) -> list[str]:
    """The numbers of ``doc['why']`` that no number of the JSON document gives at the precision quoted
    (as is, in percent of a fraction, or bytes in GiB); instance names are not figures."""
    text = doc["why"]
    for label in sorted(_labels(doc, set()), key=len, reverse=True):
        text = text.replace(label, " ")
    values = _leaves({k: v for k, v in doc.items() if k != "why"}, [])
    missing = []
    for sign, digits, pct in _NUMBER.findall(text):
        x = float(digits.replace(",", "")) * (-1 if sign == "-" else 1)
        d = len(digits.split(".")[1]) if "." in digits else 0
        forms = [v for v in values] + ([v * 100 for v in values] if pct else []) + [v / 2**30 for v in values]
        if not any(abs(round(f, d) - x) <= 10 ** -d * 0.51 for f in forms):
            missing.append(sign + digits + (pct or ""))
    return missing


def _doc(found, constraints):
    from srift.job import Job
    from srift.report.recommend_view import recommend_json
    from srift.results import RecommendResult

    return recommend_json(RecommendResult(found, constraints, Job(), "m", "fp32", 10, None, "aws"))


@pytest.mark.parametrize("case", ["simpler", "median", "close", "single", "dominated"])
def test_every_figure_the_sentence_quotes_is_in_the_json(case):
    errors = {"gpu": 10.0, "node": 15.0, "nodes": 30.0}
    a_small = instance("a.small", "GA", 1, 1.0, 0.3)
    c_quad = instance("c.quad", "GC", 4, 3.5, None)
    if case == "simpler":  # the simplicity rule chooses b.quad:1 over b.quad:2
        c = Constraints(budget_usd_per_hour=7.0, max_gpus=8, confidence=0.5)
        found = search([a_small, B_QUAD], SpeedModel({"GA": 100.0, "GB": 120.0}, node_penalty=0.4, typical_error_pct=errors,
                                                     compute_error_pct=10.0), c)
        assert found.simpler_choice is not None
    elif case == "median":  # ranked at the p90, another first at the median
        c = Constraints(budget_usd_per_hour=7.0, max_gpus=8)
        found = search([a_small, B_QUAD], SpeedModel({"GA": 100.0, "GB": 120.0}, node_penalty=0.4, typical_error_pct=errors,
                                                     compute_error_pct=10.0), c)
        assert found.best_at_median is not None
    elif case == "close":  # a close call on other GPUs
        c = Constraints(budget_usd_per_hour=7.0, max_gpus=8)
        found = search([B_QUAD, c_quad], SpeedModel({"GB": 120.0, "GC": 119.0}, node_penalty=0.1, typical_error_pct=errors,
                                                    compute_error_pct=10.0), c)
        assert found.close_call is not None
    elif case == "single":  # a multi-node choice with the best one-node one beside it
        c = Constraints(budget_usd_per_hour=7.0, max_gpus=8)
        found = search([a_small, B_QUAD], SpeedModel({"GA": 100.0, "GB": 120.0}, node_penalty=0.1, typical_error_pct=errors,
                                                     compute_error_pct=10.0), c)
        assert found.best_single_node is not None
    else:  # the median's first is dominated by the chosen (the Mixtral case of issue 50, by hand)
        c = Constraints(diverse=False, deadline_hours=10.0, max_gpus=12)
        found = search([B_QUAD], SpeedModel({"GB": 120.0}, node_penalty=0.003, typical_error_pct={"node": 40.0, "nodes": 15.0}),
                       c, SAMPLES)
        assert found.best_at_median.instance == "b.quad:1" and found.recommendations[0].instance == "b.quad:3"
        assert "a plan another beats on time and cost is never chosen" in why(found)
    doc = _doc(found, c)
    assert doc["why"] and unquoted_figures(doc) == []


def test_the_figure_check_catches_a_number_not_in_the_json():
    c = Constraints(budget_usd_per_hour=7.0, max_gpus=8)
    found = search([B_QUAD], SpeedModel({"GB": 120.0}), c)
    doc = _doc(found, c)
    assert unquoted_figures(doc) == []
    doc["why"] += " It is 123,457 samples/s faster and 37.2 % cheaper."
    assert unquoted_figures(doc) == ["123,457", "37.2 %"]


# ---- the error between two plans is the error of what differs ---------------------------------
def test_the_pair_error_is_the_mean_departure_of_the_residual_ratio():
    import numpy as np
    import pandas as pd

    from srift.fitting.pairs import OTHER_GPU, SAME_GPU, pair_mape

    rows = pd.DataFrame({"source_slug": ["s"] * 3 + ["t"], "zoo": ["m"] * 4, "gpu": ["H100", "H100", "B200", "H100"],
                         "precision": ["bf16"] * 4, "gpus_total": [8, 16, 8, 8], "tp": [1] * 4, "pp": [1] * 4, "cp": [1] * 4,
                         "dp": [8, 16, 8, 8], "micro_batch": [1] * 4})
    res = np.array([1.10, 1.21, 0.90, 1.0])
    # Same source, model, GPU and precision, other count: rows 0 and 1 only: |1.10 / 1.21 - 1| = 9.09 %.
    assert pair_mape(rows, res, *SAME_GPU) == (pytest.approx(100 * (1 - 1.10 / 1.21)), 1)
    # Other GPUs of one model: (0, 2), (1, 2), (2, 3): |1.1/0.9 - 1|, |1.21/0.9 - 1|, |0.9/1.0 - 1|.
    mape, n = pair_mape(rows, res, *OTHER_GPU)
    assert n == 3 and mape == pytest.approx(100 * (2 / 9 + 0.31 / 0.9 + 0.1) / 3)


def test_two_plans_of_one_group_and_stack_differ_by_the_pair_figure():
    import dataclasses

    from srift.perf.accuracy import load_accuracy
    from srift.search.rank import combined_error_pct

    groups = load_accuracy()["groups"]
    speeds = SpeedModel({"GB": 120.0, "GC": 119.0}, typical_error_pct={"node": 15.0, "nodes": 15.0})
    r = search([B_QUAD, instance("c.quad", "GC", 4, 3.5, None)], speeds, Constraints(diverse=False, max_gpus=8, top=10))
    by = {c.instance: c for c in r.recommendations}

    def as_group(c, group, stack="zero1"):
        return dataclasses.replace(c, prediction=dataclasses.replace(c.prediction, pair_group=group, parallelism=stack))

    one, two, other = (as_group(by[k], "moe") for k in ("b.quad:1", "b.quad:2", "c.quad:2"))
    assert combined_error_pct(two, one) == pytest.approx(groups["pairs_moe_same_gpu"]["fit"])  # the scaling term
    assert combined_error_pct(two, other) == pytest.approx(groups["pairs_moe_other_gpu"]["fit"])  # the cross-GPU term
    dense_one, dense_two = (as_group(by[k], "layouts") for k in ("b.quad:1", "b.quad:2"))
    assert combined_error_pct(dense_two, dense_one) == pytest.approx(groups["pairs_layouts_same_gpu"]["fit"])
    # No dense pair across GPUs was measured, and another stack shares nothing: 15 % and 15 % independent.
    assert combined_error_pct(as_group(by["b.quad:2"], "layouts"), as_group(by["c.quad:2"], "layouts")) == pytest.approx(
        (15**2 * 2) ** 0.5)
    assert combined_error_pct(two, as_group(by["c.quad:2"], "moe", "fsdp")) == pytest.approx((15**2 * 2) ** 0.5)


# ---- issue 50's commands, pinned -----------------------------------------------------------------
def _runnable_rows(res):
    from srift.api import model_arch
    from srift.simulate.layout_rules import why_not_runnable

    arch = model_arch(res.model)
    for r in res.search.recommendations:
        lay = r.prediction.layout
        why = why_not_runnable(arch, res.seq_len, lay.pp, lay.vp, lay.cp, False, stage_layers)
        assert why is None, r.label


@pytest.mark.slow
def test_mixtral_chooses_the_plan_that_dominates_the_two_node_one():
    # srift recommend --model mixtral-8x7b --tokens 1e11 --deadline 240 --no-diverse
    from srift.api import recommend
    from srift.job import Job

    res = recommend(Job(length=JobLength(tokens=10**11)), Constraints(deadline_hours=240.0, diverse=False, auto_max_gpus=True),
                    model="mixtral-8x7b")
    recs = res.search.recommendations
    top = recs[0]
    assert top.instance == "p6-b200.48xlarge:4" and not any(dominates(o, top, 0.9) for o in recs)
    two = [r for r in recs if r.instance == "p6-b200.48xlarge:2"]
    assert all(dominates(top, r, 0.9) for r in two)  # the 2-node plan, if shown, is dominated by the chosen
    _runnable_rows(res)


@pytest.mark.slow
def test_llama3_70b_names_the_cost_limit_and_the_cheapest_plan_within_the_deadline():
    # srift recommend --model llama3-70b --tokens 2e10 --seq-len 4096 --deadline 48 --max-cost 5000
    from srift.api import no_fit_error, recommend
    from srift.job import Job

    c = Constraints(deadline_hours=48.0, max_cost_usd=5000.0, auto_max_gpus=True)
    res = recommend(Job(seq_len=4096, length=JobLength(tokens=2 * 10**10)), c, model="llama3-70b")
    found = res.search
    assert not found.recommendations and found.cut_by == "max-cost"
    closest = found.closest
    assert closest.at_confidence.hours <= 48.0 and closest.at_confidence.cost_usd > 5000.0
    by = {m.limit: m for m in found.misses}
    assert by["max-cost"].binds and not by["deadline"].binds and by["deadline"].miss_pct < 0
    message = no_fit_error(res).message
    assert "the maximum cost of $5,000.00 binds: the cheapest plan within the deadline of 48 h" in message
    assert f"Closest: {closest.label}" in message


@pytest.mark.slow
def test_no_recommended_layout_breaks_megatron_cores_split():
    # issue 50: tp2 pp2 cp4 vp12 (Llama 3 70B), pp2 vp12 (Mixtral), tp8 pp8 vp12 (405B) were recommended.
    from srift.api import recommend
    from srift.job import Job

    res = recommend(Job(seq_len=4096, length=JobLength(tokens=2 * 10**10)),
                    Constraints(deadline_hours=48.0, diverse=False, top=20, auto_max_gpus=True), model="llama3-70b")
    assert res.search.recommendations
    _runnable_rows(res)
    assert all(r.prediction.layout.cp == 1 for r in res.search.recommendations)  # 4,096 tokens: no CP
