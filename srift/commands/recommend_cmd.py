"""`srift recommend`: search the catalog under a budget or a deadline."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift import api
from srift.commands.options import (
    ACTIVATION_CHECKPOINTING, CONFIDENCE, DATA_LOADING_OPT, FINETUNE, FORMATS, LORA_RANK, LORA_TARGETS_OPT, FUSED_LOSS, GLOBAL_BATCH_SIZE, GRAD_ACCUM, INFRA,
    KFAC_INVERSE_METHOD, KFAC_STRATEGY, MODEL, MODEL_CONFIG, OPTIMIZER, OUT_FILE, PARALLELISM, PRECISION, PROFILES, REDUCE_DTYPE, REGION, SAMPLES,
    SEQ_LEN, SKYPILOT, TOKENS, TORCHRUN, check_format, whole,
)
from srift.errors import one_of
from srift.hardware import matching_gpus
from srift.job import Job, JobLength
from srift.report import handoff, recommend_view
from srift.report.plot import plot_recommend
from srift.report.progress import SearchProgress
from srift.search.limits import MAX_SEARCH_GPUS, OBJECTIVES, Constraints


def recommend(
    model: Optional[str] = MODEL,
    profile: Optional[List[str]] = PROFILES,
    model_config: Optional[str] = MODEL_CONFIG,
    budget: Optional[float] = typer.Option(None, "--budget", help="Whole-cluster budget, USD per hour."),
    deadline: Optional[float] = typer.Option(None, "--deadline", help="Finish within HOURS (needs a job length), at --confidence."),
    epochs: Optional[float] = typer.Option(None, "--epochs", help="Job length in epochs (with --dataset-size)."),
    dataset_size: Optional[int] = typer.Option(None, "--dataset-size", help="Samples per epoch."),
    samples: Optional[float] = SAMPLES,
    tokens: Optional[float] = TOKENS,
    steps: Optional[int] = typer.Option(None, "--steps", help="Job length in iterations (needs --global-batch-size)."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Job cost ceiling, USD, at --confidence."),
    confidence: float = CONFIDENCE,
    objective: Optional[str] = typer.Option(None, "--objective", help=f"{one_of(OBJECTIVES)} (default: cost under a deadline)."),
    spot: bool = typer.Option(False, "--spot/--no-spot", help="Also consider spot instances."),
    mixed: bool = typer.Option(False, "--mixed/--no-mixed", help="Also consider two-type and spot/on-demand mixes."),
    infra: Optional[str] = INFRA,
    region: Optional[str] = REGION,
    gpu: List[str] = typer.Option([], "--gpu", help="Only this GPU (repeatable; A100 means both sizes)."),
    include_unsupported: bool = typer.Option(False, "--include-unsupported", help="Also search GPUs the current PyTorch CUDA wheels do not run on (marked)."),
    max_gpus: int = typer.Option(64, "--max-gpus", help=f"Largest cluster, in GPUs (at most {MAX_SEARCH_GPUS:,})."),
    max_nodes: Optional[int] = typer.Option(None, "--max-nodes", metavar="N",
                                            help="Largest cluster, in instances (multi-node predictions are validated up to 16)."),
    top: int = typer.Option(5, "--top", help="How many configurations to show."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-GPU batch (default: the profile's)."),
    global_batch_size: Optional[int] = GLOBAL_BATCH_SIZE,
    seq_len: Optional[int] = SEQ_LEN,
    precision: Optional[str] = PRECISION,
    optimizer: str = OPTIMIZER,
    kfac_strategy: str = KFAC_STRATEGY,
    kfac_inverse_method: str = KFAC_INVERSE_METHOD,
    parallelism: str = PARALLELISM,
    activation_checkpointing: str = ACTIVATION_CHECKPOINTING,
    grad_accum: int = GRAD_ACCUM,
    reduce_dtype: str = REDUCE_DTYPE,
    fused_loss: bool = FUSED_LOSS,
    data_loading: Optional[str] = DATA_LOADING_OPT,
    finetune: Optional[str] = FINETUNE,
    lora_rank: int = LORA_RANK,
    lora_targets: str = LORA_TARGETS_OPT,
    fmt: str = typer.Option("table", "--format", help="table, json or markdown."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write throughput vs $/h of every configuration to FILE.png."),
    out_file: Optional[str] = OUT_FILE,
    skypilot: Optional[str] = SKYPILOT,
    torchrun: bool = TORCHRUN,
) -> None:
    """Recommend the best cloud GPU configurations for a training job (every AWS region by default; --infra for more)."""
    check_format(fmt, FORMATS)
    job = Job(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
              global_batch_size=global_batch_size, kfac_strategy=kfac_strategy, kfac_inverse_method=kfac_inverse_method,
              length=JobLength.given(steps, epochs, dataset_size, whole(samples, "--samples"), whole(tokens, "--tokens")),
              parallelism=parallelism, activation_checkpointing=activation_checkpointing, grad_accum=grad_accum,
              reduce_dtype=reduce_dtype, fused_loss=fused_loss, data_loading=data_loading, finetune=finetune,
              lora_rank=lora_rank, lora_targets=lora_targets)
    constraints = Constraints(budget_usd_per_hour=budget, deadline_hours=deadline, max_cost_usd=max_cost,
                              objective=objective, spot=spot, mixed=mixed,
                              gpus=frozenset().union(*(matching_gpus(g) for g in gpu)), max_gpus=max_gpus, max_nodes=max_nodes, top=top,
                              confidence=confidence, include_unsupported=include_unsupported)
    where = api.resolve_infra(infra, region, "aws")
    with SearchProgress() as progress:
        result = api.recommend(job, constraints, model=model, profiles=profile, infra=where, model_config=model_config,
                               progress=progress)
    if plot:
        plot_recommend(result, plot)
    failure = api.no_fit_error(result)
    if failure is not None and (fmt == "json" or out_file):
        recommend_view.show(result, fmt, out_file, failure)  # the document says why, then the error line and exit 1
    if failure is not None:
        raise failure
    plan = handoff.check(api.recommended_plan(result), skypilot) if skypilot or torchrun else None
    recommend_view.show(result, fmt, out_file)
    if plan is not None:
        handoff.hand_off(plan, skypilot, torchrun, fmt)
