"""The validation figures predict and recommend quote."""

from __future__ import annotations

import json

import pytest

from srift.cli import main
from srift.perf import accuracy as A


def test_each_cluster_gets_its_validation_group():
    groups = A.load_accuracy()["groups"]
    one_gpu, basis = A.typical_error(1, 1)
    assert one_gpu == groups["single_gpu"]["logo"] and "single-GPU" in basis
    node, basis = A.typical_error(1, 8)
    assert node == groups["one_node"]["logo"] and f"{groups['one_node']['rows']} measured" in basis
    multi, basis = A.typical_error(2, 16)
    g = groups["multi_node"]
    assert multi == g["fit"] and f"{g['rows']} measured multi-node runs" in basis and f"±{node:.1f} %" in basis
    assert ("slower than predicted" if g["bias_pct"] < 0 else "faster than predicted") in basis


def test_without_multi_node_figures_several_nodes_say_so(monkeypatch, tmp_path):
    doc = {"schema": A.SCHEMA, "groups": {"one_node": {"rows": 5, "fit": 1.0, "logo": 7.5, "lomo": 2.0}}}
    (tmp_path / "acc.json").write_text(json.dumps(doc))
    A.load_accuracy.cache_clear()
    A.typical_error.cache_clear()
    try:
        monkeypatch.setattr(A, "accuracy_path", lambda: tmp_path / "acc.json")
        assert A.typical_error(2, 16) == (None, "not validated across nodes: no measured multi-node run to compare with; "
                                               "within one node ±7.5 %")
        doc["groups"]["multi_node"] = {"rows": 3, "fit": 20.0, "logo": 9.0, "lomo": 9.0, "bias_pct": 12.0, "basis": "toy"}
        (tmp_path / "acc.json").write_text(json.dumps(doc))
        A.load_accuracy.cache_clear()
        A.typical_error.cache_clear()
        assert A.typical_error(4, 32) == (20.0, "MAPE over 3 measured multi-node runs (toy): they ran 12 % faster than "
                                                "predicted on average; within one node ±7.5 %")
    finally:
        A.load_accuracy.cache_clear()
        A.typical_error.cache_clear()


def test_missing_or_foreign_file_gives_no_figure(monkeypatch, tmp_path):
    A.load_accuracy.cache_clear()
    A.typical_error.cache_clear()
    try:
        monkeypatch.setattr(A, "accuracy_path", lambda: tmp_path / "absent.json")
        assert A.typical_error(1, 1) == (None, "no validation figures shipped")
        A.load_accuracy.cache_clear()
        A.typical_error.cache_clear()
        (tmp_path / "other.json").write_text(json.dumps({"schema": "x/v1", "groups": {"single_gpu": {"logo": 1}}}))
        monkeypatch.setattr(A, "accuracy_path", lambda: tmp_path / "other.json")
        assert A.typical_error(1, 1)[0] is None
    finally:
        A.load_accuracy.cache_clear()
        A.typical_error.cache_clear()


