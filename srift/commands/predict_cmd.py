"""`srift predict`: one job on one cluster."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift import api
from srift.commands.options import (
    ACTIVATION_CHECKPOINTING, DATA_LOADING_OPT, FINETUNE, FORMAT, FORMATS, LORA_RANK, LORA_TARGETS_OPT, FUSED_LOSS, GLOBAL_BATCH_SIZE, GRAD_ACCUM, KFAC_INVERSE_METHOD, KFAC_STRATEGY,
    MODEL, MODEL_CONFIG, OPTIMIZER, OUT_FILE, PARALLELISM, PRECISION, PROFILES, REDUCE_DTYPE, REGION, SEQ_LEN, SKYPILOT,
    TORCHRUN, check_format,
)
from srift.job import Job
from srift.report import handoff, predict_view


def predict(
    model: Optional[str] = MODEL,
    profile: Optional[List[str]] = PROFILES,
    model_config: Optional[str] = MODEL_CONFIG,
    instance: Optional[str] = typer.Option(None, "--instance", help="TYPE[:COUNT] joined by + (p3.16xlarge:2, g5.xlarge:4+p3.2xlarge:2)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster YAML file."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-GPU batch (of the fastest GPU in a mix)."),
    micro_batch_size: Optional[int] = typer.Option(None, "--micro-batch-size", help="Sequences per GPU per micro-batch; "
                                                   "with --global-batch-size: global / (micro x GPUs) micro-batches per step."),
    global_batch_size: Optional[int] = GLOBAL_BATCH_SIZE,
    seq_len: Optional[int] = SEQ_LEN,
    precision: Optional[str] = PRECISION,
    spot: bool = typer.Option(False, "--spot", help="Price the instances at spot and include interruptions."),
    optimizer: str = OPTIMIZER,
    kfac_strategy: str = KFAC_STRATEGY,
    kfac_inverse_method: str = KFAC_INVERSE_METHOD,
    kfac_factor_steps: int = typer.Option(1, "--kfac-factor-steps", help="K-FAC factor update interval."),
    kfac_inv_steps: int = typer.Option(1, "--kfac-inv-steps", help="K-FAC inverse update interval."),
    parallelism: str = PARALLELISM,
    activation_checkpointing: str = ACTIVATION_CHECKPOINTING,
    grad_accum: int = GRAD_ACCUM,
    reduce_dtype: str = REDUCE_DTYPE,
    fused_loss: bool = FUSED_LOSS,
    data_loading: Optional[str] = DATA_LOADING_OPT,
    finetune: Optional[str] = FINETUNE,
    lora_rank: int = LORA_RANK,
    lora_targets: str = LORA_TARGETS_OPT,
    placement_group: Optional[bool] = typer.Option(None, "--placement-group/--no-placement-group",
                                                   help="EC2 instances in one cluster placement group (TCP: 10 Gb/s per flow "
                                                        "instead of 5). Default: not known, simulated as outside one."),
    infra: Optional[str] = typer.Option(None, "--infra", help="Where to price --instance (default aws/us-east-1); several regions: where each type is cheapest."),
    region: Optional[str] = REGION,
    fmt: str = FORMAT,
    out_file: Optional[str] = OUT_FILE,
    skypilot: Optional[str] = SKYPILOT,
    torchrun: bool = TORCHRUN,
) -> None:
    """Predict iteration time, throughput and cost of a job on a cluster."""
    check_format(fmt, FORMATS)
    job = Job(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
              global_batch_size=global_batch_size, kfac_strategy=kfac_strategy, kfac_inverse_method=kfac_inverse_method,
              kfac_factor_steps=kfac_factor_steps, kfac_inv_steps=kfac_inv_steps, parallelism=parallelism,
              activation_checkpointing=activation_checkpointing, grad_accum=grad_accum, reduce_dtype=reduce_dtype,
              fused_loss=fused_loss, data_loading=data_loading, finetune=finetune, lora_rank=lora_rank,
              lora_targets=lora_targets)
    where = api.resolve_infra(infra, region, "aws/us-east-1")
    result = api.predict(job, model=model, profiles=profile, instance=instance, cluster_file=cluster, region=where, spot=spot,
                         model_config=model_config, placement_group=placement_group, micro_batch_size=micro_batch_size)
    plan = None
    if skypilot or torchrun:  # refused (a mixed cluster as one SkyPilot task) before anything is printed
        plan = handoff.check(api.launch_plan(result.model, result.prediction, instance, cluster, region=where, spot=spot), skypilot)
    predict_view.show(result, fmt, out_file)
    if plan is not None:
        handoff.hand_off(plan, skypilot, torchrun, fmt)
