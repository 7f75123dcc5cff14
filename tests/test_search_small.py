"""The search pinned on a small hand-made catalog and a hand-made speed model."""

import dataclasses

import pytest

from srift.errors import SriftError
from srift.job import JobLength
from srift.report.recommend_view import why
from srift.search import search
from srift.search.limits import Constraints
from srift.search.rank import pareto
from srift.testing import SpeedModel, instance

# GA: 100 samples/s per GPU, GB: 120; each node beyond the first costs 10 % of the throughput.
fake_predict = SpeedModel({"GA": 100.0, "GB": 120.0})
CATALOG = [instance("a.small", "GA", 1, 1.0, 0.3), instance("b.quad", "GB", 4, 3.5, None)]


def test_best_throughput_under_budget():
    r = search(CATALOG, fake_predict, Constraints(budget_usd_per_hour=4.0, max_gpus=8))
    # a.small x n: 100 n 0.9^(n-1) for $n (n <= 4 fits the budget: 100, 180, 243, 291.6);
    # b.quad x 1: 480 for $3.50; b.quad x 2 costs $7.
    top = r.recommendations[0]
    assert top.instance == "b.quad:1" and top.expected_throughput_samples_per_s == pytest.approx(480)
    assert [c.instance for c in r.recommendations[:3]] == ["b.quad:1", "a.small:4", "a.small:3"]
    assert r.considered == 8 + 2 and r.evaluated == 5  # a x 1..8, b x 1..2; 5 within budget
    assert r.pruned["budget"] == 5


def test_spot_wins_when_allowed():
    # Budget $2/h. On demand: a.small x 2 ($2) gives 100 * 2 * 0.9 = 180 samples/s; b.quad costs $3.50.
    # On spot ($0.30/h) a.small x 6 fits ($1.80): 600 * 0.9^5 = 354.3 samples/s, of which spot
    # interruptions leave 80 %: 283.4, still the most (x 5: 500 * 0.9^4 * 0.8 = 262.4).
    interrupted = SpeedModel({"GA": 100.0, "GB": 120.0}, spot_useful=0.8)
    on_demand = search(CATALOG, interrupted, Constraints(budget_usd_per_hour=2.0, max_gpus=8))
    assert on_demand.recommendations[0].instance == "a.small:2"
    r = search(CATALOG, interrupted, Constraints(budget_usd_per_hour=2.0, max_gpus=8, spot=True))
    top = r.recommendations[0]
    assert (top.instance, top.label, top.spot) == ("a.small:6", "a.small:6 [Spot]", True)
    assert top.expected_throughput_samples_per_s == pytest.approx(600 * 0.9**5 * 0.8)
    assert top.cost_per_hour_usd == pytest.approx(1.8)
    # The cheapest per sample is spot too: a.small x 1 at $0.30/h for 80 samples/s.
    cheap = search(CATALOG, interrupted, Constraints(budget_usd_per_hour=2.0, max_gpus=8, spot=True, objective="cost"))
    assert cheap.recommendations[0].instance == "a.small:1" and cheap.recommendations[0].spot
    assert cheap.recommendations[0].usd_per_million_samples == pytest.approx(0.3 / (80 * 3600) * 1e6)


def test_cheapest_under_deadline():
    steps = 36_000  # a.small x 1 takes 36000 * 10 / 100 s = 1.0 h
    r = search(CATALOG, fake_predict, Constraints(deadline_hours=1.0, max_gpus=8), JobLength(steps))
    assert r.objective == "cost"
    top = r.recommendations[0]
    assert top.instance == "a.small:1" and top.job_hours == pytest.approx(1.0) and top.job_cost_usd == pytest.approx(1.0)
    # 0.9 h: a.small never makes it (1/0.9^(n-1) h); b.quad x 1 takes 36000*40/480 s = 0.833 h for $2.92;
    # b.quad x 2 takes 36000*80/864 s = 0.926 h.
    r = search(CATALOG, fake_predict, Constraints(deadline_hours=0.9, max_gpus=8), JobLength(steps))
    assert [c.instance for c in r.recommendations] == ["b.quad:1"]
    assert r.recommendations[0].job_cost_usd == pytest.approx(3.5 * 36000 * 40 / 480 / 3600)


def test_nothing_fits_names_the_constraint_and_the_closest():
    r = search(CATALOG, fake_predict, Constraints(deadline_hours=0.5, max_gpus=8), JobLength(36_000))
    assert not r.recommendations and r.cut_by == "deadline"
    assert r.closest.instance == "b.quad:1"
    r = search(CATALOG, fake_predict, Constraints(budget_usd_per_hour=0.1, max_gpus=8))
    assert r.cut_by == "budget" and r.closest.instance == "a.small:1"


def test_pareto_filters_dominated():
    r = search(CATALOG, fake_predict, Constraints(max_gpus=8))
    front = [(c.instance, round(c.cost_per_hour_usd, 2)) for c in r.frontier]
    # a.small x 4 ($4, 291.6) is beaten by b.quad x 1 ($3.5, 480): off the frontier.
    assert ("a.small:4", 4.0) not in front
    assert front[:4] == [("a.small:1", 1.0), ("a.small:2", 2.0), ("a.small:3", 3.0), ("b.quad:1", 3.5)]
    costs = [c.cost_per_hour_usd for c in r.frontier]
    tps = [c.expected_throughput_samples_per_s for c in r.frontier]
    assert costs == sorted(costs) and tps == sorted(tps)
    assert pareto([]) == []


