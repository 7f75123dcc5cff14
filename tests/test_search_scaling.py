"""What the fast search relies on, checked with the real predictor and catalog: per-node throughput
does not rise with the node count (the bound of srift/search/sweep.py), the bound finds what
simulating every count finds, and one simulation per hardware stands for every region."""

import dataclasses

import numpy as np
import pytest

from srift.catalog import load_catalog
from srift.catalog.spec import cluster_of
from srift.job import Job, JobLength
from srift.search import search
from srift.search.limits import Constraints
from srift.search.sweep import TOLERANCE
from srift.simulate import Predictor
from srift.zoo import load_builtin_profile

COUNTS = [2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256, 512]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet50", "bert-large", "gpt2"])
def test_per_node_throughput_never_rises_with_more_nodes(model):
    predictor = Predictor(load_builtin_profile(model), Job())
    hardware = {r.hardware_key: r for r in load_catalog("aws,gcp,lambda,azure") if r.on_demand_usd_per_hour}
    for row in hardware.values():
        preds = [predictor.predict(cluster_of([(row, n, False)])) for n in COUNTS]
        per_node = np.array([p.throughput_samples_per_s for p in preds]) / np.array(COUNTS)
        assert (per_node[1:] <= per_node[:-1] * (1 + 1e-9)).all(), f"{model} on {row.instance_type}: {per_node}"
        fits = [p.fits_in_memory for p in preds]
        assert fits == sorted(fits), f"{model} on {row.instance_type}: fits on fewer nodes but not on more"
    assert TOLERANCE > 0


def _top(result, k=5):
    return [(c.instance, c.infra, c.spot) for c in result.recommendations[:k]]


@pytest.mark.parametrize("constraints, length", [
    (Constraints(budget_usd_per_hour=20, max_gpus=64), None),
    pytest.param(Constraints(budget_usd_per_hour=60, max_gpus=128, spot=True), None, marks=pytest.mark.slow),
    (Constraints(max_gpus=64, objective="cost"), None),
    (Constraints(deadline_hours=24, max_gpus=64), JobLength(epochs=90, dataset_size=1_281_167)),
    pytest.param(Constraints(deadline_hours=6, max_gpus=256, spot=True), JobLength(epochs=90, dataset_size=1_281_167),
                 marks=pytest.mark.slow),
    (Constraints(max_cost_usd=300, max_gpus=64, objective="throughput"), JobLength(epochs=90, dataset_size=1_281_167)),
])
@pytest.mark.slow
def test_the_bound_finds_what_simulating_every_count_finds(constraints, length):
    predictor = Predictor(load_builtin_profile("resnet50"), Job(length=length))
    catalog = load_catalog("aws/us-east-1,aws/us-west-2")
    fast = search(catalog, predictor.predict, constraints, length)
    every = search(catalog, predictor.predict, constraints, length, exhaustive=True)
    assert _top(fast) == _top(every)
    assert fast.simulated < every.simulated
    f, e = fast.recommendations[0], every.recommendations[0]
    assert f.expected_throughput_samples_per_s == pytest.approx(e.expected_throughput_samples_per_s)


def test_a_spot_on_demand_mix_is_the_same_simulation_as_its_nodes_together():
    predictor = Predictor(load_builtin_profile("resnet50"), Job())
    row = next(r for r in load_catalog("aws/us-east-1") if r.instance_type == "g5.12xlarge")
    together = predictor.predict(cluster_of([(row, 4, True)]))
    mix = predictor.predict(cluster_of([(row, 1, False), (row, 3, True)]))
    assert mix.iteration_time_s == together.iteration_time_s and mix.breakdown == together.breakdown
    assert mix.typical_error_pct == together.typical_error_pct


@pytest.mark.slow
def test_one_simulation_per_hardware_stands_for_every_region():
    # us-west-2 made 10 % cheaper, so it ranks first for most types; its rows come after us-east-1's, whose
    # rows are the ones simulated. Each us-west-2 candidate matches a simulation of its own rows.
    east, west = load_catalog("aws/us-east-1"), load_catalog("aws/us-west-2")
    cheaper = [dataclasses.replace(r, on_demand_usd_per_hour=r.on_demand_usd_per_hour * 0.9 if r.on_demand_usd_per_hour else None,
                                   spot_usd_per_hour=r.spot_usd_per_hour * 0.9 if r.spot_usd_per_hour else None) for r in west]
    predictor = Predictor(load_builtin_profile("resnet50"), Job())
    found = search(east + cheaper, predictor.predict, Constraints(budget_usd_per_hour=20, max_gpus=64, top=10, spot=True))
    rows = {r.instance_type: r for r in cheaper}
    in_west = [c for c in found.recommendations if c.region == "us-west-2"]
    assert len(in_west) >= 5
    for cand in in_west:
        parts = [(rows[t.split(":")[0]], int(t.split(":")[1].split("@")[0]), cand.spot) for t in cand.instance.split("+")]
        own = predictor.predict(cluster_of(parts))
        assert cand.prediction.iteration_time_s == pytest.approx(own.iteration_time_s)
        assert cand.cost_per_hour_usd == pytest.approx(own.cost_per_hour_usd)
        assert cand.expected_throughput_samples_per_s == pytest.approx(own.expected_throughput_samples_per_s)
        assert dataclasses.asdict(cand.prediction)["batch_split"] == dataclasses.asdict(own)["batch_split"]
