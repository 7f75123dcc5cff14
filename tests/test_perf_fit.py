"""Fitting: the compute fit recovers a known model; dataset labels map to canonical GPUs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from srift.perf import compute as C
from srift.fitting import compute_fit
from srift.fitting import datasets
from srift.fitting import validation
from srift.profile import LayerProfile, Profile


def _toy_model(scale: float, blocks: int = 6, fc_scale: float | None = None) -> Profile:
    fc = scale if fc_scale is None else fc_scale
    layers = []
    for i in range(blocks):
        layers.append(LayerProfile(f"conv{i}", "Conv2d", params=10_000, grad_bytes=40_000,
                                   fwd_flops=4e10 * scale, bwd_flops=8e10 * scale, fwd_bytes=5e7 * scale, bwd_bytes=1e8 * scale))
        layers.append(LayerProfile(f"bn{i}", "BatchNorm2d", params=128, grad_bytes=512,
                                   fwd_flops=1e7 * scale, bwd_flops=2e7 * scale, fwd_bytes=2e8 * scale, bwd_bytes=4e8 * scale))
        layers.append(LayerProfile(f"fc{i}", "Linear", params=1_000_000, grad_bytes=4_000_000,
                                   fwd_flops=3e10 * fc, bwd_flops=6e10 * fc, fwd_bytes=2e7 * fc, bwd_bytes=4e7 * fc))
    return Profile("toy", 32, "fp32", layers)


FEATURES = ("one", "log_peak", "tensor")


def test_fit_recovers_times_generated_by_a_known_model():
    truth = C.ComputeParams(
        features=FEATURES,
        inv_eff={"conv": (1.6, 0.2, -0.1), "matmul": (1.4, 0.2, -0.1), "attention": (1.4, 0.2, -0.1),
                 **{k: (1.4, 0.2, -0.1) for k in ("norm", "elementwise", "pool", "embedding", "other")}},
        inv_eff_mem=(1.3, 0.0, 0.1), launch_s=1e-5, optimizer_s_per_tensor=1e-5, overhead_s=3e-3,
    )
    rows, designs = [], []
    # Different conv-to-matmul mixes, so that each kind's efficiency is identified.
    for scale, fc in ((0.5, 0.5), (1.0, 2.0), (2.0, 1.0)):
        p = _toy_model(scale, fc_scale=fc)
        for gpu in ("V100-16GB", "T4", "A10G", "A100-40GB", "H100", "RTX-3090", "L4"):
            for precision in ("tf32", "amp"):
                t = C.layer_times(p, gpu, precision, truth).total_s
                rows.append((p, gpu, precision, t))
                designs.append(compute_fit._design(p, gpu, precision, FEATURES, t))
    fitted = compute_fit.fit_compute(designs, launch_s=1e-5, features=FEATURES, alpha=1e-8, fit_overhead=True)
    pred = np.array([C.layer_times(p, g, pr, fitted).total_s for p, g, pr, _ in rows])
    meas = np.array([t for *_, t in rows])
    assert validation.mape(pred, meas) < 1.0
    assert fitted.overhead_s == pytest.approx(3e-3, rel=0.2)


def test_fit_recovers_a_per_layer_cost():
    # The default fit: a cost per layer pass, no per-iteration constant. Models of different
    # depth (6, 12 and 18 blocks) separate it from the per-FLOP and per-byte terms; their
    # conv-to-matmul mixes differ so that each kind's efficiency is identified.
    truth = C.ComputeParams(
        features=FEATURES,
        inv_eff={k: (1.5, 0.1, -0.1) for k in C.KINDS},
        inv_eff_mem=(1.3, 0.0, 0.1), launch_s=5e-5, optimizer_s_per_tensor=5e-5, overhead_s=0.0,
    )
    rows, designs = [], []
    for blocks, scale, fc in ((6, 1.0, 1.0), (18, 0.3, 1.0), (12, 2.0, 0.5)):
        p = _toy_model(scale, blocks, fc)
        for gpu in ("V100-16GB", "T4", "A100-40GB", "H100", "L4"):
            for precision in ("tf32", "amp"):
                t = C.layer_times(p, gpu, precision, truth).total_s
                rows.append((p, gpu, precision, t))
                designs.append(compute_fit._design(p, gpu, precision, FEATURES, t))
    fitted = compute_fit.fit_compute(designs, features=FEATURES, alpha=1e-8)
    assert fitted.overhead_s == 0.0
    assert fitted.launch_s == pytest.approx(5e-5, rel=0.1)
    pred = np.array([C.layer_times(p, g, pr, fitted).total_s for p, g, pr, _ in rows])
    assert validation.mape(pred, np.array([t for *_, t in rows])) < 1.0


@pytest.mark.parametrize("label,canonical", [
    ("LambdaCloud 8x A100 40GB PCIe", "A100-40GB"),
    ("Dell 2x H100 80GB SXM5", "H100"),
    ("DellTexas H100 80GB SXM5", "H100"),
    ("H100 80GB PCIe Gen5", "H100-PCIe"),
    ("LambdaCloud 4xV100 16GB", "V100-16GB"),
    ("RTX 2080Ti", "RTX-2080-Ti"),
    ("8x RTX 6000 Ada", "RTX-6000-Ada"),
    ("GTX 1080Ti", None),
    # cloud prefixes, the NVLink-bridge suffix, a run tag, the throughput file's word order
    ("Lambda Cloud — 4x Quadro RTX 6000", "Quadro-RTX-6000"),
    ("Linode Cloud — 2x Quadro RTX 6000", "Quadro-RTX-6000"),
    ("4x RTX 2080Ti NVLink", "RTX-2080-Ti"),
    ("Quadro RTX 8000 V1", "Quadro-RTX-8000"),
    ("8x RTX Quadro 8000", "Quadro-RTX-8000"),
    ("16x RTX A4000", "RTX-A4000"),
    ("2x RTX A40", "A40"),
    # laptop parts: clocks set by the laptop's power limit, not a datasheet
    ("RTX 3080 Max-Q", None),
])
def test_dataset_labels_map_to_canonical_gpus(label, canonical):
    assert datasets.canonical_gpu(label) == canonical


def test_gpt2_lm_head_is_dropped_for_superbench_rows_and_berts_map_to_squad():
    layers = [LayerProfile("wte", "Embedding", params=10), LayerProfile("h.0.fc", "Linear", params=5),
              LayerProfile("ln_f", "LayerNorm", params=2), LayerProfile("lm_head", "Linear")]
    p = Profile("gpt2", 8, "fp32", layers, seq_len=128)
    assert [l.name for l in datasets.without_pretraining_head(p, "gpt2").layers] == ["wte", "h.0.fc", "ln_f"]
    assert datasets.without_pretraining_head(p, "resnet50") is p
    # Fine-tuning rows use the zoo's question-answering BERTs, not a pre-training model cut down.
    assert datasets.MODEL_MAP["bert_large_squad"] == ("bert-large-squad", 384)
    assert datasets.SUPERBENCH_MODELS["bert-base"] == "bert-base-squad"


def test_mape():
    assert validation.mape([110, 90], [100, 100]) == pytest.approx(10.0)


# The measurements ship in the repository (data/): these tests run on a fresh clone, never skipped.
DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.slow
def test_shipped_parameters_are_what_fit_models_writes(tmp_path):
    """The fit is reproducible, and the shipped configs/perf files are its current output."""
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, str(root / "scripts" / "fit_models.py"), "--data", str(DATA),
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    for name in ("compute.json", "comm.json"):
        fresh = json.loads((tmp_path / name).read_text())
        shipped = json.loads((root / "configs" / "perf" / name).read_text())
        fresh.pop("fitted_on"), shipped.pop("fitted_on")
        if name == "comm.json":
            # scipy's least squares stops at its tolerance: a class's parameters agree to ~1e-7
            # between machines (BLAS summation order), the barely identified latency of the
            # shared-memory class to ~1e-3; what matters is the all-reduce times they predict.
            assert _same_allreduce_times(fresh, shipped), "configs/perf/comm.json is stale: re-run scripts/fit_models.py"
            fresh.pop("classes"), shipped.pop("classes"), fresh.pop("networks"), shipped.pop("networks")
        # The compute fit is closed-form per iteration: equal up to floating-point summation order.
        assert _same_numbers(fresh, shipped), f"configs/perf/{name} is stale: re-run scripts/fit_models.py"


def _same_allreduce_times(fresh: dict, shipped: dict, rel: float = 1e-4) -> bool:
    """Both parameter sets predict the same all-reduce times (1 KiB - 1 GiB, p50 and p90) on one
    and two nodes of every intra-node link and network."""
    from srift.cluster import NETWORKS, Cluster, NodeGroup
    from srift.hardware import links
    from srift.perf.comm import CommModel, CommParams

    a, b = CommParams.from_dict(fresh), CommParams.from_dict(shipped)
    sizes = 2.0 ** np.arange(10, 31)
    for intra in links():
        for network in NETWORKS:
            for nodes in (1, 2):
                cluster = Cluster("fit", (NodeGroup(nodes, 8, "H100", intra, 100.0, network),))
                for q in (0.5, 0.9):
                    ta, tb = CommModel(cluster, a).allreduce_time_s(sizes, q), CommModel(cluster, b).allreduce_time_s(sizes, q)
                    if not np.allclose(ta, tb, rtol=rel, atol=0.0):
                        return False
    return True


def _same_numbers(a, b, rel: float = 1e-9) -> bool:
    """Equal documents, floats compared to ``rel``."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_numbers(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_numbers(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == pytest.approx(b, rel=rel, abs=1e-300)
    return a == b


