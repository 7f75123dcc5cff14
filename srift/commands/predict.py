"""`srift predict`: one profile on one cluster."""

from __future__ import annotations

from typing import List, Optional

import typer

from srift.commands._common import check_format, print_json


def register(app: typer.Typer) -> None:
    @app.command("predict")
    def predict(
        model: Optional[str] = typer.Option(None, "--model", help="Built-in model (resnet50, bert-base, gpt2, ...)."),
        profile: Optional[List[str]] = typer.Option(None, "--profile", help="Profile file from `srift profile`; repeat it with the same job measured on other GPUs (each GPU type then uses its own)."),
        model_config: Optional[str] = typer.Option(None, "--model-config", help="A Hugging Face decoder config.json (Llama, Mistral, Qwen2): predict that model without its weights."),
        instance: Optional[str] = typer.Option(None, "--instance", help="TYPE[:COUNT] joined by + (p3.16xlarge:2, g5.xlarge:4+p3.2xlarge:2)."),
        cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster YAML file."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-GPU batch (of the fastest GPU in a mix)."),
        global_batch_size: Optional[int] = typer.Option(None, "--global-batch-size", help="Fix the global batch instead."),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length (sequence models)."),
        precision: Optional[str] = typer.Option(None, "--precision", help="fp32, tf32 or amp (default: the profile's)."),
        spot: bool = typer.Option(False, "--spot", help="Price the instances at spot and include interruptions."),
        optimizer: str = typer.Option("sgd", "--optimizer", help="sgd (any first-order optimizer) or kfac."),
        kfac_strategy: str = typer.Option("spd", "--kfac-strategy", help="naive, mpd or spd."),
        kfac_factor_steps: int = typer.Option(1, "--kfac-factor-steps", help="K-FAC factor update interval."),
        kfac_inv_steps: int = typer.Option(1, "--kfac-inv-steps", help="K-FAC inverse update interval."),
        region: str = typer.Option("us-east-1", "--region", help="AWS region of the catalog."),
        fmt: str = typer.Option("table", "--format", help="table or json."),
    ) -> None:
        """Predict iteration time, throughput and cost of a job on a cluster."""
        from srift.job import Job
        from srift.report import prediction_json, render_prediction
        from srift.simulate import predict as run_predict
        from srift.sources import resolve_cluster, resolve_profiles

        check_format(fmt)
        job = Job(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
                  global_batch_size=global_batch_size, kfac_strategy=kfac_strategy,
                  kfac_factor_steps=kfac_factor_steps, kfac_inv_steps=kfac_inv_steps)
        prof, more = resolve_profiles(model, profile, model_config)
        clus = resolve_cluster(instance, cluster, region=region, spot=spot)
        pred = run_predict(prof, clus, job, more)
        if fmt == "json":
            print_json(prediction_json(pred, {"model": prof.name, "precision": job.precision or prof.precision,
                                              "optimizer": optimizer, "spot_pricing": spot}))
        else:
            render_prediction(pred, f"{prof.name} on {clus.name}{' [Spot]' if spot else ''}, {job.precision or prof.precision}"
                                    + (f", K-FAC ({kfac_strategy})" if optimizer == "kfac" else ""))
