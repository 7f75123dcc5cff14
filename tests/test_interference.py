"""All-reduce interference: the simulator's term on a hand-computed case, its parameter file, and
its fit to measured DDP scaling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from srift.errors import SriftError
from srift.perf import comm as CM
from srift.fitting import comm_fit
from srift.fitting import datasets
from srift.fitting import validation
from srift.perf.compute import FEATURES
from srift.perf.quantiles import Z90
from srift.hardware import gpu as gpu_spec
from srift.simulate import predict

from srift.testing import S_PER_BYTE, MiB, calibrated_cluster, measured_profile


@pytest.fixture(autouse=True)
def _fresh_comm_models():
    CM._MODEL_CACHE.clear()
    yield
    CM._MODEL_CACHE.clear()  # no model built with patched parameters outlives the test


def _with_interference(monkeypatch, k: float) -> None:
    shipped = CM.load_params()
    params = CM.CommParams(dict(shipped.classes), dict(shipped.meta), k)
    monkeypatch.setattr(CM, "load_params", lambda path=None: params)


def test_hidden_all_reduce_costs_k_times_its_duration(monkeypatch):
    # Two 2 MiB buckets (see test_two_buckets_first_one_overlaps_backward): the first is ready at
    # 0.05 s and its all-reduce (c = 0.021 s) ends at 0.071 s, inside backward (ends 0.09 s); the
    # second starts at 0.09 s and sticks out entirely. Hidden = c, exposed = c.
    _with_interference(monkeypatch, 0.5)
    prof = measured_profile([MiB, MiB, 2 * MiB])
    p = predict(prof, calibrated_cluster())
    c = 2 * MiB * S_PER_BYTE
    assert p.breakdown["exposed_comm"] == pytest.approx(c)
    assert p.breakdown["comm_interference"] == pytest.approx(0.5 * c)
    assert p.iteration_time_s == pytest.approx(0.03 + 0.06 + c + 0.5 * c + 0.005)
    # The calibration's p90 equals its median: only the 3 % compute spread (z = 1.2816) adds.
    assert p.p90_iteration_time_s == pytest.approx(0.09 * (1 + Z90 * 0.03) + c + 0.5 * c + 0.005)


def test_no_interference_when_nothing_is_hidden_or_on_cpu(monkeypatch):
    _with_interference(monkeypatch, 2.0)
    one_bucket = predict(measured_profile([100_000] * 3), calibrated_cluster())
    assert one_bucket.breakdown["comm_interference"] == pytest.approx(0.0, abs=1e-12)  # all of it is exposed already
    cpu = predict(measured_profile([MiB, MiB, 2 * MiB], gpu="cpu"), calibrated_cluster(gpu="cpu"))
    assert cpu.breakdown["comm_interference"] == 0.0
    assert cpu.breakdown["exposed_comm"] == pytest.approx(4 * MiB * S_PER_BYTE)


def test_interference_round_trips_and_is_validated():
    shipped = CM.load_params()
    assert 0.0 <= shipped.overlap_interference <= 3.0
    d = CM.CommParams(dict(shipped.classes), {}, 0.75).to_dict()
    assert CM.CommParams.from_dict(d).overlap_interference == 0.75
    d["overlap_interference"] = -1
    with pytest.raises(SriftError, match="overlap_interference"):
        CM.CommParams.from_dict(d)
    del d["overlap_interference"]
    assert CM.CommParams.from_dict(d).overlap_interference == 0.0  # older files: ideal overlap


def test_fit_recovers_the_interference_that_made_the_scaling():
    rng = np.random.default_rng(1)
    ideal = rng.uniform(0.2, 1.0, 50)
    pred1 = ideal * rng.uniform(0.95, 1.0, 50)
    hidden = rng.uniform(0.0, 0.1, 50)
    scaling = (ideal + 0.8 * hidden) / pred1
    k, err = comm_fit.fit_overlap_interference(scaling, ideal, hidden, pred1)
    assert k == pytest.approx(0.8)
    assert err < 1e-6


def test_scaling_pairs_join_each_system_with_its_own_one_gpu_row():
    rows = pd.DataFrame([
        # label, n, time: Dell's 2-GPU row pairs with Dell's 1-GPU row, not SMC's.
        ("Dell H100 80GB SXM5", 1, 0.40), ("Dell 2x H100 80GB SXM5", 2, 0.44),
        ("SMC H100 80GB SXM5", 1, 0.30), ("SMC 8x H100 80GB SXM5", 8, 0.36),
        ("4x A10", 4, 1.0),  # no 1-GPU row: dropped
    ], columns=["label", "n_gpus", "iteration_time_s"]).assign(
        model="bert-base", precision="amp", batch_per_gpu=32, source="lambda/head")
    pairs = validation.scaling_pairs(rows).set_index("label")
    assert sorted(pairs.index) == ["Dell 2x H100 80GB SXM5", "SMC 8x H100 80GB SXM5"]
    assert pairs.loc["Dell 2x H100 80GB SXM5", "scaling"] == pytest.approx(1.1)
    assert pairs.loc["SMC 8x H100 80GB SXM5", "scaling"] == pytest.approx(1.2)


@pytest.mark.parametrize("label,gpu,link", [
    ("8x A100 80GB SXM4", "A100-80GB", "nvswitch"),
    ("Fine-tuning NVIDIA DGX A100 (8x A100 80GB)", "A100-80GB", "nvswitch"),
    ("Dell 8x H100 80GB SXM5", "H100", "nvswitch4"),
    ("8x H100 80GB PCIe Gen5", "H100-PCIe", "pcie5"),
    ("LambdaCloud 8xV100 16GB", "V100-16GB", "nvlink"),
    ("4x RTX 3090", "RTX-3090", "pcie4"),
    ("8x RTX 2080Ti", "RTX-2080-Ti", "pcie3"),
    # an NVLink bridge joins two cards; with four or eight, the ring also crosses PCIe
    ("2x RTX 2080Ti NVLink", "RTX-2080-Ti", "nvlink-bridge"),
    ("4x RTX Quadro 8000 NVLink", "Quadro-RTX-8000", "pcie3"),
    ("8x RTX A4500", "RTX-A4500", "pcie4"),
])
def test_intra_node_link_is_inferred_from_the_system_label(label, gpu, link):
    assert datasets.intra_node_of(label, gpu) == link


def test_v100_power_tells_pcie_cards_from_sxm2():
    # The label "4x V100 32GB" does not say the form factor; 250 W per GPU is the PCIe card
    # (SXM2 draws 300 W), whose GPUs talk over PCIe 3, not NVLink.
    assert datasets.intra_node_of("4x V100 32GB", "V100-32GB", watt_per_gpu=250.0) == "pcie3"
    assert datasets.intra_node_of("LambdaCloud 4xV100 16GB", "V100-16GB", watt_per_gpu=300.0) == "nvlink"
    assert datasets.intra_node_of("4x V100 32GB", "V100-32GB") == "nvlink"


def test_half_feature_marks_mixed_precision_only():
    spec = gpu_spec("A100-40GB")
    assert FEATURES["half"](spec, "amp") == 1.0
    assert FEATURES["half"](spec, "tf32") == 0.0 and FEATURES["half"](spec, "fp32") == 0.0


def test_interference_across_nodes_counts_only_the_gpus_share():
    from srift.cluster import Cluster, NodeGroup

    sizes = np.array([MiB, 25 * MiB, 25 * MiB])
    one_node = CM.CommModel(Cluster("a", (NodeGroup(1, 8, "V100-16GB", "nvlink", 25.0, "ethernet"),)))
    assert one_node.gpu_side_fraction(sizes) == 1.0
    fractions = []
    for gbps in (10.0, 100.0, 400.0):
        two = CM.CommModel(Cluster("b", (NodeGroup(2, 8, "V100-16GB", "nvlink", gbps, "efa"),)))
        fractions.append(two.gpu_side_fraction(sizes))
    # A slow network leaves the GPUs mostly waiting; a faster one makes their share grow.
    assert 0.0 < fractions[0] < fractions[1] < fractions[2] <= 1.0
    assert fractions[0] < 0.1


def test_scaling_anomalies_compare_each_row_with_the_same_system_on_fewer_gpus():
    rows = pd.DataFrame([
        ("RTX 3090", 1, 0.50), ("2x RTX 3090", 2, 0.52), ("4x RTX 3090", 4, 1.00), ("8x RTX 3090", 8, 0.40),
        ("A100 80GB SXM4", 1, 0.50), ("4x A100 80GB SXM4", 4, 0.52),
    ], columns=["label", "n_gpus", "iteration_time_s"]).assign(
        model="bert-large-squad", precision="tf32", batch_per_gpu=8, source="lambda/2022-07")
    rows["throughput_total"] = rows["n_gpus"] * 8 / rows["iteration_time_s"]
    fast, flat = validation.scaling_anomalies(rows)
    # 4x RTX 3090: twice the 2x time, the same total throughput (flat). 8x: each GPU 20 % faster
    # than the 1-GPU run (super-linear). The A100s scale normally.
    assert fast.tolist() == [False, False, False, True, False, False]
    assert flat.tolist() == [False, False, True, False, False, False]
