"""`srift check` of a job file without an instance runs recommend's search, and shows its progress
as `recommend` does (the same SearchProgress; --quiet turns it off)."""

from __future__ import annotations

from srift import api
from srift.jobfile import load_jobfile


def test_a_search_without_an_instance_reports_its_progress(tmp_path):
    job = tmp_path / "srift.yaml"
    job.write_text("model: resnet50\nepochs: 1\ndataset_size: 100000\nlimits:\n  max_hours: 10\n")
    calls: list[tuple[int, int]] = []
    api.check(load_jobfile(str(job), {}), progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] >= 1 and all(done <= max(total, done) for done, total in calls)


def test_a_job_file_with_an_instance_runs_no_search(tmp_path):
    job = tmp_path / "srift.yaml"
    job.write_text("model: resnet50\ninstance: p3.2xlarge\nepochs: 1\ndataset_size: 100000\nlimits:\n  max_hours: 10\n")
    calls: list[tuple[int, int]] = []
    api.check(load_jobfile(str(job), {}), progress=lambda done, total: calls.append((done, total)))
    assert calls == []