def test_mixed_adds_spot_on_demand_and_two_type_mixes():
    r = search(CATALOG, fake_predict, Constraints(max_gpus=8, spot=True, mixed=True, top=100))
    names = {c.instance for c in r.recommendations}
    assert "a.small:1@on-demand+a.small:3@spot" in names
    mix = next(c for c in r.recommendations if c.instance == "a.small:1@on-demand+a.small:3@spot")
    assert mix.cost_per_hour_usd == pytest.approx(1.0 + 3 * 0.3)
    assert any("+" in n and "b.quad" in n and "a.small" in n for n in names)  # two-type mixes
    assert all(c.gpus <= 8 for c in r.recommendations)


def test_constraint_validation():
    with pytest.raises(SriftError, match="needs the job's length"):
        search(CATALOG, fake_predict, Constraints(deadline_hours=2))
    with pytest.raises(SriftError, match="go together"):
        JobLength(epochs=3)
    with pytest.raises(SriftError, match="given twice"):
        JobLength(steps=10, epochs=3, dataset_size=100)
    with pytest.raises(SriftError, match="budget must be positive"):
        Constraints(budget_usd_per_hour=-1)
    with pytest.raises(SriftError, match="objective"):
        Constraints(objective="fastest")
    assert JobLength(epochs=2, dataset_size=100).steps_for(30) == 2 * 4  # 100 / 30: 4 iterations, the last partial


def test_a_multi_node_choice_names_the_best_single_node_one():
    # Budget $7: b.quad x 2 (864 samples/s, 2 nodes) beats b.quad x 1 (480, one node).
    r = search(CATALOG, fake_predict, Constraints(budget_usd_per_hour=7.0, max_gpus=8))
    assert r.recommendations[0].instance == "b.quad:2" and r.recommendations[0].nodes == 2
    assert r.best_single_node.instance == "b.quad:1"
    # 480 / 864 - 1 = -44 %
    assert "It spans 2 nodes" in why(r) and "best one-node choice is b.quad:1: -44% throughput at $3.50/h" in why(r)
    # a one-node winner needs no such line
    r = search(CATALOG, fake_predict, Constraints(budget_usd_per_hour=4.0, max_gpus=8))
    assert r.recommendations[0].nodes == 1 and r.best_single_node is None and "one-node" not in why(r)


def test_nodes_of_a_mixed_spot_spec():
    r = search(CATALOG, fake_predict, Constraints(max_gpus=8, spot=True, mixed=True, top=100))
    mix = next(c for c in r.recommendations if c.instance == "a.small:1@on-demand+a.small:6@spot")
    assert (mix.nodes, mix.gpus, mix.label) == (7, 7, "a.small:1@on-demand+a.small:6@spot")
    assert next(c for c in r.recommendations if c.instance == "b.quad:1").nodes == 1


def test_a_runner_up_on_other_gpus_within_the_compute_error_is_called_a_close_call():
    r = search(CATALOG, fake_predict, Constraints(budget_usd_per_hour=4.0, max_gpus=8))
    top, ru = r.recommendations[:2]  # b.quad:1 (GB, 480 samples/s), a.small:4 (GA, 291.6)

    def with_error(c, pct):
        return dataclasses.replace(c, prediction=dataclasses.replace(c.prediction, compute_error_pct=pct))

    def close(top_pct, ru_pct, runner=ru):
        return why(dataclasses.replace(r, recommendations=[with_error(top, top_pct), with_error(runner, ru_pct)]))

    # 1 - 291.6 / 480 = 39 % apart: within a ±50 % compute error (the larger of the two counts), not within ±30 %.
    assert "The two are 39% apart on other GPUs (GB against GA), less than the compute model's typical error across GPUs (±50.0 %)" in close(50.0, 20.0)
    assert "apart on other GPUs" in close(20.0, 50.0)
    assert "apart on other GPUs" not in close(30.0, 30.0)
    # Unvalidated (None) or the same GPUs: no such sentence.
    assert "apart on other GPUs" not in close(None, 50.0)
    same = next(c for c in r.recommendations if c.instance == "a.small:3")
    assert "apart on other GPUs" not in why(dataclasses.replace(r, recommendations=[with_error(ru, 90.0), with_error(same, 90.0)]))


def _recommend_result(constraints, length=None):
    from srift.job import Job
    from srift.results import RecommendResult

    found = search(CATALOG, fake_predict, constraints, length)
    return RecommendResult(found, constraints, Job(length=length), "toy", "fp32", 10, None, "test")


def test_the_no_fit_message_names_the_limit_and_the_closest_configuration():
    from srift.api import no_fit_error

    assert no_fit_error(_recommend_result(Constraints(budget_usd_per_hour=4.0, max_gpus=8))) is None
    # Budget: nothing simulated, so the cheapest type that fits is priced: a.small x 1, $1/h.
    err = no_fit_error(_recommend_result(Constraints(budget_usd_per_hour=0.1, max_gpus=8)))
    assert (err.message, err.hint, err.exit_code) == (
        "no configuration meets the budget of $0.10/h. Closest: a.small:1 at $1.00/h.", "relax that limit.", 1)
    # Deadline of 0.5 h for 36,000 steps: b.quad x 1 comes closest, 36000 * 40 / 480 s = 0.83 h for $2.92.
    err = no_fit_error(_recommend_result(Constraints(deadline_hours=0.5, max_gpus=8), JobLength(36_000)))
    assert err.message == "no configuration meets the deadline of 0.5 h. Closest: b.quad:1 at $3.50/h, 0.8 h, $2.92."
