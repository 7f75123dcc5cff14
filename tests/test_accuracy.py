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
    assert d["typical_error_pct"] == pytest.approx(A.load_accuracy()["groups"]["one_node"]["logo"])
    assert "leave-one-GPU-out" in d["typical_error_basis"]
