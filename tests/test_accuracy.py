"""The validation figures predict and recommend quote: which group a prediction quotes, on a
hand-made figures file whose every number is distinct (so a wrong group cannot pass). A group
quotes the largest of its held-out figures (GPU, model, network or source left out)."""

from __future__ import annotations

import json

import pytest

from srift.catalog.spec import cluster_from_spec
from srift.cli import main
from srift.perf import accuracy as A
from srift.profile import DeviceInfo, LayerProfile, PhaseTimes, Profile
from srift.simulate import predict

TOY = {"schema": A.SCHEMA, "groups": {
    "single_gpu": {"rows": 200, "fit": 1.0, "logo": 1.1, "lomo": 1.2, "loso": 1.3},
    "one_node": {"rows": 500, "fit": 2.0, "logo": 2.1, "lomo": 2.2, "loso": 1.9,
                 "by_link": {"pcie4": {"rows": 150, "fit": 2.3, "logo": 2.4, "lomo": 2.5},
                             "nvswitch4": {"rows": 100, "fit": 2.6, "logo": 2.7, "lomo": 2.8}}},
    "multi_node": {"rows": 30, "fit": 30.0, "logo": 3.1, "lomo": 3.2, "lono": 3.3, "loso": 3.4, "bias_pct": -30.0, "basis": "toy runs",
                   "by_network": {"ethernet": {"rows": 21, "fit": 7.0, "logo": 7.1, "lomo": 7.3, "lono": 7.2, "bias_pct": 4.0}}},
    "single_gpu_same_gpu": {"rows": 90, "fit": 4.0, "logo": 4.1, "lomo": 4.1, "loso": 4.1},
    "single_gpu_other_gpu": {"rows": 4000, "fit": 5.0, "logo": 5.1, "lomo": 5.2},
    "one_node_same_gpu": {"rows": 450, "fit": 6.0, "logo": 6.1, "lomo": 6.05,
                          "by_link": {"pcie4": {"rows": 170, "fit": 6.3, "logo": 6.4, "lomo": 6.35}}},
}}


def _use(monkeypatch, tmp_path, doc) -> None:
    (tmp_path / "acc.json").write_text(json.dumps(doc))
    monkeypatch.setattr(A, "accuracy_path", lambda: tmp_path / "acc.json")
    A.load_accuracy.cache_clear()
    A.typical_error.cache_clear()


@pytest.fixture
def toy(monkeypatch, tmp_path):
    _use(monkeypatch, tmp_path, TOY)
    yield
    A.load_accuracy.cache_clear()  # the shipped figures again for the next test
    A.typical_error.cache_clear()


def test_each_cluster_gets_its_validation_group(toy):
    # The largest held-out figure: here the one with the source left out.
    assert A.typical_error(1, 1) == (1.3, "largest of leave-one-GPU-, model- and source-out MAPE over 200 measured "
                                          "single-GPU runs, scripts/validate.py; from a profile measured on this GPU type: ±4.1 %")
    # Here the model left out (2.2) is the largest, above the source (1.9).
    assert A.typical_error(1, 8)[0] == 2.2 and "500 measured one-node multi-GPU runs" in A.typical_error(1, 8)[1]
    # Several nodes: the largest held-out figure (GPU, model, network or source left out) of the
    # network's class where one has enough rows, else of the whole group.
    assert A.typical_error(2, 16) == (3.4, "largest of leave-one-GPU-, model-, network- and source-out MAPE over 30 measured "
                                           "multi-node runs (toy runs; scripts/validate.py): they ran 30 % slower than "
                                           "predicted on average; within one node ±2.2 %")
    assert A.typical_error(2, 16, network="infiniband")[0] == 3.4
    assert A.typical_error(2, 16, network="ethernet") == (7.3, "largest of leave-one-GPU-, model- and network-out MAPE over "
                                                               "21 measured multi-node runs over TCP sockets (toy runs; "
                                                               "scripts/validate.py): they ran 4 % faster than predicted "
                                                               "on average; within one node ±2.2 %")


