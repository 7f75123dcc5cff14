"""`srift predict`: the JSON contract, errors, and no torch on the way."""

import json
from pathlib import Path

import pytest

from srift.cli import main
from srift.search.confidence import sigma_from_mape
from no_torch import run_without_torch

FIELDS = ("iteration_time_s", "p90_iteration_time_s", "throughput_samples_per_s", "cost_per_hour_usd",
          "usd_per_million_samples", "breakdown", "fits_in_memory")


@pytest.mark.slow
def test_issue_example_without_torch(tmp_path):
    out = run_without_torch(["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2", "--batch-size", "128",
                             "--precision", "amp", "--format", "json"], tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in FIELDS:
        assert key in data
    assert data["gpus"] == 16 and data["global_batch_size"] == 16 * 128
    assert data["cost_per_hour_usd"] == pytest.approx(2 * 24.48)
    parts = sum(v for k, v in data["breakdown"].items() if k != "comm_total")
    assert parts == pytest.approx(data["iteration_time_s"])
    assert data["throughput_samples_per_s"] == pytest.approx(2048 / data["iteration_time_s"])
    assert data["usd_per_million_samples"] == pytest.approx(48.96 / (data["throughput_samples_per_s"] * 3600) * 1e6)


def test_table_output_and_spot(capsys):
    assert main(["predict", "--model", "bert-base", "--instance", "g5.xlarge:2", "--spot", "--seq-len", "256"]) == 0
    out = capsys.readouterr().out
    assert "Iteration breakdown" in out and "Spot (expected)" in out


@pytest.mark.parametrize("args, message", [
    (["--instance", "p3.2xlarge"], "exactly one of --model and --profile"),
    (["--model", "resnet50", "--profile", "x.yaml", "--instance", "p3.2xlarge"], "exactly one of --model and --profile"),
    (["--model", "resnet50"], "exactly one of --instance and --cluster"),
    (["--model", "resnet5", "--instance", "p3.2xlarge"], "unknown model"),
    (["--model", "resnet50", "--instance", "p3.2xlarg"], "unknown instance type"),
    (["--model", "resnet50", "--instance", "p3.2xlarge", "--precision", "fp8"], "unknown precision"),
    (["--model", "resnet50", "--instance", "p3.2xlarge", "--batch-size", "0"], "batch-size must be at least 1"),
    (["--model", "resnet50", "--instance", "p3.2xlarge", "--seq-len", "128"], "no sequence length"),
    (["--model", "resnet50", "--cluster", "missing.yaml"], "does not exist"),
])
def test_bad_input_exits_2_with_a_fix(args, message, capsys):
    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "To fix:" in err and "Traceback" not in err


def test_cluster_file(tmp_path, capsys):
    f = tmp_path / "ib.yaml"
    f.write_text("name: ib-64\nnode_groups:\n  - count: 16\n    gpus_per_node: 4\n    gpu: RTX 2080 Ti\n"
                 "    intra_node: pcie3\n    network_gbps: 100\n    network: infiniband\n    usd_per_hour: 2.0\n")
    assert main(["predict", "--model", "resnet50", "--cluster", str(f), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"] == 64 and data["cost_per_hour_usd"] == pytest.approx(32.0)


def test_json_names_its_schema_the_prices_age_and_unsupported_hardware(capsys):
    # p3.16xlarge (V100, compute capability 7.0): the default PyTorch wheel does not run on it, but srift predicts it.
    assert main(["predict", "--model", "resnet50", "--instance", "p3.16xlarge", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "srift.predict/v1" and data["host_arch"] == "x86_64"
    assert data["iteration_time_s"] > 0 and data["catalog_as_of"]["aws/us-east-1"]["as_of"] == "2026-07-20"
    assert any("compute capability 7.0" in n and "needs an older PyTorch build" in n for n in data["notes"])
    # the typical error as a log-normal sigma (srift/search/confidence.py): about 1.25 x the MAPE
    assert data["uncertainty"]["model"] == pytest.approx(sigma_from_mape(data["typical_error_pct"]))
    assert data["uncertainty"]["model"] == pytest.approx(data["typical_error_pct"] / 100 * 1.2533, rel=0.02)
    assert data["uncertainty"]["spot"] == 0.0
    assert main(["predict", "--model", "resnet50", "--instance", "p3.16xlarge"]) == 0
    out = capsys.readouterr().out
    assert "Note: p3.16xlarge: V100-16GB has compute capability 7.0" in out and "Prices: aws/us-east-1 as of 2026-07-20" in out
    # Elsewhere with --infra; arm64 hosts are named.
    assert main(["predict", "--model", "resnet50", "--instance", "gpu_1x_gh200", "--infra", "lambda/us-east-1", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["host_arch"] == "arm64" and any("arm64 host" in n for n in data["notes"])
    ib = Path(__file__).resolve().parents[1] / "configs" / "clusters" / "ib-64.yaml"
    assert main(["predict", "--model", "resnet50", "--cluster", str(ib), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["catalog_as_of"] == {}
