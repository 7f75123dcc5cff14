"""What the commands share when parsing flags: output formats and the options several take."""

from __future__ import annotations

import typer

from srift.errors import SriftError, one_of
from srift.job import (
    AUTO, CHECKPOINTING, DATA_LOADING, DEFAULT_LORA_RANK, FINETUNE_MODES, KFAC_INVERSE_METHODS, KFAC_STRATEGIES, LORA_TARGETS,
    OPTIMIZERS, PARALLELISMS, PRECISIONS, REDUCE_DTYPES,
)

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
OPTIMIZER = typer.Option("sgd", "--optimizer", help=f"{one_of(OPTIMIZERS)} (sgd: any first-order optimizer, the state the "
                        "profile records; adamw8bit, paged-adamw8bit: bitsandbytes' 8-bit AdamW; fine-tuning defaults to adamw).")
FINETUNE = typer.Option(None, "--finetune", help=f"{one_of(FINETUNE_MODES)}: fine-tune a decoder LLM (full: every weight in "
                        "the parameter dtype; lora: adapters over frozen weights; qlora: over NF4 weights).")
LORA_RANK = typer.Option(DEFAULT_LORA_RANK, "--lora-rank", help="LoRA's rank (--finetune lora or qlora).")
LORA_TARGETS_OPT = typer.Option("all-linear", "--lora-targets", help=f"{one_of(LORA_TARGETS)}: the Linears of each block "
                                "LoRA adapts (qv: query and value; attention: q, k, v, o; all-linear: every one).")
KFAC_STRATEGY = typer.Option("spd", "--kfac-strategy", help=f"K-FAC strategy: {one_of(KFAC_STRATEGIES)}.")
KFAC_INVERSE_METHOD = typer.Option("inverse", "--kfac-inverse-method",
                                   help=f"K-FAC inverse method: {one_of(KFAC_INVERSE_METHODS)} (damped Cholesky inverse, or eigh).")
REGION = typer.Option(None, "--region", help="AWS region (= --infra aws/REGION).")
INFRA = typer.Option(None, "--infra", help="Clouds and regions, SkyPilot's spelling: aws (every region), aws/us-west-2, gcp,lambda.")
CONFIDENCE = typer.Option(0.9, "--confidence", help="Meet the deadline and the maximum cost at this quantile of the prediction (0.5-0.99).")
SAMPLES = typer.Option(None, "--samples", help="Job length in samples (e.g. 1.2e8): more GPUs, fewer steps.")
TOKENS = typer.Option(None, "--tokens", help="Job length in tokens, sequence models (e.g. 1e9): samples x sequence length.")


def whole(value: float | None, flag: str) -> int | None:
    """A count given as a number (``1e9``) as an integer.

    Raises:
        SriftError: for a count that is not a whole number of at least 1.
    """
    if value is None:
        return None
    if not (value >= 1 and float(value).is_integer()):
        raise SriftError(f"{flag} must be a whole number of at least 1, got {value:g}.", f"pass e.g. {flag} 1e9.")
    return int(value)
FORMAT = typer.Option("table", "--format", help="table, json or markdown.")
OUT_FILE = typer.Option(None, "--out-file", help="Also write the JSON document to FILE (whatever --format prints).")
SKYPILOT = typer.Option(None, "--skypilot", help="Write a SkyPilot task for the configuration to FILE (sky launch FILE).")
TORCHRUN = typer.Option(False, "--torchrun", help="Print the torchrun command of every node of the configuration.")
PARALLELISM = typer.Option(AUTO, "--parallelism", help=f"{one_of((*PARALLELISMS, AUTO))}: how the job is spread "
                           "(auto: per configuration the fastest that fits; DDP for models without transformer blocks).")
ACTIVATION_CHECKPOINTING = typer.Option(AUTO, "--activation-checkpointing",
                                        help=f"{one_of((*CHECKPOINTING, AUTO))} (per transformer block; selective: "
                                             "torchtitan's per-op policy).")
GRAD_ACCUM = typer.Option(1, "--grad-accum", help="Micro-batches of --batch-size per optimizer step (gradient accumulation).")
REDUCE_DTYPE = typer.Option("fp32", "--reduce-dtype", help=f"{one_of(REDUCE_DTYPES)}: dtype sharded jobs reduce gradients in "
                                                          "(FSDP MixedPrecision reduce_dtype).")
FUSED_LOSS = typer.Option(False, "--fused-loss/--plain-loss", help="The loss is a fused cross-entropy kernel (flash-attn, "
                          "llm-foundry, Liger) that keeps no fp32 copy of the logits (memory).")