def test_without_multi_node_figures_several_nodes_say_so(monkeypatch, tmp_path, toy):
    doc = {"schema": A.SCHEMA, "groups": {"one_node": {"rows": 5, "fit": 1.0, "logo": 7.5, "lomo": 2.0}}}  # largest: 7.5
    _use(monkeypatch, tmp_path, doc)
    assert A.typical_error(2, 16) == (None, "not validated across nodes: no measured multi-node run to compare with; "
                                           "within one node ±7.5 %")
    doc["groups"]["multi_node"] = {"rows": 3, "fit": 20.0, "bias_pct": 12.0, "basis": "toy"}  # no held-out figures
    _use(monkeypatch, tmp_path, doc)
    assert A.typical_error(4, 32) == (20.0, "MAPE over 3 measured multi-node runs (toy; scripts/validate.py): they ran "
                                            "12 % faster than predicted on average; within one node ±7.5 %")


def test_missing_or_foreign_file_gives_no_figure(monkeypatch, tmp_path, toy):
    monkeypatch.setattr(A, "accuracy_path", lambda: tmp_path / "absent.json")
    A.load_accuracy.cache_clear()
    A.typical_error.cache_clear()
    assert A.typical_error(1, 1) == (None, "no validation figures shipped")
    _use(monkeypatch, tmp_path, {"schema": "x/v1", "groups": {"single_gpu": {"logo": 1}}})
    assert A.typical_error(1, 1)[0] is None


