"""The bounded layout search (srift/search/bounded.py): the throughput bound holds on every
cluster a search simulates, pruning by it keeps the answer of simulating every count, and the cap
on simulations ends a search and says so."""

from __future__ import annotations

import functools

import pytest

import srift.api
import srift.search
from srift import api
from srift.catalog import load_catalog
from srift.catalog.spec import cluster_of
from srift.errors import SriftError
from srift.job import Job
from srift.report.recommend_view import summary
from srift.resolve import model_arch, model_flops_fn
from srift.search import SweepOptions, search
from srift.search.limits import Constraints
from srift.simulate import Predictor
from srift.zoo import load_builtin_profile

LAYOUT_SEARCH = dict(budget_usd_per_hour=2000.0, max_gpus=64, top=5)


def _rows(result):
    return [(c.instance, c.infra, c.spot, c.prediction.plan_label, c.expected_throughput_samples_per_s)
            for c in result.search.recommendations]


@pytest.mark.parametrize("model", ["mixtral-8x7b", "llama3-70b"])
def test_pruning_keeps_the_answer_of_simulating_every_count(model, monkeypatch):
    """On one region the search finds fewer than MAX_COMPARED (300) feasible configurations, so
    here the ranking compares the best 40 and the pruning keeps those 40 exact (the same rule, scaled
    down to the catalog)."""
    job = Job(layout="auto")
    real = srift.api.SweepOptions
    monkeypatch.setattr(srift.search, "MAX_COMPARED", 40)
    monkeypatch.setattr(srift.api, "SweepOptions", lambda bound=None: real(bound=bound, compared=40))
    pruned = api.recommend(job, Constraints(**LAYOUT_SEARCH), model=model, infra="aws/us-east-1")
    monkeypatch.setattr(srift.api, "search", functools.partial(search, exhaustive=True))
    every = api.recommend(job, Constraints(**LAYOUT_SEARCH), model=model, infra="aws/us-east-1")
    assert pruned.search.recommendations and _rows(pruned) == _rows(every)
    assert pruned.search.pruned.get("bound", 0) > 0
    assert pruned.search.simulated < every.search.simulated
    simpler = [(r.search.simpler_choice.chosen.instance, r.search.simpler_choice.over.instance)
               for r in (pruned, every) if r.search.simpler_choice is not None]
    assert len(set(simpler)) <= 1


def test_the_throughput_bound_holds_on_every_count():
    """Both bounds (the blocks' compute alone, and with the communication the layout search
    bounds a slot with) at least the throughput simulated, the tight one at most the loose one."""
    predictor = Predictor(load_builtin_profile("mixtral-8x7b"), Job(layout="auto", global_batch_size=256, precision="bf16"),
                          (), model_flops_fn("mixtral-8x7b"), model_arch("mixtral-8x7b"))
    rows = {r.instance_type: r for r in load_catalog("aws/us-east-1")}
    checked = 0
    for itype in ("p5.48xlarge", "g6e.12xlarge"):
        for nodes in (1, 2, 4, 8):
            cluster = cluster_of([(rows[itype], nodes, False)])
            tight, loose = predictor.throughput_bound(cluster), predictor.throughput_bound(cluster, tight=False)
            if tight is None:
                continue
            assert loose is not None and tight <= loose * (1 + 1e-12)
            try:
                pred = predictor.predict(cluster)
            except SriftError:  # no layout that runs: nothing to bound
                continue
            assert pred.throughput_samples_per_s <= tight * (1 + 1e-9)
            checked += 1
    assert checked >= 4


def test_a_data_parallel_job_has_no_bound():
    predictor = Predictor(load_builtin_profile("resnet50"), Job())
    row = next(r for r in load_catalog("aws/us-east-1") if r.instance_type == "p3.2xlarge")
    assert predictor.throughput_bound(cluster_of([(row, 2, False)])) is None


@pytest.mark.parametrize("bounded", [False, True])
def test_the_cap_on_simulations_ends_a_search_and_says_so(bounded, monkeypatch):
    cap = 7
    if bounded:  # a layout search, swept by its bound
        real = srift.api.SweepOptions
        monkeypatch.setattr(srift.api, "SweepOptions", lambda bound=None: real(bound=bound, max_simulations=cap))
        found = api.recommend(Job(layout="auto"), Constraints(**LAYOUT_SEARCH), model="mixtral-8x7b",
                              infra="aws/us-east-1").search
    else:
        predictor = Predictor(load_builtin_profile("resnet50"), Job())
        found = search(load_catalog("aws/us-east-1"), predictor.predict, Constraints(budget_usd_per_hour=100, max_gpus=256),
                       sweep_options=SweepOptions(max_simulations=cap))
    assert found.simulated == cap
    assert found.pruned.get("cap", 0) > 0 and "bound" not in found.pruned
    assert f"the search stopped at its cap of {cap:,} simulations (MAX_SEARCH_SIMULATIONS" in summary(found)
    assert found.recommendations  # what was simulated is still ranked
