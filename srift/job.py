"""Job: how a profile is trained (batch, sequence length, precision, optimizer, length), the
vocabularies of those settings, and what one run of the job takes on a configuration.

This is the one place job settings are validated: the command line and the job file
(srift/jobfile.py) both build a Job; the search's limits (srift/search/limits.py) hold only limits.
Every count is bounded by what srift models (srift/bounds.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Final, Literal, get_args

from srift.bounds import (
    MAX_BATCH_SIZE, MAX_BUCKET_CAP_MB, MAX_DATASET_SIZE, MAX_EPOCHS, MAX_GLOBAL_BATCH_SIZE, MAX_GRAD_ACCUM,
    MAX_KFAC_INTERVAL, MAX_LORA_RANK, MAX_MOE_IMBALANCE, MAX_MTP_LAYERS, MAX_PARALLEL_DEGREE, MAX_SAMPLES, MAX_SEQ_LEN, MAX_STEPS,
    MAX_TOKENS, parse_number, require, shown,
)
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
        hook, _, rank = str(text).strip().lower().partition(":")
        if hook not in GRAD_HOOKS or (rank and hook != "powersgd"):
            raise SriftError(f"unknown gradient compression '{text}'.",
                             "use --grad-compression none, fp16, bf16, powersgd or powersgd:RANK (e.g. powersgd:4).")
        if hook != "powersgd":
            return cls(hook)
        if rank and not rank.isdigit():
            raise SriftError(f"PowerSGD's rank in '{text}' is not a whole number.", "pass e.g. --grad-compression powersgd:4.")
        r = int(rank) if rank else DEFAULT_POWERSGD_RANK
        require(r, "--grad-compression powersgd:RANK", 1, 1024, integer=True, hint="pass a rank from 1 to 1024, e.g. powersgd:4.")
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


@dataclass(frozen=True)
class JobLength:
    """How long the job trains, in one of the units people think in.

    * ``epochs`` over ``dataset_size`` samples, ``samples`` or ``tokens`` (sequence models: tokens
      = samples x sequence length): a fixed amount of data, so more GPUs mean fewer steps;
    * ``steps`` iterations: the data a step takes grows with the GPU count unless the global batch
      is fixed, so a search needs ``--global-batch-size`` with it (``srift.search.limits``).

    ``seq_len`` (tokens per sample) is set by ``with_seq_len`` once the job's sequence length is
    known; a ``tokens`` length needs it before it can count steps.

    Raises:
        SriftError: for no form or several at once, an epoch count without a dataset size (or the
            reverse), or a non-positive number.
    """

    steps: int | None = None
    epochs: float | None = None
    dataset_size: int | None = None
    samples: int | None = None
    tokens: int | None = None
    seq_len: int | None = None

    def __post_init__(self) -> None:
        if (self.epochs is None) != (self.dataset_size is None):
            raise SriftError("epochs and a dataset size go together.",
                             "give both (--epochs E --dataset-size N), or give --samples N, --tokens N or --steps N instead.")
        forms = [name for name, on in (("steps", self.steps is not None), ("epochs", self.epochs is not None),
                                       ("samples", self.samples is not None), ("tokens", self.tokens is not None)) if on]
        if len(forms) > 1:
            raise SriftError(f"the job's length is given more than once: as {' and as '.join(forms)}.",
                             "give one of steps, epochs with a dataset size, samples or tokens.")
        if not forms:
            raise SriftError("the job's length is missing.", "give steps, epochs with a dataset size, samples or tokens.")
        for flag, count, high in (("steps", self.steps, MAX_STEPS), ("dataset-size", self.dataset_size, MAX_DATASET_SIZE),
                                  ("samples", self.samples, MAX_SAMPLES), ("tokens", self.tokens, MAX_TOKENS),
                                  ("seq-len", self.seq_len, MAX_SEQ_LEN)):
            if count is not None:
                require(count, f"--{flag}", 1, high, integer=True, hint=f"pass --{flag} from 1 to {high:,}.")
        if self.epochs is not None:
            require(self.epochs, "--epochs", 0, MAX_EPOCHS, low_open=True, hint=f"pass --epochs above 0 and at most {MAX_EPOCHS:,.0f}.")

    @classmethod
    def given(cls, steps: int | None = None, epochs: float | None = None, dataset_size: int | None = None,
              samples: int | None = None, tokens: int | None = None) -> "JobLength | None":
        """The length these options give, or None when none of them is set."""
        if all(v is None for v in (steps, epochs, dataset_size, samples, tokens)):
            return None
        return cls(steps, epochs, dataset_size, samples, tokens)

    def with_seq_len(self, seq_len: int | None) -> "JobLength":
        """The same length, knowing the job's tokens per sample (needed by a ``tokens`` length).

        Raises:
            SriftError: for a ``tokens`` length and a model without a sequence length.
        """
        if self.tokens is not None and seq_len is None:
            raise SriftError("--tokens counts tokens, but this model has no sequence length.",
                             "give the length as --samples N or --epochs E --dataset-size N for this model.")
        return self if seq_len == self.seq_len else dataclasses.replace(self, seq_len=seq_len)

    @property
    def fixed_data(self) -> bool:
        """True when the length is an amount of data (epochs, samples, tokens), not a step count."""
        return self.steps is None

    @property
    def data_samples(self) -> int | None:
        """Samples the length names when it is an amount of data (tokens rounded up to whole
        samples), None for a step count: the least data any configuration trains on."""
        if self.epochs is not None and self.dataset_size is not None:
            return math.ceil(self.epochs * self.dataset_size)
        if self.samples is not None:
            return self.samples
        if self.tokens is not None:
            if self.seq_len is None:
                raise SriftError("a length in tokens needs the sequence length.", "give --seq-len, or the length in samples.")
            return math.ceil(self.tokens / self.seq_len)
        return None

    def steps_for(self, global_batch_size: int) -> float:
        """Iterations of the whole job at this global batch.

        An epoch's last batch may be partial (it still takes one iteration), so epochs take
        ``epochs x ceil(dataset_size / global batch)`` iterations; samples and tokens take
        ``ceil(samples / global batch)``.
        """
        if self.steps is not None:
            return float(self.steps)
        if self.epochs is not None and self.dataset_size is not None:
            return self.epochs * math.ceil(self.dataset_size / global_batch_size)
        samples = self.data_samples
        assert samples is not None
        return float(math.ceil(samples / global_batch_size))

    def describe(self) -> str:
        """``90 epochs of 1,281,167 samples``, ``1e+09 tokens``, ``20,000 steps``: for headers."""
        if self.steps is not None:
            return f"{self.steps:,} steps"
        if self.epochs is not None:
            return f"{self.epochs:g} epochs of {self.dataset_size:,} samples"
        if self.samples is not None:
            return f"{self.samples:,} samples"
        return f"{self.tokens:,} tokens" + (f" ({self.data_samples:,} samples of {self.seq_len:,})" if self.seq_len else "")


def usd_per_million_samples(usd_per_hour: float | None, samples_per_s: float) -> float | None:
    """What a million samples cost at this price and throughput (None when unpriced or stalled)."""
    if usd_per_hour is None or samples_per_s <= 0:
        return None
    return usd_per_hour / (samples_per_s * 3600.0) * 1e6


@dataclass(frozen=True)
class JobRun:
    """One run of a job of known length on one configuration.

    Attributes:
        steps: Iterations of the whole job.
        hours: Wall-clock hours at the expected throughput (spot interruptions included).
        cost_usd: Dollars for those hours (None when the configuration is unpriced).
    """

    steps: float
    hours: float
    cost_usd: float | None

    @classmethod
    def estimate(cls, length: JobLength, global_batch_size: int, samples_per_s: float,
                 usd_per_hour: float | None) -> "JobRun":
        """Steps, hours and cost of ``length`` at this global batch, throughput and price."""
        steps = length.steps_for(global_batch_size)
        hours = steps * global_batch_size / max(samples_per_s, 1e-12) / 3600.0
        return cls(steps, hours, None if usd_per_hour is None else hours * usd_per_hour)


# A mixture of experts' routing imbalance: the busiest expert-parallel rank's routed tokens over
# the mean (srift/simulate/moe.py). 1.0 is the force-balanced routing of published benchmarks;
# 1.25, the default, is *estimated* for trained routers: the capacity factor GShard (Lepikhin et
# al., 2020) and the Switch Transformer (Fedus et al., 2021) provision for the busiest expert. Not
# validated (the only MoE measurements srift has are force-balanced).
BALANCED_MOE_IMBALANCE = 1.0
DEFAULT_MOE_IMBALANCE = 1.25


@dataclass(frozen=True)
class Job:
    """Training settings applied to a profile.

    Attributes:
        batch_size: Per-GPU batch of the fastest GPU (None: the profile's).
        seq_len: Sequence length (None: the profile's).
        precision: One of PRECISIONS (None: the profile's; ``bf16`` for a fine-tuning job, as
            every fine-tuning recipe runs).
        optimizer: ``sgd`` (any first-order optimizer) or ``kfac``.
        global_batch_size: Fix the global batch (per optimizer step) across GPU counts (None:
            batch_size x grad_accum x GPUs).
        kfac_strategy: One of KFAC_STRATEGIES (K-FAC only).
        kfac_factor_steps: Factor update interval in iterations (K-FAC only).
        kfac_inv_steps: Inverse update interval in iterations (K-FAC only).
        kfac_inverse_method: One of KFAC_INVERSE_METHODS (K-FAC only).
        length: How long the job trains (None: unknown; then no job hours or cost).
        parallelism: One of PARALLELISMS, or ``auto`` (per configuration, the fastest that fits;
            a profile without FSDP units, such as a CNN, is trained with DDP).
        activation_checkpointing: One of CHECKPOINTING, or ``auto`` (with ``parallelism``).
        grad_accum: Micro-batches of ``batch_size`` per optimizer step (gradient accumulation):
            one iteration is one optimizer step of ``batch_size x grad_accum`` samples per GPU.
        reduce_dtype: Gradient reduction dtype of FSDP/HSDP (MixedPrecision ``reduce_dtype``) and
            of a ``--layout``'s data parallelism: ``fp32`` (torchtitan's and Composer's default),
            ``bf16`` or ``fp16``. Plain DDP's wire format is ``grad_compression``.
        grad_compression: Plain DDP's communication hook (``GradCompression.parse``): ``none``
            (DDP's all-reduce of the gradients in their dtype, fp32 under autocast), ``fp16``,
            ``bf16`` or ``powersgd[:RANK]``.
        bucket_cap_mb: DDP's ``bucket_cap_mb``: gradients per all-reduce bucket, MiB (PyTorch's
            default 25). A cap above the model's gradients makes one all-reduce after backward,
            nothing of it hidden (apex DDP with a large ``message_size``; a flat all-reduce after
            accumulation).
        fused_loss: The loss is a fused cross-entropy kernel (flash-attn's, llm-foundry's
            default; Liger's) that keeps no fp32 copy of the logits; False: PyTorch's
            ``cross_entropy`` on upcast logits (Hugging Face, torchtitan). Memory only.
        data_loading: One of DATA_LOADING (None: ``images`` for image models, ``tokens`` for
            sequence models, or a measured profile's own data time).
        finetune: One of FINETUNE_MODES (None: training as the profile says, every weight with
            fp32 master weights under amp/bf16).
        lora_rank: LoRA's rank (``lora``, ``qlora``).
        lora_targets: One of LORA_TARGETS (``lora``, ``qlora``).
        nf4_double_quant: QLoRA's NF4 block constants quantized again (Hugging Face's
            ``bnb_4bit_use_double_quant``, Lightning's ``nf4-dq``); False: one fp32 constant per
            block of 64 (Lightning's and LitGPT's ``nf4``).
        quantize_head: QLoRA quantizes the output head too (Lightning's BitsandbytesPrecision
            replaces every ``nn.Linear``); False: the head stays in the compute dtype (Hugging
            Face's default skips ``lm_head``).
        optimizer_in_backward: Each parameter is stepped as its gradient is ready and the
            gradient freed (torchtune's ``optimizer_in_bwd``; srift/simulate/offload.py).
        activation_offloading: Saved activations go to host memory in forward and come back in
            backward (torchtune's ``enable_activation_offloading``).
        cpu_offload: One of CPU_OFFLOADS: optimizer states (and parameter shards) in host memory.
        mean_seq_len: The dataset's mean sample length in tokens (srift/simulate/sequences.py).
        lengths_file: A text file of the dataset's sample lengths (srift/simulate/sequences.py).
        packed: Samples packed to ``seq_len`` (else each batch padded to its longest sample).
        varlen_attention: Packed samples attend only within themselves (srift/simulate/varlen.py).
        layout: Tensor/pipeline/context parallelism of a decoder LLM, ``tp=T,pp=P,cp=C`` or
            ``auto`` (``parse_layout``; srift/simulate/layouts.py), None: data parallelism only.
            ``parallelism`` is then ``zero1`` (the default under ``auto``) or ``ddp``.
        micro_batch_size: Sequences per micro-batch of a layout (None: 1, searched under auto).
        pipeline_schedule: One of PIPELINE_SCHEDULES (None: ``interleaved`` with virtual stages).
        virtual_stages: Virtual pipeline stages per rank (interleaved schedule).
        moe_imbalance: A mixture of experts' routing imbalance under expert parallelism
            (``DEFAULT_MOE_IMBALANCE``; 1.0 = force-balanced).
        fp8: One of FP8_RECIPES: a layout's GEMMs in FP8 (srift/perf/fp8.py; the job stays bf16),
            or None (bf16 GEMMs).
        moe_dispatcher: One of MOE_DISPATCHERS: a mixture of experts' token dispatcher under
            expert parallelism (srift/simulate/moe.py).
        moe_ep_overlap: The dispatcher's all-to-alls overlap another micro-batch's compute.
        mtp_layers: Multi-token prediction layers the run trains (Megatron-Core's
            ``mtp_num_layers``; a layout's), None: none. Not the model config's
            ``num_nextn_predict_layers`` by default: that says the checkpoint has the module, not
            that a run trains it (a recipe's choice).
        stack: One of STACKS: the training stack whose behaviours price the job (srift/stacks.py),
            None: a profile's detected stack, else the default (a layout: ``megatron-core``, data
            parallelism: ``pytorch``).

    Raises:
        SriftError: for a setting out of its vocabulary or range.
    """

    batch_size: int | None = None
    seq_len: int | None = None
    precision: Precision | None = None
    optimizer: Optimizer = "sgd"
    global_batch_size: int | None = None
    kfac_strategy: KfacStrategy = "spd"
    kfac_factor_steps: int = 1
    kfac_inv_steps: int = 1
    kfac_inverse_method: KfacInverseMethod = "inverse"
    length: JobLength | None = None
    parallelism: Parallelism | LayoutParallelism | Auto = AUTO
    activation_checkpointing: Checkpointing | Auto = AUTO
    grad_accum: int = 1
    reduce_dtype: ReduceDtype = "fp32"
    grad_compression: str = "none"
    bucket_cap_mb: float = 25.0
    fused_loss: bool = False
    data_loading: DataLoading | None = None
    finetune: FinetuneMode | None = None
    lora_rank: int = DEFAULT_LORA_RANK
    lora_targets: LoraTargets = "all-linear"
    nf4_double_quant: bool = True
    quantize_head: bool = False
    optimizer_in_backward: bool = False
    activation_offloading: bool = False
    cpu_offload: CpuOffload = "none"
    mean_seq_len: int | None = None
    lengths_file: str | None = None
    packed: bool = False
    varlen_attention: bool = False
    layout: str | None = None
    micro_batch_size: int | None = None
    pipeline_schedule: PipelineSchedule | None = None
    virtual_stages: int = 1
    moe_imbalance: float = DEFAULT_MOE_IMBALANCE
    fp8: Fp8Recipe | None = None
    moe_dispatcher: MoeDispatcher = "alltoall"
    moe_ep_overlap: bool = False
    mtp_layers: int | None = None
    stack: Stack | None = None

    def __post_init__(self) -> None:
        for name, high in (("batch_size", MAX_BATCH_SIZE), ("seq_len", MAX_SEQ_LEN), ("mean_seq_len", MAX_SEQ_LEN),
                           ("global_batch_size", MAX_GLOBAL_BATCH_SIZE),
                           ("grad_accum", MAX_GRAD_ACCUM)):
            v = getattr(self, name)
            if v is not None:
                flag = f"--{name.replace('_', '-')}"
                require(v, flag, 1, high, integer=True, hint=f"pass {flag} from 1 to {high:,}.")
        if self.precision is not None:
            object.__setattr__(self, "precision", require_precision(PRECISION_ALIASES.get(self.precision, self.precision)))
        if self.data_loading is not None and self.data_loading not in DATA_LOADING:
            raise SriftError(f"unknown data loading '{self.data_loading}'.", f"use one of {', '.join(DATA_LOADING)}.")
        if self.optimizer not in OPTIMIZERS:
            raise SriftError(f"unknown optimizer '{self.optimizer}'.", f"use one of {', '.join(OPTIMIZERS)}.")
        if self.kfac_strategy not in KFAC_STRATEGIES:
            raise SriftError(f"unknown K-FAC strategy '{self.kfac_strategy}'.", f"use one of {', '.join(KFAC_STRATEGIES)}.")
        require_choice(self.kfac_inverse_method, KFAC_INVERSE_METHODS, "K-FAC inverse method", "--kfac-inverse-method")
        for flag, v in (("--kfac-factor-steps", self.kfac_factor_steps), ("--kfac-inv-steps", self.kfac_inv_steps)):
            require(v, flag, 1, MAX_KFAC_INTERVAL, integer=True, hint=f"pass {flag} from 1 to {MAX_KFAC_INTERVAL:,}.")
        if self.kfac_inv_steps % self.kfac_factor_steps:
            raise SriftError(
                f"--kfac-inv-steps {self.kfac_inv_steps} is not a multiple of --kfac-factor-steps {self.kfac_factor_steps}.",
                "make the inverse interval a multiple of the factor interval.",
            )
        if self.global_batch_size is not None and self.global_batch_size % self.grad_accum:
            raise SriftError(f"global batch {self.global_batch_size} is not a multiple of --grad-accum {self.grad_accum}.",
                             "make the global batch a multiple of the micro-batches per step.")
        require_choice(self.parallelism, (*PARALLELISMS, *LAYOUT_PARALLELISMS, AUTO), "parallelism", "--parallelism")
        self._check_layout()
        require_choice(self.activation_checkpointing, (*CHECKPOINTING, AUTO), "activation checkpointing",
                       "--activation-checkpointing")
        require_choice(self.reduce_dtype, REDUCE_DTYPES, "reduce dtype", "--reduce-dtype")
        if self.stack is not None:
            require_choice(self.stack, STACKS, "training stack", "--stack")
        self._check_grad_compression()
        require(self.bucket_cap_mb, "--bucket-cap-mb", 0.0, MAX_BUCKET_CAP_MB, low_open=True,
                hint=f"pass --bucket-cap-mb above 0, at most {MAX_BUCKET_CAP_MB:,}.")
        if self.finetune is not None:
            require_choice(self.finetune, FINETUNE_MODES, "fine-tuning mode", "--finetune")
            if self.precision is None:
                object.__setattr__(self, "precision", "bf16")
            if self.kfac:
                raise SriftError("K-FAC fine-tuning is not modelled.", "drop --optimizer kfac, or --finetune.")
        require(self.lora_rank, "--lora-rank", 1, MAX_LORA_RANK, integer=True, hint=f"pass --lora-rank from 1 to {MAX_LORA_RANK:,}.")
        require_choice(self.lora_targets, LORA_TARGETS, "LoRA target set", "--lora-targets")
        require_choice(self.cpu_offload, CPU_OFFLOADS, "CPU offload", "--cpu-offload")
        if self.kfac and self.parallelism in SHARDED_PARALLELISMS:
            raise SriftError(f"K-FAC is modelled with DDP only, not with --parallelism {self.parallelism}.",
                             "use --parallelism ddp with --optimizer kfac.")
        self._check_applies()

    def _check_grad_compression(self) -> None:
        """One concept per data-parallel flavour: plain DDP's wire format is its comm hook, FSDP's
        and a layout's is their reduce dtype."""
        hook = GradCompression.parse(self.grad_compression)
        object.__setattr__(self, "grad_compression", str(hook))
        if hook.hook != "none" and (self.layout is not None or self.parallelism not in (DDP, AUTO)):
            raise SriftError(f"--grad-compression {hook} is a DDP communication hook; this job runs "
                             f"{'a --layout' if self.layout is not None else self.parallelism}.",
                             "drop it, and set --reduce-dtype for FSDP's or the layout's gradient reduction.")
        if self.parallelism == DDP and self.layout is None and self.reduce_dtype != FP32:
            raise SriftError(f"--reduce-dtype {self.reduce_dtype} is FSDP's MixedPrecision setting; plain DDP "
                             "all-reduces through its communication hook.",
                             f"use --grad-compression {self.reduce_dtype} (DDP's {self.reduce_dtype}_compress_hook).")

    @property
    def compression(self) -> GradCompression:
        """Plain DDP's communication hook (``grad_compression`` parsed)."""
        return GradCompression.parse(self.grad_compression)

    def _check_layout(self) -> None:
        if self.micro_batch_size is not None:
            require(self.micro_batch_size, "--micro-batch-size", 1, MAX_BATCH_SIZE, integer=True,
                    hint=f"pass --micro-batch-size from 1 to {MAX_BATCH_SIZE:,}.")
        require(self.virtual_stages, "--virtual-stages", 1, MAX_PARALLEL_DEGREE, integer=True,
                hint=f"pass --virtual-stages from 1 to {MAX_PARALLEL_DEGREE:,}.")
        require(self.moe_imbalance, "--moe-imbalance", BALANCED_MOE_IMBALANCE, MAX_MOE_IMBALANCE,
                hint=f"pass --moe-imbalance from {BALANCED_MOE_IMBALANCE:g} (force-balanced) to {MAX_MOE_IMBALANCE:g}.")
        if self.pipeline_schedule is not None:
            require_choice(self.pipeline_schedule, PIPELINE_SCHEDULES, "pipeline schedule", "--pipeline-schedule")
        require_choice(self.moe_dispatcher, MOE_DISPATCHERS, "MoE token dispatcher", "--moe-dispatcher")
        if self.mtp_layers is not None:
            require(self.mtp_layers, "--mtp-layers", 1, MAX_MTP_LAYERS, integer=True,
                    hint=f"pass --mtp-layers from 1 to {MAX_MTP_LAYERS:,} (leave it out for none).")
        if self.fp8 is not None:
            require_choice(self.fp8, FP8_RECIPES, "FP8 recipe", "--fp8")
        self._check_fp8()
        if self.layout is None:  # layout-only settings are refused when priced without one: require_layout_settings
            return
        request = parse_layout(self.layout)
        if self.batch_size is not None:
            raise SriftError("--batch-size is the per-GPU batch of data parallelism; a --layout takes --micro-batch-size.",
                             "pass --micro-batch-size (sequences per micro-batch) and --global-batch-size instead.")
        if self.parallelism not in (*LAYOUT_PARALLELISMS, AUTO):
            raise SriftError(f"--parallelism {self.parallelism} is not modelled with --layout.",
                             "use --parallelism zero1 (Megatron's distributed optimizer), ddp, fsdp or hsdp with --layout.")
        if self.virtual_stages > 1 and self.pipeline_schedule == "1f1b":
            raise SriftError("--virtual-stages needs the interleaved schedule.",
                             "use --pipeline-schedule interleaved, or drop --virtual-stages.")
        if self.kfac:
            raise SriftError("K-FAC is modelled with DDP only, not with --layout.", "drop --layout with --optimizer kfac.")
        if not request.auto and (request.ep or 1) == 1:
            for flag, given in (("--moe-dispatcher", self.moe_dispatcher != ALLTOALL),
                                ("--moe-ep-overlap", self.moe_ep_overlap)):
                if given:
                    raise SriftError(f"{flag} is the token dispatch of expert parallelism; --layout {self.layout} has ep=1.",
                                     f"add ep=E (E > 1) to --layout, or drop {flag}.")

    def _check_applies(self) -> None:
        """Refuse a setting given where it cannot apply: one rule per option, checked here once
        (an option left at its default is never refused)."""
        request = parse_layout(self.layout) if self.layout is not None else None
        pp = request.pp if request is not None and not request.auto else None
        ep = request.ep if request is not None and not request.auto else None
        adapters = self.finetune in (LORA, QLORA)
        rules: tuple[tuple[bool, str, str], ...] = (
            (self.lora_rank != DEFAULT_LORA_RANK and not adapters,
             "--lora-rank is the rank of LoRA adapters; this job trains none (no --finetune lora or qlora).",
             "add --finetune lora (or qlora), or drop --lora-rank."),
            (self.lora_targets != LORA_ALL_LINEAR and not adapters,
             "--lora-targets chooses the Linears LoRA adapts; this job trains no adapters (no --finetune lora or qlora).",
             "add --finetune lora (or qlora), or drop --lora-targets."),
            (self.quantize_head and self.finetune != QLORA, "--quantize-head puts the head in NF4, which only QLoRA does.",
             "add --finetune qlora, or drop --quantize-head."),
            *self._trick_rules(),
            (pp == 1 and self.virtual_stages > 1,
             f"--virtual-stages {self.virtual_stages} splits each pipeline stage; --layout {self.layout} has pp=1, no pipeline.",
             "add pp=P (P > 1) to --layout, or drop --virtual-stages."),
            (ep is not None and ep > 1 and self.moe_imbalance > ep,
             f"--moe-imbalance {self.moe_imbalance:g} is more than ep={ep} allows: the busiest of {ep} ranks holds at most "
             f"every token, {ep} times the mean.", f"pass --moe-imbalance from {BALANCED_MOE_IMBALANCE:g} to {ep}."),
        )
        for refused, message, fix in rules:
            if refused:
                raise SriftError(message, fix)

    def _trick_rules(self) -> tuple[tuple[bool, str, str], ...]:
        """Where the fine-tuning memory tricks (srift/simulate/offload.py) cannot apply."""
        tricks = [flag for flag, on in (("--optimizer-in-backward", self.optimizer_in_backward),
                                        ("--activation-offloading", self.activation_offloading),
                                        (f"--cpu-offload {self.cpu_offload}", self.cpu_offload != "none")) if on]
        named = " and ".join(tricks)
        return (
            (self.mean_seq_len is not None and self.lengths_file is not None,
             "--mean-seq-len and --lengths-file both describe the samples' lengths.", "give one of them."),
            (self.mean_seq_len is not None and self.seq_len is not None and self.mean_seq_len > self.seq_len,
             f"--mean-seq-len {self.mean_seq_len or 0:,} is above --seq-len {self.seq_len or 0:,}, the longest a sample is "
             "truncated to.", "pass the mean of the samples as truncated, at most --seq-len."),
            ((self.mean_seq_len is not None or self.lengths_file is not None) and self.layout is not None
             and not self.varlen_attention,
             "--mean-seq-len and --lengths-file are modelled with data parallelism, not with --layout.",
             "drop --layout, or drop the sample lengths (a --layout job computes --seq-len tokens per sample; "
             "with --packed --varlen-attention they price its attention)."),
            (self.varlen_attention and not (self.packed and (self.mean_seq_len or self.lengths_file)),
             "--varlen-attention prices attention within each packed sample: it needs --packed and the samples' "
             "lengths.", "add --packed and --mean-seq-len (or --lengths-file), or drop --varlen-attention."),
            (bool(tricks) and self.finetune is None,
             f"{named} is modelled on fine-tuning's memory model; this job does not fine-tune.",
             "add --finetune full, lora or qlora, or drop " + named + "."),
            (bool(tricks) and self.layout is not None,
             f"{named} is modelled with data parallelism, not with --layout (Megatron-Core).",
             "drop --layout (use --parallelism ddp or fsdp), or drop " + named + "."),
            (self.optimizer_in_backward and self.grad_accum > 1,
             "--optimizer-in-backward steps each parameter during backward, which gradient accumulation cannot "
             "(torchtune refuses gradient_accumulation_steps > 1 with optimizer_in_bwd).",
             "pass --grad-accum 1, or drop --optimizer-in-backward."),
            (self.optimizer_in_backward and self.cpu_offload != "none",
             "--optimizer-in-backward steps on the GPU during backward; --cpu-offload steps on the CPU after it.",
             "drop one of --optimizer-in-backward and --cpu-offload."),
            (self.cpu_offload == "params" and self.parallelism != FSDP,
             f"--cpu-offload params shards the parameters (DeepSpeed ZeRO-3, FSDP); --parallelism {self.parallelism} "
             "does not.", "pass --parallelism fsdp, or use --cpu-offload optimizer."),
        )

    def _check_fp8(self) -> None:
        """FP8 GEMMs are modelled in a bf16 layout job: Megatron-Core's Transformer Engine recipes,
        and torchao's tensorwise float8 under FSDP2 (torchtitan)."""
        if self.fp8 is None:
            return
        if self.precision is not None and self.precision != BF16:
            raise SriftError(f"--fp8 runs the GEMMs of a bf16 job in FP8; --precision {self.precision} is not modelled with it.",
                             "use --precision bf16 (or leave it out) with --fp8, or drop --fp8.")
        if self.finetune in (LORA, QLORA):
            raise SriftError(f"--fp8 with --finetune {self.finetune} is not modelled (FP8 is validated on pre-training).",
                             "drop --fp8, or use --finetune full.")
        if self.fp8 in (MXFP8, NVFP4) and self.parallelism in SHARDED_PARALLELISMS:
            raise SriftError(f"--fp8 {self.fp8} with --parallelism {self.parallelism} is not modelled (torchtitan's "
                             f"float8 is validated {TENSORWISE} only).",
                             f"use --fp8 {TENSORWISE}, or --parallelism zero1 (Megatron-Core) with --fp8 {self.fp8}.")

    def require_layout_settings(self, takes_layout: bool = True) -> None:
        """Refuse settings that only a layout models when the job is priced without one.

        Not a check of ``__post_init__``: ``recommend`` gives a decoder LLM's job that names no
        layout ``--layout auto`` (srift.api.takes_default_layout) after the job is built, so the
        rule is applied where a job is priced (srift.simulate.predictor.Predictor).
        --micro-batch-size without a layout is data parallelism's micro-batch (srift.api.with_micro_batch).

        Args:
            takes_layout: The model can be laid out (a decoder LLM of the zoo or a --model-config,
                not a profile): the fix offered is a --layout; else to drop the setting.

        Raises:
            SriftError: for --parallelism zero1, --pipeline-schedule, --virtual-stages, --fp8,
                --moe-dispatcher, --moe-ep-overlap or --mtp-layers without a layout.
        """
        if self.layout is not None:
            return
        for flag, given in (("--parallelism zero1", self.parallelism == ZERO1),
                            ("--pipeline-schedule", self.pipeline_schedule is not None),
                            ("--virtual-stages", self.virtual_stages != 1), ("--fp8", self.fp8 is not None),
                            ("--moe-dispatcher", self.moe_dispatcher != ALLTOALL),
                            ("--moe-ep-overlap", self.moe_ep_overlap), ("--mtp-layers", self.mtp_layers is not None)):
            if not given:
                continue
            zero1 = flag == "--parallelism zero1"
            instead = "use --parallelism zero2 or fsdp" if zero1 else f"drop {flag}"
            if not takes_layout:  # a profile or a model without a decoder architecture: no layout to add
                raise SriftError(f"{flag} is modelled in a --layout, which needs a decoder LLM of the zoo or a "
                                 "--model-config, not this model or profile.",
                                 f"{instead}, or pass --model NAME (a decoder LLM) or --model-config with --layout.")
            raise SriftError(f"{flag} is modelled with a --layout." if zero1 else f"{flag} needs a --layout.",
                             f"add --layout tp=T,pp=P,cp=C (or auto), or {instead}.")

    @property
    def kfac(self) -> bool:
        return self.optimizer == "kfac"

    @property
    def finetune_label(self) -> str | None:
        """``QLoRA rank 16 (all-linear)``, ``full fine-tuning``, or None for other jobs: for headers."""
        if self.finetune is None:
            return None
        if self.finetune == "full":
            return "full fine-tuning"
        return f"{'QLoRA' if self.finetune == 'qlora' else 'LoRA'} rank {self.lora_rank} ({self.lora_targets})"