def _validate(tmp_path: Path, *flags: str) -> tuple[str, dict, dict]:
    """``scripts/validate.py FLAGS``, writing its figures into a copy of the shipped accuracy.json:
    its stdout, the figures as written and as shipped. (The groups run as separate tests, which
    pytest-xdist spreads over its workers: the whole script is the suite's longest run.)"""
    root = Path(__file__).resolve().parents[1]
    shipped_path = root / "configs" / "perf" / "accuracy.json"
    out = tmp_path / "accuracy.json"
    shutil.copy(shipped_path, out)
    res = subprocess.run([sys.executable, str(root / "scripts" / "validate.py"), "--data", str(DATA), *flags,
                          "--write-accuracy", str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return res.stdout, json.loads(out.read_text()), json.loads(shipped_path.read_text())


STALE = "configs/perf/accuracy.json is stale: re-run scripts/validate.py --write-accuracy"


@pytest.mark.slow
def test_validate_script_prints_every_dense_group_and_the_shipped_figures_are_current(tmp_path):
    stdout, fresh, shipped = _validate(tmp_path, "--only", "dense")
    lines = {l[:28].strip(): l[28:].split() for l in stdout.splitlines() if len(l) > 28}
    # Every group with leave-one-source-out beside the GPU and model held out.
    for group in ("single GPU", "one node, multi-GPU", "all single-node rows"):
        rows, fit, logo, lomo, loso = lines[group]
        assert int(rows) > 0 and all(0.0 < float(v) < 100.0 for v in (fit, logo, lomo, loso)), group
    assert "DDP scaling t_n/t_1" in stdout and "all-reduce p5/block2" in stdout
    for group in ("1 GPU, on another system", "one node, from its 1 GPU", "1 GPU, from another GPU"):
        rows, fit, logo, lomo, loso = lines[group]
        assert int(rows) > 0 and all(0.0 < float(v) < 100.0 for v in (fit, logo, lomo, loso)), group
    assert "in Lambda's two snapshots" in stdout
    # The multi-node group: ddl-benchmarks' 27 rows, DAWNBench's 3, DLPerf's 12 and CSC's 16, with the
    # source and the network left out.
    rows, fit, logo, lomo, loso, lono = lines["multi-node"]
    assert int(rows) == 27 + 3 + 12 + 16 and all(0.0 < float(v) < 100.0 for v in (fit, logo, lomo, loso, lono))
    for net in ("10 GbE TCP", "100 Gb/s InfiniBand", "100 Gb/s TCP (IPoIB)", "EC2 25 Gb/s TCP", "100 Gb/s EDR IB, 8x V100",
                "ddl-benchmarks/mgwfbp", "dawnbench/fastai", "dlperf-v100-ib/dle", "csc-ddp/ml-benchmarks"):
        assert len(lines[net]) == 6, net
    assert "Sharded (FSDP) group" not in stdout  # the other groups run in their own tests
    assert fresh == shipped, STALE


@pytest.mark.slow
def test_validate_script_prints_the_sharded_group_and_its_shipped_figures_are_current(tmp_path):
    stdout, fresh, shipped = _validate(tmp_path, "--only", "sharded")
    assert "LOSO" in stdout.split("Sharded (FSDP) group")[1].splitlines()[2]
    assert fresh == shipped, STALE


@pytest.mark.slow
@pytest.mark.parametrize("flags", [("--only", "finetune"), ("--only", "layouts"), ("--moe-only",)], ids=lambda f: f[-1])
def test_validate_script_prints_the_other_groups_and_their_shipped_figures_are_current(tmp_path, flags):
    stdout, fresh, shipped = _validate(tmp_path, *flags)
    assert {"finetune": "Fine-tuning group:", "layouts": "Layout group:", "--moe-only": "MoE group"}[flags[-1]] in stdout
    assert fresh == shipped, STALE


def test_same_gpu_repeats_compare_each_system_with_the_others():
    base = {"gpu": "H100", "n_gpus": 1, "model": "m", "precision": "amp", "batch_per_gpu": 8, "source": "s"}
    rows = pd.DataFrame([{**base, "label": "host a", "iteration_time_s": 1.0},
                         {**base, "label": "host b", "iteration_time_s": 1.2},
                         {**base, "label": "host c", "iteration_time_s": 1.4},
                         # another batch: no twin, left out
                         {**base, "batch_per_gpu": 16, "label": "host a", "iteration_time_s": 2.0},
                         # a rerun on the same host is not another system
                         {**base, "gpu": "A10", "label": "host d", "iteration_time_s": 1.0},
                         {**base, "gpu": "A10", "label": "host d", "iteration_time_s": 1.1},
                         # 8 GPUs of host a: not a twin of the others' single GPU
                         {**base, "n_gpus": 8, "label": "host a", "iteration_time_s": 1.3}])
    rep = validation.same_gpu_repeats(rows)
    assert list(rep.index) == [0, 1, 2]
    assert rep["others_s"].tolist() == pytest.approx([1.3, 1.2, 1.1])
    # MAPE: |1.3-1|/1, 0, |1.1-1.4|/1.4
    assert validation.mape(rep["others_s"], rep["iteration_time_s"]) == pytest.approx((30.0 + 0.0 + 0.3 / 1.4 * 100) / 3)
    assert validation.same_gpu_repeats(rows.iloc[3:]).empty
    eight = rows.iloc[[6]].assign(label="host e", iteration_time_s=1.5)
    assert validation.same_gpu_repeats(pd.concat([rows, eight]))["others_s"].tolist()[-2:] == pytest.approx([1.5, 1.3])


def _anchor_rows(meas: dict, lomo: dict, pred: dict) -> pd.DataFrame:
    rows = [{"source": "s", "model": m, "gpu": g, "precision": "tf32", "iteration_time_s": meas[m, g],
             "lomo": lomo[m, g], "pred": pred[m, g]} for (m, g) in meas]
    return pd.DataFrame(rows)


GPUS3 = ("V100-16GB", "A100-40GB", "H100")


def test_anchor_pairs_are_ordered_pairs_of_one_model_and_source():
    meas = {(m, g): 1.0 for m in ("a", "b") for g in GPUS3}
    rows = _anchor_rows(meas, meas, meas)
    pairs = compute_fit.anchor_pairs(rows, "lomo")
    assert len(pairs) == 2 * 3 * 2  # per model, 3 anchors x 2 other GPUs
    # a repeated run of one configuration counts once (median)
    extra = rows.iloc[[0]].assign(iteration_time_s=3.0)
    assert len(compute_fit.anchor_pairs(pd.concat([rows, extra], ignore_index=True), "lomo")) == 12


def test_fit_anchor_ignores_gpu_quirks_and_carries_the_jobs_own_departure():
    truth = {(m, g): 1.0 + 0.1 * i + 0.3 * j for i, m in enumerate(("a", "b")) for j, g in enumerate(GPUS3)}
    gpu_quirk = dict(zip(GPUS3, (1.15, 0.87, 1.0)))
    model_miss = {"a": 1.12, "b": 0.9}
    # The model's in-fit error on single GPUs is +-20 %: the clip sits at its 95th percentile.
    pred = {k: t / (1.2 if k[1] == "V100-16GB" else 0.85 if k[1] == "H100" else 1.0) for k, t in truth.items()}
    # Only the GPU departs from the model: the anchor says nothing about another GPU.
    w, clip, info = compute_fit.fit_anchor(_anchor_rows(truth, {k: t / gpu_quirk[k[1]] for k, t in truth.items()}, pred), "pred", "lomo")
    assert w == 0.0
    assert clip == pytest.approx(np.quantile(np.abs(np.log([1.2, 1.2, 0.85, 0.85, 1.0, 1.0])), 0.95))
    assert info["mape_pct"]["fitted"] == info["mape_pct"]["none"] < info["mape_pct"]["full"]
    # Only the job departs from the model (the same on every GPU): carry all of it.
    w, _, info = compute_fit.fit_anchor(_anchor_rows(truth, {k: t / model_miss[k[0]] for k, t in truth.items()}, pred), "pred", "lomo")
    assert w == 1.0
    assert info["mape_pct"]["fitted"] == pytest.approx(0.0, abs=1e-9)


def test_dawnbench_iteration_time_from_the_224px_epochs(tmp_path):
    base = tmp_path / "dawnbench" / "ImageNet" / "train"
    base.mkdir(parents=True)
    entry = {"misc": {"batchSize": [{"batch_size": 4096, "epochs": 2}, {"batch_size": 8192, "epochs": 4}],
                      "imageSize": [{"image_size": 128, "epochs": 2}, {"image_size": 224, "epochs": 4}]}}
    (base / "fastai_resnet50_p3_2_machine_pytorch.json").write_text(json.dumps(entry))
    # epoch seconds: 36, 36, 108 (first at 224 px: dropped), 36, 36, 37.8
    hours = np.cumsum([36, 36, 108, 36, 36, 37.8]) / 3600.0
    (base / "fastai_resnet50_p3_2_machine_pytorch.tsv").write_text(
        "epoch\thours\ttop1Accuracy\ttop5Accuracy\n" + "".join(f"{i}\t{h:.8f}\t0\t0\n" for i, h in enumerate(hours)))
    # a run with no 224-px epochs has nothing the zoo's ResNet-50 matches: skipped
    small = {"misc": {"batchSize": [{"batch_size": 4096, "epochs": 2}], "imageSize": [{"image_size": 128, "epochs": 2}]}}
    (base / "fastai_resnet50_p3_4_machine_pytorch.json").write_text(json.dumps(small))
    (base / "fastai_resnet50_p3_4_machine_pytorch.tsv").write_text("epoch\thours\n0\t0.01\n1\t0.02\n")
    rows = datasets.load_dawnbench_multinode(tmp_path)
    assert len(rows) == 1
    r = rows.iloc[0]
    assert (r.nodes, r.n_gpus, r.batch_per_gpu, r.instance, r.gpu, r.epochs_used) == (2, 16, 512, "p3.16xlarge", "V100-16GB", 3)
    # median of 36, 36, 37.8 s per epoch x 8192 images per iteration / 1,281,167 images per epoch
    assert r.iteration_time_s == pytest.approx(36.0 * 8192 / 1_281_167, rel=1e-6)


def test_lambda_rows_join_the_two_spellings_of_a_system(tmp_path):
    # The throughput file says "2x RTX Quadro 8000" where the batch-size file says "2x Quadro RTX 8000".
    base = tmp_path / "lambda-deeplearning-benchmark"
    cols = "name_gpu,num_gpu,watt,price,resnet50,bert_base_squad,bert_large_squad\n"
    for snap in ("head", "2022-07"):
        (base / snap).mkdir(parents=True)
        for prec in ("fp32", "fp16"):
            (base / snap / f"pytorch-train-throughput-{prec}.csv").write_text(
                cols + ("2x RTX Quadro 8000,2.0,520.0,13800.0,400.0,0,0\n" if snap == "2022-07" and prec == "fp32" else ""))
            (base / snap / f"pytorch-train-bs-{prec}.csv").write_text(
                cols + ("2x Quadro RTX 8000,2,520,13800,200,0,0\n" if snap == "2022-07" and prec == "fp32" else ""))
    rows = datasets.load_lambda(tmp_path)
    assert len(rows) == 1
    r = rows.iloc[0]
    # 200 images over 2 GPUs at 400 images/s: 100 per GPU, 0.5 s per iteration, 260 W per GPU
    assert (r.gpu, r.n_gpus, r.batch_per_gpu, r.iteration_time_s, r.watt_per_gpu) == ("Quadro-RTX-8000", 2, 100, 0.5, 260.0)


def test_held_out_fits_use_the_features_they_are_given():
    profiles = datasets.ProfileSource(lambda model, batch, seq: _toy_model(1.0 if model == "a" else 2.0))
    rows = pd.DataFrame([{"model": m, "gpu": g, "precision": "tf32", "batch_per_gpu": 32, "seq_len": None,
                          "iteration_time_s": t} for m, t0 in (("a", 0.1), ("b", 0.2))
                         for g, t in (("V100-16GB", t0), ("A100-40GB", t0 / 2), ("H100", t0 / 4))])
    fits = compute_fit.held_out_fits(rows, profiles, "model", FEATURES)
    assert set(fits) == {"a", "b"} and all(p.features == FEATURES for p in fits.values())
    assert all(len(p.inv_eff_mem) == len(FEATURES) for p in fits.values())
