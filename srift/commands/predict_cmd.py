"""`srift predict`: one job on one cluster."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift import api
from srift.commands import complete
from srift.commands.options import (
    FORMAT, FORMATS, JOB, MODEL, MODEL_CONFIG, OUT_FILE, PROFILES, REGION, SKYPILOT, TORCHRUN, check_format, takes_job,
)
from srift.errors import SriftError
from srift.job import DEFAULT_INFRA, Job
from srift.report import handoff, predict_view


@takes_job
def predict(
    model: Optional[str] = MODEL,
    profile: Optional[List[str]] = PROFILES,
    model_config: Optional[str] = MODEL_CONFIG,
    instance: Optional[str] = typer.Option(None, "--instance", autocompletion=complete.instances, help="TYPE[:COUNT] joined by + (p3.16xlarge:2, g5.xlarge:4+p3.2xlarge:2): COUNT whole instances, all their GPUs (p5.48xlarge:1 is 8 H100s; fewer GPUs: a cluster file)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster YAML file."),
    job: Job = JOB,
    spot: bool = typer.Option(False, "--spot", help="Price the instances at spot and include interruptions."),
    placement_group: Optional[bool] = typer.Option(None, "--placement-group/--no-placement-group",
                                                   help="EC2 instances in one cluster placement group (TCP: 10 Gb/s per flow "
                                                        "instead of 5). Default: not known, simulated as outside one."),
    infra: Optional[str] = typer.Option(None, "--infra", help=f"Where to price --instance (default {DEFAULT_INFRA}); several regions: where each type is cheapest."),
    region: Optional[str] = REGION,
    fmt: str = FORMAT,
    out_file: Optional[str] = OUT_FILE,
    skypilot: Optional[str] = SKYPILOT,
    torchrun: bool = TORCHRUN,
) -> None:
    """Predict iteration time, throughput and cost of a job on a cluster."""
    check_format(fmt, FORMATS)
    try:
        api.check_outputs({"--out-file": out_file, "--skypilot": skypilot}, inputs=[*(profile or []), cluster, model_config])
        where = api.resolve_infra(infra, region, DEFAULT_INFRA)
        result = api.predict(job, model=model, profiles=profile, instance=instance, cluster_file=cluster, region=where, spot=spot,
                             model_config=model_config, placement_group=placement_group)
    except SriftError as exc:
        if fmt == "json":  # stdout stays one JSON document that says why
            predict_view.show_error(exc)
        raise
    plan = None
    if skypilot or torchrun:  # refused (a mixed cluster as one SkyPilot task) before anything is printed
        plan = handoff.check(api.launch_plan(result.model, result.prediction, instance, cluster, region=where, spot=spot,
                                             fallbacks=result.network_fallbacks), skypilot)
    predict_view.show(result, fmt, out_file)
    if plan is not None:
        handoff.hand_off(plan, skypilot, torchrun, fmt)
