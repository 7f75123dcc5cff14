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
    r = search([A_SMALL, B_QUAD], model(0.4), Constraints(budget_usd_per_hour=7.0, max_gpus=8))
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
    r = search([A_SMALL, B_QUAD], model(0.1), Constraints(budget_usd_per_hour=4.5, max_gpus=8, mixed=True))
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
    r = search([A_SMALL, B_QUAD], model(0.1), Constraints(max_gpus=8, top=50, spot=True, mixed=True))
    by = {c.label: c for c in r.recommendations}
    one, two, mix = by["b.quad:1"], by["b.quad:2"], by["a.small:1+b.quad:1"]
    assert simpler(two, one) and not simpler(one, two)
    assert simpler(mix, one) and simpler(mix, two) and not simpler(two, mix)  # several nodes each; 1 type < 2
    assert simpler(by["b.quad:1 [Spot]"], one) and not simpler(one, by["b.quad:1 [Spot]"])  # on demand < spot
    assert simpler(by["a.small:1@on-demand+a.small:3@spot"], by["a.small:4 [Spot]"])  # spot < spot/on-demand mix
    assert not simpler(by["a.small:8"], by["b.quad:2"]) and not simpler(by["b.quad:2"], by["a.small:8"])
    assert combined_error_pct(two, one) == pytest.approx(math.sqrt(30**2 - 15**2))  # nested on the same machines
    assert combined_error_pct(by["a.small:1"], one) == pytest.approx(math.hypot(10, 15))  # other GPUs: nothing shared
    assert combined_error_pct(two, by["b.quad:2 [Spot]"]) == pytest.approx(0.0)  # same cluster, no length: nothing unshared
