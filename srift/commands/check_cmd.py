"""`srift check`: fail CI when a training job would cost more than allowed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import typer

from srift import api
from srift.commands import complete
from srift.commands.options import FORMATS, JOB_VALUES, check_format, takes_job
from srift.errors import SriftError
from srift.jobfile import load_jobfile
from srift.report import check_view
from srift.report.progress import SearchProgress

DEFAULT_JOB_FILE = "srift.yaml"


@takes_job
def check(
    job_file: Optional[str] = typer.Argument(None, help="Job file (default: srift.yaml in the current folder)."),
    fmt: str = typer.Option("table", "--format", help="table, json or markdown."),
    out_file: Optional[str] = typer.Option(None, "--out-file", help="Also write the JSON result here."),
    compare_to: Optional[str] = typer.Option(None, "--compare-to", help="Baseline JSON from an earlier --out-file."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines on standard error while a job file without an instance is searched."),
    model: Optional[str] = typer.Option(None, "--model", help="Override the job file's model."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Override the job file's profile."),
    instance: Optional[str] = typer.Option(None, "--instance", autocompletion=complete.instances, help="Override the instance spec."),
    job_values: Mapping[str, Any] = JOB_VALUES,
    spot: Optional[bool] = typer.Option(None, "--spot/--no-spot", help="Override spot."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Override limits.max_cost_usd."),
    max_hours: Optional[float] = typer.Option(None, "--max-hours", help="Override limits.max_hours."),
    max_usd_per_hour: Optional[float] = typer.Option(None, "--max-usd-per-hour", help="Override limits.max_usd_per_hour."),
    confidence: Optional[float] = typer.Option(None, "--confidence", help="Override confidence: hours and cost limits are met at this quantile (default 0.9)."),
    infra: Optional[str] = typer.Option(None, "--infra", help="Override infra: where to price the job (aws, aws/us-west-2, gcp,lambda)."),
) -> None:
    """Predict a job's cost and hours and compare them with its limits (exit 0 pass, 1 exceeded, 2 bad input).

    Every flag overrides the job file's key of the same name (--batch-size: batch_size).
    """
    check_format(fmt, FORMATS)
    path = job_file if job_file is not None or not Path(DEFAULT_JOB_FILE).is_file() else DEFAULT_JOB_FILE
    overrides = {"model": model, "profile": profile, "instance": instance, "spot": spot, "max_cost_usd": max_cost,
                 "max_hours": max_hours, "max_usd_per_hour": max_usd_per_hour, "confidence": confidence, "infra": infra,
                 **job_values}
    if path is None and all(v is None for v in overrides.values()):
        raise SriftError("no job file: srift.yaml is not in this folder.", "pass a job file: srift check JOB.yaml.")
    jobfile = load_jobfile(path, overrides)
    api.check_outputs({"--out-file": out_file}, inputs=[path, compare_to, *(jobfile.profiles or [])])
    with SearchProgress(quiet=quiet) as progress:  # a job file without an instance: recommend's search
        result = api.check(jobfile, compare_to=compare_to, progress=progress)
    check_view.show(result, fmt, out_file)
    if not result.passed:
        raise typer.Exit(1)
