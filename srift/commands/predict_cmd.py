"""`srift predict`: one job on one cluster."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift import api
from srift.commands.options import (
    DATA_LOADING_OPT, GLOBAL_BATCH_SIZE, KFAC_STRATEGY, MODEL, MODEL_CONFIG, OPTIMIZER, PRECISION, PROFILES, REGION, SEQ_LEN,
    check_format,
)
from srift.job import Job
from srift.report import predict_view


def predict(
    model: Optional[str] = MODEL,
    profile: Optional[List[str]] = PROFILES,
    model_config: Optional[str] = MODEL_CONFIG,
    instance: Optional[str] = typer.Option(None, "--instance", help="TYPE[:COUNT] joined by + (p3.16xlarge:2, g5.xlarge:4+p3.2xlarge:2)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster YAML file."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-GPU batch (of the fastest GPU in a mix)."),
    global_batch_size: Optional[int] = GLOBAL_BATCH_SIZE,
    seq_len: Optional[int] = SEQ_LEN,
    precision: Optional[str] = PRECISION,
    spot: bool = typer.Option(False, "--spot", help="Price the instances at spot and include interruptions."),
    optimizer: str = OPTIMIZER,
    kfac_strategy: str = KFAC_STRATEGY,
    kfac_factor_steps: int = typer.Option(1, "--kfac-factor-steps", help="K-FAC factor update interval."),
    kfac_inv_steps: int = typer.Option(1, "--kfac-inv-steps", help="K-FAC inverse update interval."),
    region: str = REGION,
    data_loading: Optional[str] = DATA_LOADING_OPT,
    placement_group: Optional[bool] = typer.Option(None, "--placement-group/--no-placement-group",
                                                   help="EC2 instances in one cluster placement group (TCP: 10 Gb/s per flow "
                                                        "instead of 5). Default: not known, simulated as outside one."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """Predict iteration time, throughput and cost of a job on a cluster."""
    check_format(fmt)
    job = Job(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
              global_batch_size=global_batch_size, kfac_strategy=kfac_strategy,
              kfac_factor_steps=kfac_factor_steps, kfac_inv_steps=kfac_inv_steps, data_loading=data_loading)
    result = api.predict(job, model=model, profiles=profile, instance=instance, cluster_file=cluster, region=region, spot=spot,
                         model_config=model_config, placement_group=placement_group)
    predict_view.show(result, fmt)
