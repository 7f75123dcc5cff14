"""The vocabularies of a job's settings: for each, its Literal type, the tuple of its words and a
named constant per word; the parsed settings that carry a word and a number (``GradCompression``,
``LayoutRequest``); and the checks that a word is one of its vocabulary (``require_precision``,
``require_choice``, ``require_confidence``).

``srift.job`` re-exports every name here: ``from srift.job import BF16`` is the way code reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from srift.bounds import MAX_PARALLEL_DEGREE, parse_number, require, shown
from srift.errors import SriftError

# Each vocabulary is a Literal type (what mypy checks), the tuple of its words (what the
# validation, the help and the job file list) and a named constant for each word code compares
# against (a typo in a name fails at import, in a string it never matches), defined here once
# (tests/test_vocabulary.py). Literals rather than enums: the words are the JSON's and the
# command line's, and a str-mixin Enum formats differently across the Python versions srift runs on.

# fp32 means what PyTorch does by default: on GPUs with TF32 units (Ampere and newer) cuDNN runs
# convolutions in TF32 (torch.backends.cudnn.allow_tf32 defaults to True) while matmuls stay in
# FP32 (torch.backends.cuda.matmul.allow_tf32 defaults to False since PyTorch 1.12);
# fp32-strict turns TF32 off everywhere; tf32 allows it for both (srift/perf/compute.py).
Precision = Literal["fp32", "fp32-strict", "tf32", "amp", "bf16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
# Half-precision compute: amp (autocast, fp32 parameters) and bf16 (FSDP mixed precision: bf16
# parameters for compute, fp32 master copy).
HALF_PRECISIONS: tuple[Precision, ...] = ("amp", "bf16")
# Other names people use for a precision: fp16 training in PyTorch is autocast (AMP) with fp32 weights.
PRECISION_ALIASES = {"fp16": "amp", "float16": "amp", "bfloat16": "bf16", "float32": "fp32"}
DEFAULT_INFRA = "aws/us-east-1"  # where a job is priced unless told (--infra, the job file's infra)
DEFAULT_CONFIDENCE = 0.9  # limits that rest on a prediction are met at this quantile (srift/search/confidence.py)
# Where the training batches come from (srift/perf/input.py): tensors already on the GPU, JPEGs
# decoded and augmented on the vCPUs, or pre-tokenized text.
DataLoading = Literal["synthetic", "images", "tokens"]
DATA_LOADING: tuple[DataLoading, ...] = get_args(DataLoading)
# sgd: any first-order optimizer, with the state size the profile records; kfac: K-FAC; the
# AdamW variants of fine-tuning recipes (srift/simulate/finetune.py): torch's, bitsandbytes'
# 8-bit and paged 8-bit.
Optimizer = Literal["sgd", "kfac", "adamw", "adamw8bit", "paged-adamw8bit"]
OPTIMIZERS: tuple[Optimizer, ...] = get_args(Optimizer)
# Fine-tuning (srift/simulate/finetune.py): every weight, LoRA adapters over frozen weights, or
# LoRA over NF4-quantized frozen weights; which Linears of a block LoRA adapts: the query and
# value projections (PEFT's default for Llama and Mistral, LitGPT's), the query, key and value
# projections (Megatron's fused ``linear_qkv``: NeMo's performance recipes), every attention
# projection, or every Linear (PEFT's ``all-linear``).
FinetuneMode = Literal["full", "lora", "qlora"]
FINETUNE_MODES: tuple[FinetuneMode, ...] = get_args(FinetuneMode)
LoraTargets = Literal["qv", "qkv", "attention", "all-linear"]
LORA_TARGETS: tuple[LoraTargets, ...] = get_args(LoraTargets)
DEFAULT_LORA_RANK = 16
# Where a fine-tuning job keeps its optimizer states (srift/simulate/offload.py): on the GPU, in
# host memory (DeepSpeed ZeRO-Offload's offload_optimizer, FSDP's CPU Adam), or the parameter
# shards there too (DeepSpeed's offload_param, FSDP's CPUOffload(offload_params=True)).
CpuOffload = Literal["none", "optimizer", "params"]
CPU_OFFLOADS: tuple[CpuOffload, ...] = get_args(CpuOffload)
NO_CPU_OFFLOAD, CPU_OFFLOAD_OPTIMIZER, CPU_OFFLOAD_PARAMS = CPU_OFFLOADS
KfacStrategy = Literal["naive", "mpd", "spd"]
KFAC_STRATEGIES: tuple[KfacStrategy, ...] = get_args(KfacStrategy)
# How K-FAC inverts a factor: damped Cholesky inverse, or eigendecomposition (kfac-pytorch's default).
KfacInverseMethod = Literal["inverse", "eigen"]
KFAC_INVERSE_METHODS: tuple[KfacInverseMethod, ...] = get_args(KfacInverseMethod)
# How the job is spread over the GPUs (srift/simulate/sharded.py): ddp (replicated), zero2
# (gradients and optimizer states sharded: FSDP SHARD_GRAD_OP, DeepSpeed ZeRO-2), fsdp (everything
# sharded: FULL_SHARD, FSDP2 fully_shard, ZeRO-3), hsdp (HYBRID_SHARD: sharded within a node,
# replicated across nodes). ``auto``: the fastest that fits, per configuration.
Parallelism = Literal["ddp", "zero2", "fsdp", "hsdp"]
PARALLELISMS: tuple[Parallelism, ...] = get_args(Parallelism)
SHARDED_PARALLELISMS: tuple[Parallelism, ...] = ("zero2", "fsdp", "hsdp")
# Activation checkpointing of each FSDP unit (transformer block): none, selective (torchtitan's
# per-op policy) or full (the block's forward again in backward). ``auto``: the least recompute
# that fits.
Checkpointing = Literal["none", "selective", "full"]
CHECKPOINTING: tuple[Checkpointing, ...] = get_args(Checkpointing)
# Megatron-Core's selective recompute modules (``TransformerConfig.recompute_modules``) that a
# layout's ``selective`` policy recomputes (srift/simulate/recompute.py); Megatron's default is
# the attention core alone.
RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts"]
RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = get_args(RecomputeModule)
# Megatron-Core's MoE token dispatchers (``moe_token_dispatcher_type``): ``alltoall`` sends each
# routed row to its expert's rank; ``flex`` (DeepEP, HybridEP) sends a token once to each node
# holding one of its experts and forwards it there over NVLink (srift/simulate/moe.py).
MoeDispatcher = Literal["alltoall", "flex"]
MOE_DISPATCHERS: tuple[MoeDispatcher, ...] = get_args(MoeDispatcher)
# Transformer Engine's low-precision recipes of a layout's GEMMs (srift/perf/fp8.py): FP8 with
# per-tensor scaling (Hopper's FP8, current or delayed; torchao's float8 under torchtitan),
# Blackwell's MXFP8, and Blackwell's NVFP4 (4-bit E2M1 values, an E4M3 scale per 16, NVFP4BlockScaling).
Fp8Recipe = Literal["tensorwise", "mxfp8", "nvfp4"]
FP8_RECIPES: tuple[Fp8Recipe, ...] = get_args(Fp8Recipe)
DEFAULT_RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = ("core_attn",)
Auto = Literal["auto"]
AUTO: Auto = "auto"
# The dtype gradients are reduce-scattered (all-reduced) in: FSDP MixedPrecision's reduce_dtype;
# under DDP, fp32 unless a comm hook compresses them (fp16_compress_hook, bf16_compress_hook) or the
# parameters themselves are half (apex AMP O2 keeps fp16 weights and gradients).
ReduceDtype = Literal["fp32", "bf16", "fp16"]
REDUCE_DTYPES: tuple[ReduceDtype, ...] = get_args(ReduceDtype)
REDUCE_BYTES_PER_ELEMENT: dict[ReduceDtype, int] = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes per gradient element reduced
# A DDP communication hook that compresses each gradient bucket for its all-reduce (PyTorch's
# torch.distributed.algorithms.ddp_comm_hooks: fp16_compress_hook, bf16_compress_hook, PowerSGDState
# + powerSGD_hook; priced in srift/perf/compression.py). FSDP and --layout jobs reduce in --reduce-dtype.
GradHook = Literal["none", "fp16", "bf16", "powersgd"]
GRAD_HOOKS: tuple[GradHook, ...] = get_args(GradHook)
DEFAULT_POWERSGD_RANK = 1  # PowerSGDState(matrix_approximation_rank=1): torch 2.13.0 powerSGD_hook.py


@dataclass(frozen=True)
class GradCompression:
    """``--grad-compression``: the hook and, for PowerSGD, its rank (``powersgd:4``)."""

    hook: GradHook = "none"
    rank: int = 0

    @classmethod
    def parse(cls, text: str) -> "GradCompression":
        """``none``, ``fp16``, ``bf16``, ``powersgd`` (rank 1) or ``powersgd:RANK``.

        Raises:
            SriftError: for another word or a rank that is not a whole number from 1 to 1024.
        """
        hook, sep, rank = str(text).strip().lower().partition(":")
        if hook not in GRAD_HOOKS or (sep and hook != "powersgd"):
            raise SriftError(f"unknown gradient compression '{text}'.",
                             "use --grad-compression none, fp16, bf16, powersgd or powersgd:RANK (e.g. powersgd:4).")
        if hook != "powersgd":
            return cls(hook)
        hint = "pass a rank from 1 to 1024, e.g. powersgd:4."
        r = int(parse_number(rank, "--grad-compression powersgd:RANK", hint=hint, integer=True)) if sep else DEFAULT_POWERSGD_RANK
        require(r, "--grad-compression powersgd:RANK", 1, 1024, integer=True, hint=hint)
        return cls("powersgd", r)

    @property
    def active(self) -> bool:
        """A hook is registered (not ``none``)."""
        return self.hook != "none"

    @property
    def half(self) -> bool:
        """The 16-bit hooks (``fp16_compress_hook``, ``bf16_compress_hook``)."""
        return self.hook in ("fp16", "bf16")

    def __str__(self) -> str:
        return f"powersgd:{self.rank}" if self.hook == "powersgd" else self.hook


# Data parallelism of a job with a --layout (srift/simulate/layouts.py): zero1 is Megatron's
# distributed optimizer (gradients reduce-scattered, optimizer states sharded), ddp all-reduces;
# fsdp and hsdp shard the parameters too, per block (FSDP2 under TP/PP/CP, as torchtitan runs it).
LayoutParallelism = Literal["zero1", "ddp", "fsdp", "hsdp"]
LAYOUT_PARALLELISMS: tuple[LayoutParallelism, ...] = get_args(LayoutParallelism)
# Pipeline schedules of a layout: Megatron's 1F1B and its interleaved variant (virtual stages).
PipelineSchedule = Literal["1f1b", "interleaved"]
PIPELINE_SCHEDULES: tuple[PipelineSchedule, ...] = get_args(PipelineSchedule)


# Training stacks (srift/stacks.py, configs/stacks.yaml): what runs the job, each a row of named
# behaviours (gradient-reduce and TP overlap, kernels, optimizer step, ...).
Stack = Literal["megatron-core", "nemo", "nemo-automodel", "megatron-deepspeed", "torchtitan", "torchtune", "deepspeed",
                "hf-trainer", "lightning", "pytorch"]
STACKS: tuple[Stack, ...] = get_args(Stack)


# The words, named.
FP32: Final = "fp32"
FP32_STRICT: Final = "fp32-strict"
TF32: Final = "tf32"
AMP: Final = "amp"
BF16: Final = "bf16"
SYNTHETIC: Final = "synthetic"
IMAGES: Final = "images"
TOKENS: Final = "tokens"
SGD: Final = "sgd"
KFAC: Final = "kfac"
ADAMW: Final = "adamw"
ADAMW8BIT: Final = "adamw8bit"
PAGED_ADAMW8BIT: Final = "paged-adamw8bit"
FULL_FINETUNE: Final = "full"
LORA: Final = "lora"
QLORA: Final = "qlora"
LORA_QV: Final = "qv"
LORA_QKV: Final = "qkv"
LORA_ATTENTION: Final = "attention"
LORA_ALL_LINEAR: Final = "all-linear"
NAIVE: Final = "naive"
MPD: Final = "mpd"
SPD: Final = "spd"
INVERSE: Final = "inverse"
EIGEN: Final = "eigen"
DDP: Final = "ddp"
ZERO2: Final = "zero2"
FSDP: Final = "fsdp"
HSDP: Final = "hsdp"
NO_CHECKPOINTING: Final = "none"
SELECTIVE: Final = "selective"
FULL_CHECKPOINTING: Final = "full"
ZERO1: Final = "zero1"
CORE_ATTN: Final = "core_attn"
MOE_ACT: Final = "moe_act"
MOE_LAYER: Final = "moe"  # Megatron-Core's recompute module of a whole MoE layer
ALLTOALL: Final = "alltoall"
FLEX: Final = "flex"
TENSORWISE: Final = "tensorwise"
MXFP8: Final = "mxfp8"
NVFP4: Final = "nvfp4"


def gemm_recipe_label(recipe: str) -> str:
    """How outputs name a layout's low-precision GEMM recipe: ``NVFP4 GEMMs``, ``FP8 GEMMs (mxfp8)``."""
    return "NVFP4 GEMMs" if recipe == NVFP4 else f"FP8 GEMMs ({recipe})"
