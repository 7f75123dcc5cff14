"""`srift recommend`: search the catalog under a budget or a deadline."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift import api
from srift.commands import complete
from srift.commands.options import (
    CONFIDENCE, FORMATS, INFRA, JOB_WITH_LENGTH, MODEL, MODEL_CONFIG, OUT_FILE, PROFILES, REGION, SKYPILOT, TORCHRUN,
    check_format, takes_job,
)
from srift.errors import one_of
from srift.hardware import matching_gpus
from srift.job import Job
from srift.report import handoff, recommend_view
from srift.report.plot import plot_recommend
from srift.report.progress import SearchProgress
from srift.search.limits import DEFAULT_MAX_GPUS, MAX_SEARCH_GPUS, OBJECTIVES, Constraints


@takes_job
def recommend(
    model: Optional[str] = MODEL,
    profile: Optional[List[str]] = PROFILES,
    model_config: Optional[str] = MODEL_CONFIG,
    budget: Optional[float] = typer.Option(None, "--budget", help="Whole-cluster budget, USD per hour."),
    deadline: Optional[float] = typer.Option(None, "--deadline", help="Finish within HOURS (needs a job length), at --confidence."),
    job: Job = JOB_WITH_LENGTH,
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Job cost ceiling, USD, at --confidence."),
    confidence: float = CONFIDENCE,
    objective: Optional[str] = typer.Option(None, "--objective", help=f"{one_of(OBJECTIVES)} (default: cost under a deadline)."),
    spot: bool = typer.Option(False, "--spot/--no-spot", help="Also consider spot instances."),
    mixed: bool = typer.Option(False, "--mixed/--no-mixed", help="Also consider two-type and spot/on-demand mixes."),
    infra: Optional[str] = INFRA,
    region: Optional[str] = REGION,
    gpu: List[str] = typer.Option([], "--gpu", autocompletion=complete.gpus, help="Only this GPU (repeatable; A100 means both sizes)."),
    include_unsupported: bool = typer.Option(False, "--include-unsupported", help="Also search GPUs the current PyTorch CUDA wheels do not run on (marked)."),
    max_gpus: Optional[int] = typer.Option(None, "--max-gpus", metavar="N",
                                           help=f"Largest cluster, in GPUs (at most {MAX_SEARCH_GPUS:,}; default {DEFAULT_MAX_GPUS}, "
                                           "or for a decoder LLM's layouts derived from the deadline and the model)."),
    max_nodes: Optional[int] = typer.Option(None, "--max-nodes", metavar="N",
                                            help="Largest cluster, in instances (multi-node predictions are validated up to 16)."),
    top: int = typer.Option(5, "--top", help="How many configurations to show: the best of each instance family."),
    max_global_batch: Optional[int] = typer.Option(None, "--max-global-batch", metavar="N",
                                                   help="Largest global batch without --global-batch-size (default: the model family's published limit)."),
    diverse: bool = typer.Option(True, "--diverse/--no-diverse", help="One row per instance family (--no-diverse: the next best, any family)."),
    fmt: str = typer.Option("table", "--format", help="table, json or markdown."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write throughput vs $/h of every configuration to FILE.png."),
    out_file: Optional[str] = OUT_FILE,
    skypilot: Optional[str] = SKYPILOT,
    torchrun: bool = TORCHRUN,
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines on standard error during a long search."),
) -> None:
    """Recommend the best cloud GPU configurations for a training job (every AWS region by default; --infra for more)."""
    check_format(fmt, FORMATS)
    api.check_outputs({"--out-file": out_file, "--skypilot": skypilot, "--plot": plot}, inputs=[*(profile or []), model_config])
    constraints = Constraints(budget_usd_per_hour=budget, deadline_hours=deadline, max_cost_usd=max_cost,
                              objective=objective, spot=spot, mixed=mixed,
                              gpus=frozenset().union(*(matching_gpus(g) for g in gpu)), max_gpus=DEFAULT_MAX_GPUS if max_gpus is None else max_gpus,
                              auto_max_gpus=max_gpus is None, max_nodes=max_nodes, top=top,
                              confidence=confidence, include_unsupported=include_unsupported, diverse=diverse,
                              max_global_batch=max_global_batch)
    where = api.resolve_infra(infra, region, "aws")
    with SearchProgress(quiet=quiet) as progress:
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
