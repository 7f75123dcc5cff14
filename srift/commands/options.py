"""What the commands share when parsing flags: output formats and the options several take."""

from __future__ import annotations

import typer

from srift.errors import SriftError, one_of
from srift.job import DATA_LOADING, KFAC_STRATEGIES, OPTIMIZERS, PRECISIONS

FORMATS = ("table", "json", "markdown")


def check_format(fmt: str, allowed: tuple[str, ...] = ("table", "json")) -> str:
    """Validate a --format value."""
    if fmt not in allowed:
        raise SriftError(f"unknown format '{fmt}'.", f"use --format {' or '.join(allowed)}.")
    return fmt


# Options several commands take, declared once (typer reads these as the parameters' defaults).
MODEL = typer.Option(None, "--model", help="Built-in model (resnet50, bert-base, gpt2, llama3-8b, ...).")
MODEL_CONFIG = typer.Option(None, "--model-config", help="A Hugging Face decoder config.json (Llama, Mistral, Qwen2): predict that model without its weights.")
PROFILES = typer.Option(None, "--profile", help="Profile file from `srift profile`; repeat it with the same job measured "
                                                "on other GPUs (each GPU type then uses its own).")
GLOBAL_BATCH_SIZE = typer.Option(None, "--global-batch-size", help="Fix the global batch instead of the per-GPU batch.")
SEQ_LEN = typer.Option(None, "--seq-len", help="Sequence length (sequence models).")
PRECISION = typer.Option(None, "--precision", help=f"{one_of(PRECISIONS)} (default: the profile's). fp32 is PyTorch's "
                         "default: TF32 convolutions and FP32 matmuls on Ampere and newer; fp32-strict: no TF32 at all.")
DATA_LOADING_OPT = typer.Option(None, "--data-loading", help=f"{one_of(DATA_LOADING)}: where batches come from (default: "
                                "images for vision models, tokens for sequence models; a measured profile's own data time).")
OPTIMIZER = typer.Option("sgd", "--optimizer", help=f"{one_of(OPTIMIZERS)} (sgd: any first-order optimizer).")
KFAC_STRATEGY = typer.Option("spd", "--kfac-strategy", help=f"K-FAC strategy: {one_of(KFAC_STRATEGIES)}.")
REGION = typer.Option("us-east-1", "--region", help="AWS region of the catalog.")
