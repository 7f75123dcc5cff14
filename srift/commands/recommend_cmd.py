"""`srift recommend`: search the catalog under a budget or a deadline."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift import api
from srift.commands.options import (
    DATA_LOADING_OPT, FORMATS, GLOBAL_BATCH_SIZE, KFAC_STRATEGY, MODEL, MODEL_CONFIG, OPTIMIZER, PRECISION, PROFILES, REGION,
    SEQ_LEN, check_format,
)
from srift.errors import one_of
from srift.hardware import matching_gpus
from srift.job import Job, JobLength
from srift.report import recommend_view
from srift.report.plot import plot_recommend
from srift.search.limits import OBJECTIVES, Constraints


def recommend(
    model: Optional[str] = MODEL,
    profile: Optional[List[str]] = PROFILES,
    model_config: Optional[str] = MODEL_CONFIG,
    budget: Optional[float] = typer.Option(None, "--budget", help="Whole-cluster budget, USD per hour."),
    deadline: Optional[float] = typer.Option(None, "--deadline", help="Finish within HOURS (needs --steps or --epochs)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Job length in iterations."),
    epochs: Optional[float] = typer.Option(None, "--epochs", help="Job length in epochs (with --dataset-size)."),
    dataset_size: Optional[int] = typer.Option(None, "--dataset-size", help="Samples per epoch."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Job cost ceiling, USD."),
    objective: Optional[str] = typer.Option(None, "--objective", help=f"{one_of(OBJECTIVES)} (default: cost under a deadline)."),
    spot: bool = typer.Option(False, "--spot/--no-spot", help="Also consider spot instances."),
    mixed: bool = typer.Option(False, "--mixed/--no-mixed", help="Also consider two-type and spot/on-demand mixes."),
    region: str = REGION,
    gpu: List[str] = typer.Option([], "--gpu", help="Only this GPU (repeatable; A100 means both sizes)."),
    max_gpus: int = typer.Option(64, "--max-gpus", help="Largest cluster, in GPUs."),
    top: int = typer.Option(5, "--top", help="How many configurations to show."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-GPU batch (default: the profile's)."),
    global_batch_size: Optional[int] = GLOBAL_BATCH_SIZE,
    seq_len: Optional[int] = SEQ_LEN,
    precision: Optional[str] = PRECISION,
    optimizer: str = OPTIMIZER,
    kfac_strategy: str = KFAC_STRATEGY,
    data_loading: Optional[str] = DATA_LOADING_OPT,
    fmt: str = typer.Option("table", "--format", help="table, json or markdown."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write throughput vs $/h of every configuration to FILE.png."),
) -> None:
    """Recommend the best EC2 configurations for a training job."""
    check_format(fmt, FORMATS)
    job = Job(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
              global_batch_size=global_batch_size, kfac_strategy=kfac_strategy,
              length=JobLength.given(steps, epochs, dataset_size), data_loading=data_loading)
    constraints = Constraints(budget_usd_per_hour=budget, deadline_hours=deadline, max_cost_usd=max_cost,
                              objective=objective, spot=spot, mixed=mixed,
                              gpus=frozenset().union(*(matching_gpus(g) for g in gpu)), max_gpus=max_gpus, top=top)
    result = api.recommend(job, constraints, model=model, profiles=profile, region=region, model_config=model_config)
    if plot:
        plot_recommend(result, plot)
    failure = api.no_fit_error(result)
    if failure is not None:
        raise failure
    recommend_view.show(result, fmt)
