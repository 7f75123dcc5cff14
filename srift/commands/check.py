"""`srift check`: fail CI when a training job would cost more than allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from srift.commands._common import FORMATS, check_format, print_json


def register(app: typer.Typer) -> None:
    @app.command("check")
    def check(
        job_file: Optional[str] = typer.Argument(None, help="Job file (default: srift.yaml in the current folder)."),
        fmt: str = typer.Option("table", "--format", help="table, json or markdown."),
        out_file: Optional[str] = typer.Option(None, "--out-file", help="Also write the JSON result here."),
        compare_to: Optional[str] = typer.Option(None, "--compare-to", help="Baseline JSON from an earlier --out-file."),
        model: Optional[str] = typer.Option(None, "--model", help="Override the job file's model."),
        profile: Optional[str] = typer.Option(None, "--profile", help="Override the job file's profile."),
        instance: Optional[str] = typer.Option(None, "--instance", help="Override the instance spec."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Override the per-GPU batch."),
        steps: Optional[int] = typer.Option(None, "--steps", help="Override the job length."),
        spot: Optional[bool] = typer.Option(None, "--spot/--no-spot", help="Override spot."),
        max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Override limits.max_cost_usd."),
        max_hours: Optional[float] = typer.Option(None, "--max-hours", help="Override limits.max_hours."),
        max_usd_per_hour: Optional[float] = typer.Option(None, "--max-usd-per-hour", help="Override limits.max_usd_per_hour."),
    ) -> None:
        """Predict a job's cost and hours and compare them with its limits (exit 0 pass, 1 exceeded, 2 bad input)."""
        from srift.catalog import load_catalog
        from srift.check import compare, load_baseline, load_job, run_check
        from srift.errors import SriftError
        from srift.files import write_json
        from srift.report import check_markdown, render_check

        check_format(fmt, FORMATS)
        path = job_file
        if path is None and Path("srift.yaml").is_file():
            path = "srift.yaml"
        overrides = {"model": model, "profile": profile, "instance": instance, "batch_size": batch_size, "steps": steps,
                     "spot": spot, "max_cost_usd": max_cost, "max_hours": max_hours, "max_usd_per_hour": max_usd_per_hour}
        if path is None and not any(v is not None for v in overrides.values()):
            raise SriftError("no job file: srift.yaml is not in this folder.", "pass a job file: srift check JOB.yaml.")
        job = load_job(path, overrides)
        base = load_baseline(compare_to) if compare_to else None
        result = run_check(job, catalog_as_of=load_catalog(job.region)[0].as_of)
        if base is not None:
            result["change"] = compare(result, base)
        if out_file:
            write_json(out_file, result)
        if fmt == "json":
            print_json(result)
        elif fmt == "markdown":
            print(check_markdown(result))
        else:
            render_check(result)
        if not result["passed"]:
            raise typer.Exit(1)
