"""configs/perf/validation.json is written by several scripts (validate.py's groups, validate_memory.py):
each replaces its own sections and keeps the others', so a group run apart does not erase the rest."""

from __future__ import annotations

import json

import pandas as pd

from srift.fitting.report import Report, merge


def test_a_row_is_the_mape_of_each_prediction_column_and_the_signed_error(tmp_path):
    report = Report("t")
    # predicted 1.1 and 0.9 s against 1.0 s measured: 10 % MAPE, 0 signed; held out 1.2 / 1.0: 10 %, +10.
    report.add("g", "Two Rows", pd.DataFrame({"t": [1.0, 1.0], "pred": [1.1, 0.9], "loso": [1.2, 1.0]}))
    assert report.sections["g"]["two-rows"] == {"rows": 2, "fit": 10.0, "loso": 10.0, "signed_pct": 0.0}


def test_put_keeps_counts_whole_and_rounds_figures():
    report = Report("t")
    report.put("memory", "Lambda", {"runs": 286, "mape": 11.6666, "spread": 13.74})
    assert report.sections["memory"]["lambda"] == {"runs": 286, "mape": 11.7, "spread": 13.7}


def test_writing_replaces_this_runs_sections_and_keeps_the_others(tmp_path):
    target = tmp_path / "validation.json"
    merge(target, {"memory": {"all": {"runs": 746}}, "moe": {"all": {"rows": 50}}})
    report = Report("t")
    report.put("moe", "all", {"rows": 51})
    assert report.write(tmp_path / "accuracy.json") == target  # beside accuracy.json
    sections = json.loads(target.read_text(encoding="utf-8"))["sections"]
    assert sections == {"memory": {"all": {"runs": 746}}, "moe": {"all": {"rows": 51}}}


def test_the_kfac_group_run_apart_writes_its_rows_beside_the_file_and_keeps_the_rest(tmp_path):
    """`validate.py --only kfac --write-accuracy FILE` (docs/kfac.md's table): its per-phase rows go
    into validation.json beside FILE, equal to what configs/perf/validation.json holds (the docs
    quote a fresh run), the file's other sections stay and accuracy.json is not touched."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    merge(tmp_path / "validation.json", {"memory": {"all": {"runs": 746}}})
    accuracy = tmp_path / "accuracy.json"
    accuracy.write_text("{}", encoding="utf-8")
    done = subprocess.run([sys.executable, str(root / "scripts" / "validate.py"), "--only", "kfac", "--write-accuracy",
                           str(accuracy)], cwd=root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    sections = json.loads((tmp_path / "validation.json").read_text(encoding="utf-8"))["sections"]
    shipped = json.loads((root / "configs" / "perf" / "validation.json").read_text(encoding="utf-8"))["sections"]
    assert sections["memory"] == {"all": {"runs": 746}}
    assert set(sections["kfac"]) == {"factors", "inversion", "preconditioning"}
    assert sections["kfac"] == shipped["kfac"]
    assert accuracy.read_text(encoding="utf-8") == "{}"
