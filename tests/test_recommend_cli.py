"""`srift recommend` end to end: the README command, exit codes, formats, plot."""

import json

import pytest

from srift.cli import main
from no_torch import run_without_torch


def test_readme_command_without_torch(tmp_path):
    out = run_without_torch(["recommend", "--model", "resnet50", "--budget", "20", "--format", "json"], tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["considered"] >= 1000
    first = data["recommendations"][0]
    assert first["cost_per_hour_usd"] <= 20.0
    for key in ("instance", "spot", "gpus", "throughput_samples_per_s", "iteration_time_s", "cost_per_hour_usd",
                "usd_per_million_samples"):
        assert key in first
    tps = [r["expected_throughput_samples_per_s"] for r in data["recommendations"]]
    assert tps == sorted(tps, reverse=True)


def test_table_has_target_and_chosen(capsys):
    assert main(["recommend", "--model", "resnet50", "--budget", "20"]) == 0
    out = capsys.readouterr().out
    assert "Target: maximizing throughput under $20.00/h" in out and "CHOSEN" in out and "wins" in out


def test_spot_mixed_returns_spot_options(capsys):
    assert main(["recommend", "--model", "resnet50", "--budget", "20", "--spot", "--mixed", "--format", "json", "--top", "20"]) == 0
    recs = json.loads(capsys.readouterr().out)["recommendations"]
    assert any(r["spot"] for r in recs)


def test_deadline_job_cost(capsys):
    assert main(["recommend", "--model", "bert-base", "--deadline", "10", "--steps", "20000", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "minimizing job cost within 10 h" in out and "| rank |" in out and "job $" in out


def test_impossible_budget_exits_1_with_closest(capsys):
    assert main(["recommend", "--model", "resnet50", "--budget", "0.05"]) == 1
    err = capsys.readouterr().err
    assert "no configuration meets the budget of $0.05/h" in err and "Closest:" in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--model", "resnet5000", "--budget", "20"], "unknown model"),
    (["--model", "resnet50", "--gpu", "Z9000"], "unknown GPU"),
    (["--model", "resnet50", "--deadline", "3"], "needs the job's length"),
    (["--model", "resnet50", "--format", "yaml"], "unknown format"),
])
def test_bad_flags_exit_2(args, message, capsys):
    assert main(["recommend", *args]) == 2
    assert message in capsys.readouterr().err


def test_gpu_filter(capsys):
    assert main(["recommend", "--model", "resnet50", "--gpu", "V100", "--max-gpus", "16", "--format", "json"]) == 0
    recs = json.loads(capsys.readouterr().out)["recommendations"]
    assert recs and all(r["instance"].startswith(("p3.", "p3dn.")) for r in recs)
    assert all(r["gpus"] <= 16 for r in recs)


@pytest.mark.slow
def test_plot_writes_png(tmp_path, capsys):
    png = tmp_path / "plot.png"
    assert main(["recommend", "--model", "resnet50", "--budget", "20", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
