"""`srift recommend`: search the catalog under a budget or a deadline."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift.commands._common import FORMATS, check_format, print_json


def register(app: typer.Typer) -> None:
    @app.command("recommend")
    def recommend(
        model: Optional[str] = typer.Option(None, "--model", help="Built-in model (resnet50, bert-base, gpt2, ...)."),
        profile: Optional[List[str]] = typer.Option(None, "--profile", help="Profile file from `srift profile`; repeat it with the same job measured on other GPUs (each GPU type then uses its own)."),
        model_config: Optional[str] = typer.Option(None, "--model-config", help="A Hugging Face decoder config.json (Llama, Mistral, Qwen2): predict that model without its weights."),
        budget: Optional[float] = typer.Option(None, "--budget", help="Whole-cluster budget, USD per hour."),
        deadline: Optional[float] = typer.Option(None, "--deadline", help="Finish within HOURS (needs --steps or --epochs)."),
        steps: Optional[int] = typer.Option(None, "--steps", help="Job length in iterations."),
        epochs: Optional[float] = typer.Option(None, "--epochs", help="Job length in epochs (with --dataset-size)."),
        dataset_size: Optional[int] = typer.Option(None, "--dataset-size", help="Samples per epoch."),
        max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Job cost ceiling, USD."),
        objective: Optional[str] = typer.Option(None, "--objective", help="throughput or cost (default: cost under a deadline)."),
        spot: bool = typer.Option(False, "--spot/--no-spot", help="Also consider spot instances."),
        mixed: bool = typer.Option(False, "--mixed/--no-mixed", help="Also consider two-type and spot/on-demand mixes."),
        region: str = typer.Option("us-east-1", "--region", help="AWS region."),
        gpu: List[str] = typer.Option([], "--gpu", help="Only this GPU (repeatable; A100 means both sizes)."),
        max_gpus: int = typer.Option(64, "--max-gpus", help="Largest cluster, in GPUs."),
        top: int = typer.Option(5, "--top", help="How many configurations to show."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-GPU batch (default: the profile's)."),
        global_batch_size: Optional[int] = typer.Option(None, "--global-batch-size", help="Fix the global batch across configurations."),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length (sequence models)."),
        precision: Optional[str] = typer.Option(None, "--precision", help="fp32, tf32 or amp."),
        optimizer: str = typer.Option("sgd", "--optimizer", help="sgd or kfac."),
        kfac_strategy: str = typer.Option("spd", "--kfac-strategy", help="naive, mpd or spd."),
        fmt: str = typer.Option("table", "--format", help="table, json or markdown."),
        plot: Optional[str] = typer.Option(None, "--plot", help="Write throughput vs $/h of every configuration to FILE.png."),
    ) -> None:
        """Recommend the best EC2 configurations for a training job."""
        from srift.errors import SriftError
        from srift.hardware import matching_gpus
        from srift.job import Job
        from srift.recommend import recommend as run
        from srift.report import plot_recommend, recommend_json, recommend_markdown, render_recommend, usd
        from srift.search import Constraints
        from srift.sources import resolve_profiles

        check_format(fmt, FORMATS)
        job = Job(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
                  global_batch_size=global_batch_size, kfac_strategy=kfac_strategy)
        wanted = frozenset().union(*(matching_gpus(g) for g in gpu)) if gpu else frozenset()
        cons = Constraints(budget_usd_per_hour=budget, deadline_hours=deadline, max_cost_usd=max_cost, steps=steps,
                           epochs=epochs, dataset_size=dataset_size, objective=objective, spot=spot, mixed=mixed,
                           gpus=wanted, max_gpus=max_gpus, top=top)
        prof, more = resolve_profiles(model, profile, model_config)
        result = run(prof, job, cons, region, more)
        header = (f"{prof.name}, {job.precision or prof.precision}, batch {job.batch_size or prof.batch_size}/GPU"
                  + (f", seq {job.seq_len or prof.seq_len}" if prof.seq_len else "") + (f", K-FAC ({kfac_strategy})" if optimizer == "kfac" else "") + f", {region}")
        if plot:
            plot_recommend(result, plot, header)
        if not result.recommendations:
            closest = result.closest
            near = ""
            if closest is not None:
                near = f" Closest: {closest.label} at {usd(closest.cost_per_hour_usd)}/h"
                if closest.job_hours is not None:
                    near += f", {closest.job_hours:,.1f} h, {usd(closest.job_cost_usd)}"
                near += "."
            what = {"budget": f"the budget of {usd(budget)}/h", "deadline": f"the deadline of {deadline:g} h" if deadline else "the deadline",
                    "max-cost": f"the maximum cost of {usd(max_cost)}" if max_cost else "the maximum cost",
                    "memory": "GPU memory (the job fits on no GPU at this batch size)"}[result.cut_by or "budget"]
            hint = ("lower --batch-size, use --precision amp, or allow larger GPUs." if result.cut_by == "memory"
                    else "relax that limit.")
            raise SriftError(f"no configuration meets {what}.{near}", hint, exit_code=1)
        if fmt == "json":
            print_json(recommend_json(result, cons, {"model": prof.name, "region": region}))
        elif fmt == "markdown":
            print(recommend_markdown(result, cons, header))
        else:
            render_recommend(result, cons, header)