def test_predict_json_carries_the_typical_error(capsys):
    assert main(["predict", "--model", "resnet50", "--instance", "p3.16xlarge", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["typical_error_pct"] == pytest.approx(A.typical_error(1, 8, link="nvlink")[0])
    assert "leave-one-GPU-out" in d["typical_error_basis"]
    assert d["compute_error_pct"] == A.load_accuracy()["groups"]["single_gpu"]["logo"]


def test_where_compute_comes_from_picks_the_group():
    groups = A.load_accuracy()["groups"]
    pct, basis = A.typical_error(1, 1, measured=A.MEASURED_HERE)
    assert pct == groups["single_gpu_same_gpu"]["logo"] and "other systems with that GPU" in basis
    pct, basis = A.typical_error(1, 1, measured=A.MEASURED_ELSEWHERE)
    assert pct == groups["single_gpu_other_gpu"]["logo"] and "from a run on another GPU" in basis
    pct, basis = A.typical_error(1, 8, measured=A.MEASURED_HERE)
    assert pct == groups["one_node_same_gpu"]["logo"] and "same system's 1-GPU run" in basis
    # Measured elsewhere, a node falls back to the structural one-node figure and says why.
    pct, basis = A.typical_error(1, 8, measured=A.MEASURED_ELSEWHERE)
    assert pct == groups["one_node"]["logo"] and "carries little" in basis
    # Across nodes the network dominates: the same multi-node figure whatever the profile.
    assert A.typical_error(2, 16, measured=A.MEASURED_HERE) == A.typical_error(2, 16)
    with pytest.raises(ValueError, match="measured must be one of"):
        A.typical_error(1, 1, measured="gpu")


def test_a_profile_measured_on_the_target_gpu_quotes_the_measured_groups():
    from srift.catalog.spec import cluster_from_spec
    from srift.profile import LayerProfile, PhaseTimes, Profile
    from srift.simulate import predict

    layers = [LayerProfile("fc", "Linear", params=1_000_000, grad_bytes=4_000_000, fwd_flops=1e11, bwd_flops=2e11,
                           fwd_bytes=1e6, bwd_bytes=2e6, fwd_s=0.010, bwd_s=0.020)]
    prof = Profile(name="toy", batch_size=32, precision="fp32", layers=layers, iterations=10,
                   device={"name": "NVIDIA A10G", "kind": "cuda", "gpu": "A10G"},
                   phases=PhaseTimes(data_s=0.0, forward_s=0.010, backward_s=0.020, optimizer_s=0.001, total_s=0.032))
    groups = A.load_accuracy()["groups"]
    # g5.xlarge has one A10G: the profile's own GPU.
    assert predict(prof, cluster_from_spec("g5.xlarge")).typical_error_pct == groups["single_gpu_same_gpu"]["logo"]
    assert (predict(prof, cluster_from_spec("g5.12xlarge")).typical_error_pct
            == groups["one_node_same_gpu"]["by_link"]["pcie4"]["logo"])
    # p3.2xlarge has a V100: scaled from the A10G measurement.
    assert predict(prof, cluster_from_spec("p3.2xlarge")).typical_error_pct == groups["single_gpu_other_gpu"]["logo"]
    # The compute part alone: the single-GPU figure of where compute comes from, on any cluster.
    assert predict(prof, cluster_from_spec("g5.12xlarge:2")).compute_error_pct == groups["single_gpu_same_gpu"]["logo"]
    assert predict(prof, cluster_from_spec("p3.16xlarge")).compute_error_pct == groups["single_gpu_other_gpu"]["logo"]


def test_a_kfac_prediction_says_its_phases_are_unchecked_on_gpus(capsys):
    assert main(["predict", "--model", "resnet50", "--instance", "p3.16xlarge", "--optimizer", "kfac", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["typical_error_pct"] == pytest.approx(A.typical_error(1, 8, link="nvlink")[0])
    assert "K-FAC's phases have no GPU measurement" in d["typical_error_basis"]
    # The cached first-order basis is left as it was.
    assert "K-FAC" not in A.typical_error(1, 8)[1]


def test_one_node_quotes_its_link_where_the_validation_covers_it():
    groups = A.load_accuracy()["groups"]
    by_link = groups["one_node"]["by_link"]
    assert by_link and all(g["rows"] >= 20 for g in by_link.values())
    link = max(by_link, key=lambda k: by_link[k]["rows"])
    pct, basis = A.typical_error(1, 8, link=link)
    assert pct == by_link[link]["logo"] and f"{by_link[link]['rows']} measured one-node multi-GPU runs over {link}" in basis
    here = groups["one_node_same_gpu"]["by_link"][link]["logo"]
    assert basis.endswith(f"from a profile measured on this GPU type: ±{here:.1f} %")
    # A link without enough rows (or none) falls back to the whole group.
    assert A.typical_error(1, 8, link="nvswitch5")[0] == groups["one_node"]["logo"]
    assert A.typical_error(1, 1, link=link)[0] == groups["single_gpu"]["logo"]


def test_predict_quotes_the_instance_link(capsys):
    assert main(["predict", "--model", "resnet50", "--instance", "p5.48xlarge", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    g = A.load_accuracy()["groups"]["one_node"]["by_link"]["nvswitch4"]
    assert d["typical_error_pct"] == g["logo"] and "over nvswitch4" in d["typical_error_basis"]