ONE_F_ONE_B: Final = "1f1b"
MEGATRON_CORE: Final = "megatron-core"
NEMO: Final = "nemo"
NEMO_AUTOMODEL: Final = "nemo-automodel"
MEGATRON_DEEPSPEED: Final = "megatron-deepspeed"
TORCHTITAN: Final = "torchtitan"
TORCHTUNE: Final = "torchtune"
DEEPSPEED: Final = "deepspeed"
HF_TRAINER: Final = "hf-trainer"
LIGHTNING: Final = "lightning"
PYTORCH_STACK: Final = "pytorch"
INTERLEAVED: Final = "interleaved"


@dataclass(frozen=True)
class LayoutRequest:
    """What ``--layout`` asks for: fixed tensor-, pipeline- and context-parallel degrees, or all
    three searched (``auto``: every field None). Data parallelism takes the GPUs left; ``ep``
    splits a mixture of experts' routed experts within TP x CP x DP (None: searched)."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None

    @property
    def auto(self) -> bool:
        return self.tp is None and self.pp is None and self.cp is None


def parse_layout(text: str) -> LayoutRequest:
    """``tp=T,pp=P,cp=C,ep=E`` (any of them; the others 1) or ``auto``.

    Raises:
        SriftError: for anything else.
    """
    t = text.strip().lower()
    if t == AUTO:
        return LayoutRequest()
    got: dict[str, int] = {}
    hint = (f"pass --layout tp=T,pp=P,cp=C[,ep=E] (each 1 to {MAX_PARALLEL_DEGREE:,}; data parallelism "
            "takes the rest; ep: expert parallelism of a mixture of experts) or --layout auto.")
    for part in t.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in ("tp", "pp", "cp", "ep") or key in got:
            raise SriftError(f"--layout {shown(text)} is not a layout.", hint)
        got[key] = require(parse_number(value, f"--layout's {key}", hint=hint, integer=True), f"--layout's {key}", 1,
                           MAX_PARALLEL_DEGREE, integer=True, hint=hint)
    return LayoutRequest(got.get("tp", 1), got.get("pp", 1), got.get("cp", 1), got.get("ep", 1))


def require_precision(precision: str) -> Precision:
    """``precision`` when it is one of PRECISIONS.

    Raises:
        SriftError: for any other name.
    """
    if precision not in PRECISIONS:
        raise SriftError(f"unknown precision '{precision}'.", f"use one of {', '.join(PRECISIONS)}.")
    return precision


def require_choice(value: str, allowed: tuple[str, ...], what: str, flag: str) -> str:
    """``value`` when it is one of ``allowed``.

    Raises:
        SriftError: naming the setting and the values it takes.
    """
    if value not in allowed:
        raise SriftError(f"unknown {what} '{value}'.", f"use {flag} with one of {', '.join(allowed)}.")
    return value


def require_confidence(confidence: float) -> float:
    """``confidence`` when it is in [0.5, 1).

    Raises:
        SriftError: for anything else (below 0.5 a limit would be met less often than not).
    """
    if isinstance(confidence, bool) or not (isinstance(confidence, (int, float)) and 0.5 <= confidence < 1.0):
        raise SriftError(f"confidence must be at least 0.5 and below 1, got {confidence!r}.",
                         "pass e.g. --confidence 0.9 (limits met in 9 runs out of 10); 0.5 meets them at the median.")
    return float(confidence)
