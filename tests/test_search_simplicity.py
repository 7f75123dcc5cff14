"""The simplicity rule (srift/search/rank.py), pinned on a hand-made catalog with hand numbers.

Speeds: GA 100 samples/s per GPU, GB 120; every node beyond the first costs ``node_penalty`` of
the throughput. Validation figures of the fake: ±15 % on one node of several GPUs, ±30 % on
several nodes, ±10 % of it the compute model's (so on the same GPUs the unshared parts are
sqrt(15² - 10²) = 11.18 % on one node and sqrt(30² - 10²) = 28.28 % on several).
"""

import math

import pytest

from srift.report.recommend_view import why
from srift.search import search
from srift.search.limits import Constraints
from srift.search.rank import combined_error_pct, simpler
from srift.testing import SpeedModel, instance

ERRORS = {"gpu": 10.0, "node": 15.0, "nodes": 30.0}
A_SMALL = instance("a.small", "GA", 1, 1.0, 0.3)
B_QUAD = instance("b.quad", "GB", 4, 3.5, 1.0)


def model(penalty: float, **kw) -> SpeedModel:
    return SpeedModel({"GA": 100.0, "GB": 120.0, "GC": 119.0}, node_penalty=penalty, typical_error_pct=ERRORS,
                      compute_error_pct=10.0, **kw)


def test_a_multi_node_choice_within_the_combined_error_loses_to_one_node():
    # Budget $7. With a 40 % cost per extra node: b.quad x 2 = 960 x 0.6 = 576 samples/s, b.quad x 1 = 480:
    # 20 % faster. Same machines: the one node's unshared 11.18 % is inside the two nodes' 28.28 %, so
    # they differ by sqrt(28.28² - 11.18²) = sqrt(800 - 125) = 25.98 %: 20 % is within it.
    # confidence 0.5: ranked at the median (the rule itself; ranking at the p90 is tested below).
    r = search([A_SMALL, B_QUAD], model(0.4), Constraints(budget_usd_per_hour=7.0, max_gpus=8, confidence=0.5))
    assert [c.instance for c in r.recommendations[:2]] == ["b.quad:1", "b.quad:2"]
    pick = r.simpler_choice
    assert (pick.chosen.instance, pick.over.instance, pick.blocker.instance) == ("b.quad:1", "b.quad:2", "b.quad:1")
    assert pick.edge == pytest.approx(0.2) and pick.error_pct == pytest.approx(math.sqrt(675))
    assert why(r).startswith("b.quad:1 is chosen over b.quad:2 (runner-up): b.quad:2 is 20% faster but needs 2 nodes "
                             "instead of 1, and 20% is less than their combined typical error (±26 %)")
    assert r.best_single_node is None  # the chosen one is one node


def test_a_multi_node_choice_that_beats_one_node_by_more_than_the_error_stays():
    # With 10 % per extra node: b.quad x 2 = 864 samples/s, 80 % more than b.quad x 1: beyond 25.98 %.
    r = search([A_SMALL, B_QUAD], model(0.1), Constraints(budget_usd_per_hour=7.0, max_gpus=8))
    assert r.recommendations[0].instance == "b.quad:2" and r.simpler_choice is None
    assert r.best_single_node.instance == "b.quad:1"
    assert "It spans 2 nodes" in why(r) and "best one-node choice is b.quad:1: -44% throughput" in why(r)


def test_a_two_type_mix_that_adds_little_loses_to_one_type():
    # Budget $4.50 with --mixed: a.small x 1 + b.quad x 1 = (100 + 480) x 0.9 = 522 samples/s, 8.75 % more
    # than b.quad x 1 alone; other GPUs in it, so nothing is shared: sqrt(30² + 15²) = 33.5 %.
    r = search([A_SMALL, B_QUAD], model(0.1), Constraints(budget_usd_per_hour=4.5, max_gpus=8, mixed=True, confidence=0.5))
    assert [c.instance for c in r.recommendations[:2]] == ["b.quad:1", "a.small:1+b.quad:1"]
    pick = r.simpler_choice
    assert pick.edge == pytest.approx(522 / 480 - 1) and pick.error_pct == pytest.approx(math.hypot(30, 15))
    assert "needs 2 nodes instead of 1 and two instance types" in why(r)


def test_spot_is_less_simple_than_on_demand_but_a_big_saving_wins():
    # Cost per sample: b.quad x 1 on spot ($1/h) against on demand ($3.50/h) on the same machine: the
    # same prediction, so the only unshared error is the interruptions' (none without a job length):
    # 71 % cheaper stays spot.
    r = search([B_QUAD], model(0.1), Constraints(max_gpus=4, spot=True, objective="cost"))
    top = r.recommendations[0]
    assert (top.instance, top.spot, r.simpler_choice) == ("b.quad:1", True, None)


def test_two_multi_node_clusters_are_equally_complex_whatever_their_node_counts():
    # b.quad x 2 (GB, 864 samples/s) against c.quad x 2 (GC at 119, 856.8): neither is simpler, so the
    # rule keeps the order and only calls it close (other GPUs: sqrt(30² + 30²) = 42.4 %).
    c_quad = instance("c.quad", "GC", 4, 3.5, None)
    r = search([B_QUAD, c_quad], model(0.1), Constraints(budget_usd_per_hour=7.0, max_gpus=8))
    assert [c.instance for c in r.recommendations[:2]] == ["b.quad:2", "c.quad:2"] and r.simpler_choice is None
    assert r.close_call.error_pct == pytest.approx(math.hypot(30, 30))