@pytest.mark.slow
def test_predict_json_carries_the_typical_error(toy, capsys):
    assert main(["predict", "--model", "resnet50", "--instance", "p3.16xlarge", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # 8 V100 over NVLink, a link without its own figure: the whole one-node group's.
    assert d["typical_error_pct"] == 2.2 and "largest of leave-one-GPU-, model- and source-out" in d["typical_error_basis"]
    assert d["compute_error_pct"] == 1.3  # structural profile: the single-GPU figure


def test_where_compute_comes_from_picks_the_group(toy):
    pct, basis = A.typical_error(1, 1, measured=A.MEASURED_HERE)
    assert pct == 4.1 and "other systems with that GPU" in basis
    pct, basis = A.typical_error(1, 1, measured=A.MEASURED_ELSEWHERE)
    assert pct == 5.2 and "from a run on another GPU" in basis
    pct, basis = A.typical_error(1, 8, measured=A.MEASURED_HERE)
    assert pct == 6.1 and "same system's 1-GPU run" in basis
    # Measured elsewhere, a node falls back to the structural one-node figure and says why.
    pct, basis = A.typical_error(1, 8, measured=A.MEASURED_ELSEWHERE)
    assert pct == 2.2 and "carries little" in basis
    # Across nodes the network dominates: the same multi-node figure whatever the profile.
    assert A.typical_error(2, 16, measured=A.MEASURED_HERE) == A.typical_error(2, 16)
    with pytest.raises(ValueError, match="measured must be one of"):
        A.typical_error(1, 1, measured="gpu")


def test_a_profile_measured_on_the_target_gpu_quotes_the_measured_groups(toy):
    layers = [LayerProfile("fc", "Linear", params=1_000_000, grad_bytes=4_000_000, fwd_flops=1e11, bwd_flops=2e11,
                           fwd_bytes=1e6, bwd_bytes=2e6, fwd_s=0.010, bwd_s=0.020)]
    prof = Profile(name="toy", batch_size=32, precision="fp32", layers=layers, iterations=10,
                   device=DeviceInfo("NVIDIA A10G", "cuda", "A10G"),
                   phases=PhaseTimes(data_s=0.0, forward_s=0.010, backward_s=0.020, optimizer_s=0.001, total_s=0.032))
    # g5.xlarge has one A10G: the profile's own GPU; g5.12xlarge four over PCIe 4.
    assert predict(prof, cluster_from_spec("g5.xlarge")).typical_error_pct == 4.1
    assert predict(prof, cluster_from_spec("g5.12xlarge")).typical_error_pct == 6.4
    # p3.2xlarge has a V100: scaled from the A10G measurement.
    assert predict(prof, cluster_from_spec("p3.2xlarge")).typical_error_pct == 5.2
    # The compute part alone: the single-GPU figure of where compute comes from, on any cluster.
    assert predict(prof, cluster_from_spec("g5.12xlarge:2")).compute_error_pct == 4.1
    assert predict(prof, cluster_from_spec("p3.16xlarge")).compute_error_pct == 5.2


def test_a_kfac_prediction_says_what_of_its_phases_is_checked_on_gpus(toy, capsys):
    assert main(["predict", "--model", "resnet50", "--instance", "p3.16xlarge", "--optimizer", "kfac", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["typical_error_pct"] == 2.2
    assert "for the first-order part only" in d["typical_error_basis"]
    assert "Cholesky-inverse and preconditioning kernels are within 15 %" in d["typical_error_basis"]
    assert "smaller and larger ones extrapolated" in d["typical_error_basis"]
    # The cached first-order basis is left as it was.
    assert "K-FAC" not in A.typical_error(1, 8)[1]


def test_one_node_quotes_its_link_where_the_validation_covers_it(toy):
    pct, basis = A.typical_error(1, 8, link="pcie4")
    assert pct == 2.5 and "150 measured one-node multi-GPU runs over pcie4" in basis
    assert basis.endswith("from a profile measured on this GPU type: ±6.4 %")
    # A link without its own figures falls back to the whole group (and the measured tip too).
    assert A.typical_error(1, 8, link="nvswitch5")[0] == 2.2
    assert A.typical_error(1, 8, link="nvswitch4")[1].endswith("±6.1 %")
    assert A.typical_error(1, 1, link="pcie4")[0] == 1.3


def test_predict_quotes_the_instance_link(toy, capsys):
    assert main(["predict", "--model", "resnet50", "--instance", "p5.48xlarge", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["typical_error_pct"] == 2.8 and "over nvswitch4" in d["typical_error_basis"]


def test_the_shipped_figures_cover_every_group_and_link_with_enough_rows():
    groups = A.load_accuracy()["groups"]
    assert set(A.GROUPS) <= set(groups)
    assert all(g["rows"] >= 20 for g in groups["one_node"]["by_link"].values())


def test_beyond_the_validated_node_count_the_figure_widens(monkeypatch, tmp_path):
    doc = json.loads(json.dumps(TOY))
    doc["groups"]["multi_node"]["max_nodes"] = 16
    _use(monkeypatch, tmp_path, doc)
    try:
        assert A.typical_error(16, 128, network="ethernet")[0] == 7.3  # within the validated counts
        pct, basis = A.typical_error(64, 64, network="ethernet")
        assert pct == pytest.approx(7.3 * 2.0)  # sqrt(64 / 16) = 2, by hand
        assert basis.endswith("; widened by sqrt(64/16) for 64 nodes, beyond the 16 validated")
    finally:
        A.load_accuracy.cache_clear()
        A.typical_error.cache_clear()


def test_a_row_says_how_far_the_measured_node_counts_reach(monkeypatch, tmp_path):
    doc = json.loads(json.dumps(TOY))
    doc["groups"]["multi_node"]["max_nodes"] = 16
    _use(monkeypatch, tmp_path, doc)
    try:
        assert A.node_evidence(1) == "one node"
        assert A.node_evidence(16) == "16 nodes: within the 16 measured"
        assert A.node_evidence(38) == "38 nodes: beyond the 16 measured"
        assert A.node_evidence(38, short=True) == "38: beyond the 16 measured" and A.node_evidence(1, short=True) == "1"
        del doc["groups"]["multi_node"]
        _use(monkeypatch, tmp_path, doc)
        assert A.node_evidence(2) == "2 nodes: none measured"
    finally:
        A.load_accuracy.cache_clear()
        A.typical_error.cache_clear()


def test_a_layout_quotes_its_own_group_never_below_the_dense_layouts(monkeypatch, tmp_path):
    from srift.simulate.assemble import layout_figure

    def _typical_error(moe, lora, loso, lomo, validation=None, sharded=False, fp8=False):
        group = "moe" if moe else "layout_finetune" if lora else "layouts"
        return layout_figure(group, {"loso_mape_pct": loso, "lomo_mape_pct": lomo, **(validation or {})}, sharded, fp8)

    doc = {**TOY, "groups": {**TOY["groups"],
                             "moe": {"rows": 26, "fit": 20.1, "lomo": 20.1, "loso": 20.1, "basis": "toy MoE runs"},
                             "finetune": {"rows": 13, "fit": 60.0, "loso": 60.0, "steady_rows": 10, "steady_loso": 14.2}}}
    _use(monkeypatch, tmp_path, doc)
    A.moe_typical_error.cache_clear()
    try:
        # dense: the larger of the layout group's source- and model-out figures
        pct, basis = _typical_error(False, False, 5.3, 5.9)
        assert pct == 5.9 and basis.startswith("largest of leave-one-source- and model-out MAPE")
        # a mixture of experts quotes the MoE group, LoRA in a layout the NeMo steady-state runs
        assert _typical_error(True, False, 5.3, 5.9)[0] == 20.1
        assert "26 expert-parallel runs (toy MoE runs)" in _typical_error(True, False, 5.3, 5.9)[1]
        assert _typical_error(False, True, 5.3, 5.9)[0] == 14.2
        # a group validated better than the dense layouts it rests on still quotes the dense figure
        assert _typical_error(False, True, 5.3, 15.0)[0] == 15.0
        # FSDP under a layout quotes torchtitan's runs (layouts.json's validation)
        fsdp = {"fsdp_mape_pct": 23.9, "fsdp_rows": 5, "fsdp_bias_pct": -23.1}
        assert _typical_error(False, False, 5.3, 5.9, fsdp, sharded=True)[0] == 23.9
        assert "5 torchtitan FSDP2 x TP runs" in _typical_error(False, False, 5.3, 5.9, fsdp, sharded=True)[1]
        assert _typical_error(False, False, 5.3, 5.9, {"fsdp_mape_pct": 2.0}, sharded=True)[0] == 5.9
        assert _typical_error(False, False, 5.3, 5.9, fsdp)[0] == 5.9  # not under FSDP: the dense figure
        # FP8 GEMMs of a dense model quote their own runs' figure: Megatron's, or torchtitan's under FSDP2
        fp8 = {"fp8_mape_pct": 8.3, "fp8_rows": 30, "fp8_bias_pct": 6.5, "fsdp_fp8_mape_pct": 14.0, "fsdp_fp8_rows": 17}
        assert _typical_error(False, False, 5.3, 5.9, fp8, fp8=True)[0] == 8.3
        assert "30 Megatron-Core runs with Transformer Engine FP8" in _typical_error(False, False, 5.3, 5.9, fp8, fp8=True)[1]
        assert _typical_error(False, False, 5.3, 5.9, fp8, sharded=True, fp8=True)[0] == 14.0
        assert _typical_error(False, False, 5.3, 9.0, fp8, fp8=True)[0] == 9.0  # never below the dense group's
        assert _typical_error(True, False, 5.3, 5.9, fp8, fp8=True)[0] == 20.1  # a MoE quotes its group (FP8 runs in it)
    finally:
        A.moe_typical_error.cache_clear()
        A.load_accuracy.cache_clear()
        A.typical_error.cache_clear()
