"""`srift predict`: one job on one cluster."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift import api
from srift.commands.options import check_format
from srift.job import KFAC_STRATEGIES, OPTIMIZERS, PRECISIONS, Job
from srift.errors import one_of
from srift.report import predict_view


def predict(
    model: Optional[str] = typer.Option(None, "--model", help="Built-in model (resnet50, bert-base, gpt2, ...)."),
    profile: Optional[List[str]] = typer.Option(None, "--profile", help="Profile file from `srift profile`; repeat it with the same job measured on other GPUs (each GPU type then uses its own)."),
    instance: Optional[str] = typer.Option(None, "--instance", help="TYPE[:COUNT] joined by + (p3.16xlarge:2, g5.xlarge:4+p3.2xlarge:2)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster YAML file."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-GPU batch (of the fastest GPU in a mix)."),
    global_batch_size: Optional[int] = typer.Option(None, "--global-batch-size", help="Fix the global batch instead."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length (sequence models)."),
    precision: Optional[str] = typer.Option(None, "--precision", help=f"{one_of(PRECISIONS)} (default: the profile's)."),
    spot: bool = typer.Option(False, "--spot", help="Price the instances at spot and include interruptions."),
    optimizer: str = typer.Option("sgd", "--optimizer", help=f"{one_of(OPTIMIZERS)} (sgd: any first-order optimizer)."),
    kfac_strategy: str = typer.Option("spd", "--kfac-strategy", help=f"{one_of(KFAC_STRATEGIES)}."),
    kfac_factor_steps: int = typer.Option(1, "--kfac-factor-steps", help="K-FAC factor update interval."),
    kfac_inv_steps: int = typer.Option(1, "--kfac-inv-steps", help="K-FAC inverse update interval."),
    region: str = typer.Option("us-east-1", "--region", help="AWS region of the catalog."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """Predict iteration time, throughput and cost of a job on a cluster."""
    check_format(fmt)
    job = Job(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
              global_batch_size=global_batch_size, kfac_strategy=kfac_strategy,
              kfac_factor_steps=kfac_factor_steps, kfac_inv_steps=kfac_inv_steps)
    result = api.predict(job, model=model, profiles=profile, instance=instance, cluster_file=cluster, region=region, spot=spot)
    predict_view.show(result, fmt)