def test_what_is_simpler_and_what_two_predictions_share():
    r = search([A_SMALL, B_QUAD], model(0.1), Constraints(max_gpus=8, top=50, spot=True, mixed=True, diverse=False))
    by = {c.label: c for c in r.recommendations}
    one, two, mix = by["b.quad:1"], by["b.quad:2"], by["a.small:1+b.quad:1"]
    assert simpler(two, one) and not simpler(one, two)
    assert simpler(mix, one) and simpler(mix, two) and not simpler(two, mix)  # several nodes each; 1 type < 2
    assert simpler(by["b.quad:1 [Spot]"], one) and not simpler(one, by["b.quad:1 [Spot]"])  # on demand < spot
    assert simpler(by["a.small:1@on-demand+a.small:3@spot"], by["a.small:4 [Spot]"])  # spot < spot/on-demand mix
    assert simpler(by["a.small:8"], by["b.quad:2"]) and not simpler(by["b.quad:2"], by["a.small:8"])  # 2 nodes < 8
    assert combined_error_pct(two, one) == pytest.approx(math.sqrt(30**2 - 15**2))  # nested on the same machines
    assert combined_error_pct(by["a.small:1"], one) == pytest.approx(math.hypot(10, 15))  # other GPUs: nothing shared
    assert combined_error_pct(two, by["b.quad:2 [Spot]"]) == pytest.approx(0.0)  # same cluster, no length: nothing unshared


def test_with_limits_the_order_is_taken_at_the_confidence():
    # The first test's catalog at the default 90 % confidence: b.quad:2 (576/s, ±30 %: sigma 0.360,
    # p90 factor exp(1.2816 x 0.360) = 1.586 -> 363/s) falls behind b.quad:1 (480/s, ±15 %: sigma
    # 0.186, factor 1.269 -> 378/s), so b.quad:1 ranks first on its own, and the view says why.
    r = search([A_SMALL, B_QUAD], model(0.4), Constraints(budget_usd_per_hour=7.0, max_gpus=8))
    assert r.recommendations[0].instance == "b.quad:1" and r.simpler_choice is None
    assert r.best_at_median.instance == "b.quad:2"
    assert r.best_at_median.quantile_factor(0.9) == pytest.approx(1.586, abs=0.001)
    assert "b.quad:2 has the better median (576 samples/s, ±30.0 %)" in why(r)


def test_fewer_nodes_are_simpler_than_more_nodes():
    # a.small x 8 (GA at 130/s, 1 % lost per extra node): 1,040 x 0.99^7 = 970.0/s; b.quad x 2:
    # 960 x 0.99 = 950.4/s. 2.1 % apart on other GPUs (nothing shared: ±42.4 %): 2 nodes are
    # simpler than 8, so b.quad:2 is chosen (the old rule called any two multi-node clusters equal).
    speeds = SpeedModel({"GA": 130.0, "GB": 120.0}, node_penalty=0.01, typical_error_pct=ERRORS, compute_error_pct=10.0)
    r = search([A_SMALL, B_QUAD], speeds, Constraints(max_gpus=8))
    pick = r.simpler_choice
    assert (r.recommendations[0].instance, pick.over.instance, pick.blocker.instance) == ("b.quad:2", "a.small:8", "b.quad:2")
    assert pick.edge == pytest.approx(1040 * 0.99**7 / (960 * 0.99) - 1)
    assert pick.error_pct == pytest.approx(math.hypot(30, 30))
    assert "needs 8 nodes instead of 2" in why(r)


def test_a_tie_within_noise_goes_to_the_cheaper():
    # c.quad x 2 (GC at 120.5/s: 964/s, $7.20/h) is 0.4 % faster than b.quad x 2 (960/s, $7.00/h),
    # equally complex: within TIE_FRACTION (1 %), so the cheaper b.quad:2 comes first.
    c_quad = instance("c.quad", "GC", 4, 3.6, None)
    speeds = SpeedModel({"GB": 120.0, "GC": 120.5}, node_penalty=0.0, typical_error_pct=ERRORS, compute_error_pct=10.0)
    r = search([B_QUAD, c_quad], speeds, Constraints(max_gpus=8))
    assert [c.instance for c in r.recommendations[:2]] == ["b.quad:2", "c.quad:2"]


def test_top_shows_the_best_of_each_family_or_says_why_not():
    from srift.report.recommend_view import _notes
    from srift.results import RecommendResult
    from srift.job import Job

    r = search([A_SMALL, B_QUAD], model(0.1), Constraints(max_gpus=8, top=5))
    assert [c.families for c in r.recommendations] == [("b",), ("a",)] and r.families == 2
    notes = _notes(RecommendResult(r, Constraints(max_gpus=8, top=5), Job(), "m", "fp32", 10, None, "aws"))
    assert "2 rows, not 5: the rows are the best of each instance family, and only 2 families meet the limits." in notes
