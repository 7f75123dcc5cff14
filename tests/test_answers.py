"""Answers an infrastructure engineer acts on (issue #34): marked prices, bf16 where the hardware
has it, gradient accumulation within a fixed global batch, and predictions beyond the validation."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from srift.catalog.instances import FLAG_ON_DEMAND_REBASED, FLAG_SUSPECT_PRICE
from srift.catalog.provenance import price_provenance
from no_torch import run_without_torch
from srift.cli import main
from srift.perf.accuracy import sharded_typical_error
from srift.zoo.hf_config import hf_config_profile
from srift.job import Job
from srift.report.recommend_view import _notes, _rows, candidate_json, why
from srift.results import RecommendResult
from srift.search import search
from srift.search.limits import Constraints
from srift.testing import SpeedModel, instance

ROOT = Path(__file__).resolve().parents[1]
ERRORS = {"gpu": 10.0, "node": 15.0, "nodes": 30.0}


def _result(found, c: Constraints) -> RecommendResult:
    return RecommendResult(found, c, Job(), "m", "fp32", 10, None, "aws")


def test_no_estimated_or_suspect_price_reaches_a_row_json_or_why_unmarked():
    """A suspect price wins (the only GPU under the budget), another row's on-demand price is an
    estimate (rebased): each is marked ~ in its table row, flagged in JSON with its source, said in
    the why-sentence, and the legend says why; the unmarked row stays unmarked."""
    suspect = dataclasses.replace(instance("s.quad", "GB", 4, 3.5, None), flags=(FLAG_SUSPECT_PRICE,))
    rebased = dataclasses.replace(instance("r.one", "GA", 1, 1.0, None), flags=(FLAG_ON_DEMAND_REBASED,), as_of="")
    plain = instance("p.one", "GC", 1, 0.5, None)
    c = Constraints(max_gpus=4, top=5)
    found = search([suspect, rebased, plain], SpeedModel({"GA": 100.0, "GB": 120.0, "GC": 30.0}, typical_error_pct=ERRORS), c)
    res = _result(found, c)
    head, rows = _rows(res)
    price_col = head.index("$/h")
    by = {r[1]: r for r in rows}
    assert by["s.quad:1"][price_col] == "~$3.50" and by["r.one:4"][price_col] == "~$4.00"
    assert by["p.one:4"][price_col] == "$2.00"
    docs = {d["instance"]: d for d in (candidate_json(x, i + 1) for i, x in enumerate(found.recommendations))}
    assert docs["s.quad:1"]["price_suspect"] and not docs["s.quad:1"]["price_estimated"]
    assert docs["r.one:4"]["price_estimated"] and docs["r.one:4"]["price_source"] == "undated snapshot price (test)"
    assert not docs["p.one:4"]["price_estimated"] and docs["p.one:4"]["price_source"] == "list price 2026-01-01 (test)"
    assert found.recommendations[0].instance == "s.quad:1"
    assert "at ~$3.50/h" in why(found) and "Its price (~$3.50/h) is suspect" in why(found)
    legend = [n for n in _notes(res) if n.startswith("~ marks")]
    assert len(legend) == 1 and "suspect-price" in legend[0] and "rebased" in legend[0]
    # Every $ figure of a marked row carries the mark (none slips through unmarked).
    for row in rows:
        marked = row[1] in ("s.quad:1", "r.one:4")
        assert all(cell.startswith("~") == marked for cell in row if "$" in cell)


def test_spot_provenance_says_snapshot_and_undated():
    """A bundled spot price is a snapshot without a date: not an estimate, but the why-sentence of
    a spot winner says so (spot is a market)."""
    g = instance("g.one", "GA", 1, 1.0, 0.3)
    p = price_provenance(g, spot=True)
    assert p.source == "undated spot snapshot (test)" and not p.marked
    found = search([g], SpeedModel({"GA": 100.0}, typical_error_pct=ERRORS), Constraints(max_gpus=1, spot=True, objective="cost"))
    assert found.recommendations[0].spot
    assert "Its spot price ($0.30/h) is from an undated spot snapshot (test): spot prices move" in why(found)


def test_bf16_on_a_gpu_without_bf16_tensor_cores_is_refused_with_the_fix(capsys):
    assert main(["recommend", "--model", "resnet50", "--precision", "bf16", "--gpu", "T4", "--budget", "20"]) == 2
    err = capsys.readouterr().err
    assert "Error: T4, T4G have no bf16 tensor cores" in err and "To fix: use --precision amp" in err


def test_fp16_is_taken_as_amp():
    assert Job(precision="fp16").precision == "amp"


def test_decoder_llms_default_to_bf16_where_the_gpu_has_it(capsys):
    """Llama 3.2 1B: bf16 on A100 (p4d), fp16 AMP on T4 (g4dn, no bf16 tensor cores)."""
    cfg = str(ROOT / "tests" / "fixtures" / "hf_configs" / "Llama-3.2-1B.json")
    args = ["predict", "--model-config", cfg, "--seq-len", "1024", "--batch-size", "1", "--format", "json"]
    assert main([*args, "--instance", "p4d.24xlarge:1"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"] == "bf16"
    assert main([*args, "--instance", "g4dn.12xlarge:1"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"] == "amp"


@pytest.mark.slow
def test_the_llm_deadline_example_finds_the_accumulation_plan(capsys):
    """With a fixed global batch of 512 sequences, srift searches 1, 2, 4 and 8 micro-batches per
    step and keeps the cheapest plan at 90 % confidence: one with more than one micro-batch (the
    per-step overhead is shared), no dearer than any fixed --grad-accum. (FSDP: without a
    data-parallel flavour, recommend lays a decoder LLM out as Megatron layouts instead.)"""
    args = ["recommend", "--model", "llama3-70b", "--seq-len", "4096", "--deadline", "72", "--epochs", "1",
            "--dataset-size", "244141", "--global-batch-size", "512", "--parallelism", "fsdp", "--format", "json"]
    assert main(args) == 0
    searched = json.loads(capsys.readouterr().out)["recommendations"][0]
    # 1 was among the choices and lost: an accumulation plan is chosen; no fixed choice beats it.
    assert searched["grad_accum"] in (2, 4, 8)
    for n in (2, 4, 8):
        assert main([*args, "--grad-accum", str(n)]) == 0
        fixed = json.loads(capsys.readouterr().out)["recommendations"][0]
        assert fixed["grad_accum"] == n and searched["job_cost_usd_p90"] <= fixed["job_cost_usd_p90"] * (1 + 1e-9)


def test_the_405b_example_says_it_is_beyond_validated(capsys):
    """Llama 3.1 405B (config.json) on 185 p6-b200 (1,480 B200): the sharded group measured MPT 125M
    to "70B" (64.9B parameters) on 8-512 A100/H100, so the figure widens by sqrt(405.9/64.9) x
    sqrt(1480/512) and says so."""
    cfg = ROOT / "tests" / "fixtures" / "hf_configs" / "Llama-3.1-405B.json"
    assert main(["predict", "--model-config", str(cfg), "--instance", "p6-b200.48xlarge:185", "--seq-len", "8192",
                 "--batch-size", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    beyond = doc["beyond_validated"]
    assert beyond[:2] == ["406B > 65B", "1,480 GPUs > 512"] and beyond[2].startswith("B200 not among")
    params = hf_config_profile(str(cfg), precision="bf16").params
    base, _ = sharded_typical_error()
    assert doc["typical_error_pct"] == pytest.approx(base * math.sqrt(params / 64862437376) * math.sqrt(1480 / 512))


def test_the_validated_ranges_are_the_measured_ones():
    """configs/perf/coverage.yaml's sharded ranges are the llm-foundry rows of data/llm-training-throughput."""
    import csv

    from srift.perf.coverage import coverage_config

    g = coverage_config()["groups"]["sharded"]
    with open(ROOT / "data" / "llm-training-throughput" / "llm-training-throughput.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if "llm-foundry" in r["framework"]]
    params = [float(r["n_params"]) for r in rows]
    gpus = [int(r["n_gpus"]) for r in rows]
    assert g["params"] == [min(params), max(params)] and g["gpus"] == [min(gpus), max(gpus)]
    names = {"a100_40gb": "A100-40GB", "a100_80gb": "A100-80GB", "h100_80gb": "H100"}
    assert sorted(g["gpu_types"]) == sorted(names[r["gpu_type"]] for r in {r["gpu_type"]: r for r in rows}.values())


CORE_ONLY = ("torch", "pandas", "sklearn", "scipy", "boto3", "botocore", "matplotlib")


def test_the_core_install_is_typer_rich_pyyaml_numpy():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert [re.split(r"[<>=]", d)[0] for d in project["dependencies"]] == ["typer", "rich", "pyyaml", "numpy"]
    extras = {k: [re.split(r"[<>=]", d)[0] for d in v] for k, v in project["optional-dependencies"].items()}
    assert extras["fit"] == ["pandas", "scikit-learn", "scipy"] and extras["aws"] == ["boto3"]
    assert {"pandas", "scikit-learn", "boto3", "torch"} <= set(extras["test"])


@pytest.mark.slow
def test_predict_and_check_run_without_the_fit_and_aws_extras(tmp_path):
    out = run_without_torch(["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2", "--format", "json"],
                            tmp_path, blocked=CORE_ONLY)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is True


@pytest.mark.slow
def test_recommend_runs_without_the_fit_and_aws_extras(tmp_path):
    out = run_without_torch(["recommend", "--model", "resnet50", "--budget", "20", "--format", "json"], tmp_path,
                            blocked=CORE_ONLY)
    assert out.returncode == 0, out.stderr


def test_fitting_without_its_extra_says_how_to_get_it():
    import os
    import subprocess
    import sys

    # pandas made invisible to find_spec, as an uninstalled package is.
    code = ("import importlib.util, sys; real = importlib.util.find_spec; "
            "importlib.util.find_spec = lambda n, *a: None if n == 'pandas' else real(n, *a); import srift.fitting")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert res.returncode == 2
    assert res.stderr.splitlines() == ["Error: srift.fitting needs pandas, which a core install leaves out.",
                                       "To fix: pip install -e '.[fit]' (or '.[test]'), then run it again."]


@pytest.mark.slow
def test_the_global_batch_is_kept_within_its_limit_and_says_so(capsys):
    """--max-global-batch 256 at ResNet-50's 64 per GPU: at most 4 GPUs in any row, and the note
    says why; the family default (8,192 images, Goyal et al. 2017) is in the JSON."""
    assert main(["recommend", "--model", "resnet50", "--budget", "20", "--max-global-batch", "256", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["recommendations"] and max(r["gpus"] for r in doc["recommendations"]) <= 4
    assert doc["max_global_batch"] == {"samples": 256, "basis": "--max-global-batch"}
    assert ("Global batch kept at most 256 (--max-global-batch): beyond it statistical efficiency falls; at 64 per GPU "
            "that is at most 4 GPUs (--max-global-batch to change).") in doc["notes"]
    assert main(["recommend", "--model", "resnet50", "--budget", "20", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_global_batch"]["samples"] == 8192
