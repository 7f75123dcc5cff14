"""`srift check`: fail CI when a training job would cost more than allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from srift import api
from srift.commands.options import FORMATS, check_format
from srift.errors import SriftError
from srift.jobfile import load_jobfile
from srift.report import check_view

DEFAULT_JOB_FILE = "srift.yaml"


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
    data_loading: Optional[str] = typer.Option(None, "--data-loading", help="Override data_loading (synthetic, images or tokens)."),
    spot: Optional[bool] = typer.Option(None, "--spot/--no-spot", help="Override spot."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Override limits.max_cost_usd."),
    max_hours: Optional[float] = typer.Option(None, "--max-hours", help="Override limits.max_hours."),
    max_usd_per_hour: Optional[float] = typer.Option(None, "--max-usd-per-hour", help="Override limits.max_usd_per_hour."),
    confidence: Optional[float] = typer.Option(None, "--confidence", help="Override confidence: hours and cost limits are met at this quantile (default 0.9)."),
    infra: Optional[str] = typer.Option(None, "--infra", help="Override infra: where to price the job (aws, aws/us-west-2, gcp,lambda)."),
    parallelism: Optional[str] = typer.Option(None, "--parallelism", help="Override parallelism (ddp, zero2, fsdp, hsdp, auto)."),
    activation_checkpointing: Optional[str] = typer.Option(None, "--activation-checkpointing",
                                                           help="Override activation_checkpointing (none, selective, full, auto)."),
    finetune: Optional[str] = typer.Option(None, "--finetune", help="Override finetune (full, lora, qlora)."),
    lora_rank: Optional[int] = typer.Option(None, "--lora-rank", help="Override lora_rank."),
    lora_targets: Optional[str] = typer.Option(None, "--lora-targets", help="Override lora_targets (qv, attention, all-linear)."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="Override optimizer (sgd, kfac, adamw, adamw8bit, paged-adamw8bit)."),
) -> None:
    """Predict a job's cost and hours and compare them with its limits (exit 0 pass, 1 exceeded, 2 bad input)."""
    check_format(fmt, FORMATS)
    path = job_file if job_file is not None or not Path(DEFAULT_JOB_FILE).is_file() else DEFAULT_JOB_FILE
    overrides = {"model": model, "profile": profile, "instance": instance, "batch_size": batch_size, "steps": steps,
                 "spot": spot, "max_cost_usd": max_cost, "max_hours": max_hours, "max_usd_per_hour": max_usd_per_hour,
                 "confidence": confidence, "infra": infra, "data_loading": data_loading,
                 "parallelism": parallelism, "activation_checkpointing": activation_checkpointing, "finetune": finetune,
                 "lora_rank": lora_rank, "lora_targets": lora_targets, "optimizer": optimizer}
    if path is None and all(v is None for v in overrides.values()):
        raise SriftError("no job file: srift.yaml is not in this folder.", "pass a job file: srift check JOB.yaml.")
    result = api.check(load_jobfile(path, overrides), compare_to=compare_to)
    check_view.show(result, fmt, out_file)
    if not result.passed:
        raise typer.Exit(1)
