"""The job's options, in one table: every setting of ``Job`` and every form of its ``JobLength``,
with its type, bound, default, command-line flag, help and job-file key.

Everything else is generated from this table: the flags of every command that takes a job
(``srift predict``, ``recommend``, ``check``: srift/commands/options.py), the job file's keys, types,
bounds and ``SRIFT_`` variables (srift/jobfile.py), and the ``--help`` metavars of the vocabularies.
``build_job`` is the one function that turns option values into a ``Job``, for the command line
and the job file alike. tests/test_job_options.py fails when the table, ``Job``, ``JobLength``,
the commands and the job file drift apart.

To add a job option (``--lora-rank``, ``--pipeline-schedule``, ...):

1. add the field to ``Job`` in srift/job.py (its default, its docstring line, its check in
   ``__post_init__``; a new vocabulary as a ``Literal`` with its tuple there, and a new bound in
   srift/bounds.py);
2. add one ``JobOption`` row below (same name, same default, the vocabulary's tuple or the bound).

The flag (``--lora-rank``), the job-file key (``lora_rank``) and its ``SRIFT_LORA_RANK`` variable
follow from the name; every command that takes a job then accepts it. ``part="length"`` rows are
fields of ``JobLength`` (how long the job trains); ``srift predict`` takes only the settings, as it
predicts one iteration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from srift.bounds import (
    MAX_BATCH_SIZE, MAX_BUCKET_CAP_MB, MAX_DATASET_SIZE, MAX_EPOCHS, MAX_GLOBAL_BATCH_SIZE, MAX_GRAD_ACCUM,
    MAX_KFAC_INTERVAL, MAX_LORA_RANK, MAX_MOE_IMBALANCE, MAX_MTP_LAYERS, MAX_PARALLEL_DEGREE, MAX_SAMPLES, MAX_SEQ_LEN, MAX_STEPS,
    MAX_TOKENS,
)
from srift.errors import one_of
from srift.job import (
    ALLTOALL, AUTO, CHECKPOINTING, CPU_OFFLOADS, DATA_LOADING, DEFAULT_LORA_RANK, DEFAULT_MOE_IMBALANCE, FINETUNE_MODES, FP8_RECIPES,
    KFAC_INVERSE_METHODS, KFAC_STRATEGIES, LAYOUT_PARALLELISMS, LORA_TARGETS, MOE_DISPATCHERS, OPTIMIZERS, PARALLELISMS, PIPELINE_SCHEDULES,
    PRECISIONS, REDUCE_DTYPES, STACKS, Job,
    JobLength,
)

OptionKind = Literal["int", "float", "str", "bool", "text"]
OptionPart = Literal["setting", "length"]
SETTING: Final = "setting"  # the part of a Job's own fields
_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool, "text": str}


@dataclass(frozen=True)
class JobOption:
    """One option of a job: a field of ``Job`` (``part="setting"``) or of ``JobLength`` (``"length"``).

    Attributes:
        name: The field's name; also the job-file key and, in capitals after ``SRIFT_``, its
            environment variable.
        kind: ``int``, ``float``, ``str`` (a word of ``choices``), ``bool`` or ``text`` (a value
            ``Job`` parses, like ``--layout tp=8,pp=4``; ``example`` shows one).
        default: The field's default (None: not set, the profile's or the model's own).
        help: The ``--help`` line.
        choices: The words a ``str`` option takes (its vocabulary, from srift/job.py).
        high: The largest value of a number (srift/bounds.py); every number is above 0 and every
            integer at least 1.
        part: ``setting`` (a Job field) or ``length`` (a JobLength field).
        negative_flag: The flag that turns a ``bool`` option off (``--plain-loss``).
        scientific: The command line takes the count as a number (``1e9``) that must be whole.
        example: A valid value of a ``text`` option (messages, tests).
    """

    name: str
    kind: OptionKind
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    high: float | None = None
    part: OptionPart = "setting"
    negative_flag: str | None = None
    scientific: bool = False
    example: str = ""

    def __post_init__(self) -> None:
        if (self.kind == "str") != bool(self.choices) or (self.kind in ("int", "float")) != (self.high is not None):
            raise ValueError(f"job option {self.name}: a str option needs choices, a number a bound, nothing else either.")
        if (self.kind == "bool") != (self.negative_flag is not None):
            raise ValueError(f"job option {self.name}: a bool option, and only it, needs a negative flag.")
        if (self.kind == "text") != bool(self.example):
            raise ValueError(f"job option {self.name}: a text option, and only it, needs an example.")

    @property
    def flag(self) -> str:
        """``--batch-size`` for ``batch_size``."""
        return "--" + self.name.replace("_", "-")

    @property
    def type(self) -> type:
        """The Python type of one value."""
        return _KINDS[self.kind]

    @property
    def file_description(self) -> str:
        """What the job file's key must be, for messages: ``a positive integer``, ``sgd or kfac``."""
        if self.choices:
            return one_of(self.choices)
        if self.kind == "text":
            return f"text like {self.example}"
        return {"int": "a positive integer", "float": "a positive number", "bool": "true or false"}[self.kind]


_KFAC = "K-FAC (--optimizer kfac)"
#: Every job option, in the order ``--help`` lists them.
JOB_OPTIONS: tuple[JobOption, ...] = (
    JobOption("batch_size", "int", None, "Per-GPU batch (of the fastest GPU in a mix; default: the profile's).",
              high=MAX_BATCH_SIZE),
    JobOption("global_batch_size", "int", None, "Fix the global batch (per optimizer step, over all GPUs) instead of the "
              "per-GPU batch.", high=MAX_GLOBAL_BATCH_SIZE),
    JobOption("grad_accum", "int", 1, "Micro-batches of --batch-size per optimizer step (gradient accumulation).",
              high=MAX_GRAD_ACCUM),
    JobOption("seq_len", "int", None, "Sequence length (sequence models).", high=MAX_SEQ_LEN),
    JobOption("mean_seq_len", "int", None, "The dataset's mean sample length, tokens (as truncated at --seq-len): "
              "a batch is padded to its longest sample unless --packed; tokens/s counts real tokens.", high=MAX_SEQ_LEN),
    JobOption("lengths_file", "text", None, "A text file of the dataset's sample lengths (one integer per line): "
              "padded batches priced at their expected longest sample, memory at the longest.", example="lengths.txt"),
    JobOption("packed", "bool", False, "Samples are packed into --seq-len sequences (torchtune packed, TRL packing); "
              "--padded: each batch padded to its longest sample.", negative_flag="--padded"),
    JobOption("varlen_attention", "bool", False, "Packed samples attend only within themselves (XTuner use_varlen_attn, "
              "NeMo packed sequences), from --mean-seq-len/--lengths-file; --pack-attention: over the whole pack.",
              negative_flag="--pack-attention"),
    JobOption("precision", "str", None, f"{one_of(PRECISIONS)} (default: the profile's). fp32 is PyTorch's default: TF32 "
              "convolutions and FP32 matmuls on Ampere and newer; fp32-strict: no TF32 at all.", choices=PRECISIONS),
    JobOption("data_loading", "str", None, f"{one_of(DATA_LOADING)}: where batches come from (default: images for vision "
              "models, tokens for sequence models; a measured profile's own data time).", choices=DATA_LOADING),
    JobOption("parallelism", "str", AUTO, f"{one_of((*PARALLELISMS, 'zero1', AUTO))}: how the job is spread (auto: per "
              "configuration the fastest that fits; DDP for models without transformer blocks; with --layout: zero1, "
              "Megatron's distributed optimizer, ddp, or fsdp/hsdp, FSDP2 under the layout as torchtitan).",
              choices=(*PARALLELISMS, *(p for p in LAYOUT_PARALLELISMS if p not in PARALLELISMS), AUTO)),
    JobOption("layout", "text", None, "Tensor, pipeline and context parallelism of a decoder LLM: tp=T,pp=P,cp=C (data "
              "parallelism takes the rest; ep=E adds expert parallelism for a mixture of experts) or auto (the fastest layout that fits).", example="tp=2,pp=1,cp=1"),
    JobOption("micro_batch_size", "int", None, "Sequences per micro-batch of a --layout job (default 1; searched under "
              "--layout auto); without --layout, per GPU (predict: --global-batch-size / (micro x GPUs) micro-batches "
              "per step).", high=MAX_BATCH_SIZE),
    JobOption("pipeline_schedule", "str", None, f"{one_of(PIPELINE_SCHEDULES)}: the --layout's pipeline schedule (default: "
              "interleaved with --virtual-stages above 1, else 1f1b).", choices=PIPELINE_SCHEDULES),
    JobOption("virtual_stages", "int", 1, "Virtual pipeline stages per rank of the interleaved schedule (--layout).",
              high=MAX_PARALLEL_DEGREE),
    JobOption("moe_imbalance", "float", DEFAULT_MOE_IMBALANCE, "A mixture of experts' routing imbalance under ep=E: the "
              "busiest rank's tokens over the mean (1 = force-balanced, as benchmarks route; default "
              f"{DEFAULT_MOE_IMBALANCE:g}: estimated from GShard's and Switch's capacity factor, unvalidated).",
              high=MAX_MOE_IMBALANCE),
    JobOption("fp8", "str", None, f"{one_of(FP8_RECIPES)}: the --layout's GEMMs in FP8 (Transformer Engine's per-tensor "
              "scaling on Hopper, MXFP8 on Blackwell; torchao's tensorwise float8 under fsdp/hsdp) or in NVFP4 "
              "(Transformer Engine's NVFP4BlockScaling, Blackwell); the job stays bf16 (default: bf16 GEMMs).", choices=FP8_RECIPES),
    JobOption("moe_dispatcher", "str", ALLTOALL, f"{one_of(MOE_DISPATCHERS)}: a mixture of experts' token "
              "dispatcher under ep=E (Megatron-Core's moe_token_dispatcher_type; flex: DeepEP/HybridEP, a token sent "
              "once per node).", choices=MOE_DISPATCHERS),
    JobOption("moe_ep_overlap", "bool", False, "A mixture of experts' dispatch and combine all-to-alls overlap another "
              "micro-batch's compute (Megatron-Core's overlap_moe_expert_parallel_comm; ep=E).",
              negative_flag="--no-moe-ep-overlap"),
    JobOption("mtp_layers", "int", None, "Multi-token prediction layers the --layout's run trains (Megatron-Core's "
              "mtp_num_layers: a block and the head's loss again, on the last stage; default none, even where the "
              "model's config has them: num_nextn_predict_layers says the checkpoint has the module, not that a run "
              "trains it; Megatron-Bridge's DeepSeek-V3 recipes set 1).", high=MAX_MTP_LAYERS),
    JobOption("activation_checkpointing", "str", AUTO, f"{one_of((*CHECKPOINTING, AUTO))} (per transformer block; "
              "selective: torchtitan's per-op policy; with --layout, Megatron-Core's attention-core recompute, and auto tries "
              "its norm/expert-activation modules before full).", choices=(*CHECKPOINTING, AUTO)),
    JobOption("reduce_dtype", "str", "fp32", f"{one_of(REDUCE_DTYPES)}: dtype FSDP/HSDP and a --layout reduce gradients "
              "in (MixedPrecision reduce_dtype); plain DDP: --grad-compression.",
              choices=REDUCE_DTYPES),
    JobOption("grad_compression", "text", "none", "Plain DDP's communication hook: none, fp16, bf16 (fp16/bf16_compress_hook) or powersgd[:RANK] (PowerSGD, rank 1 by default; costs accuracy, see docs/grad-compression.md).", example="bf16"),
    JobOption("bucket_cap_mb", "float", 25.0, "DDP's gradient bucket cap, MiB (above the model's gradients: one "
              "all-reduce after backward, none of it hidden).", high=MAX_BUCKET_CAP_MB),
    JobOption("fused_loss", "bool", False, "The loss is a fused cross-entropy kernel (flash-attn, llm-foundry, Liger) "
              "that keeps no fp32 copy of the logits (memory).", negative_flag="--plain-loss"),
    JobOption("optimizer", "str", "sgd", f"{one_of(OPTIMIZERS)} (sgd: any first-order optimizer, the state the profile "
              "records; adamw8bit, paged-adamw8bit: bitsandbytes' 8-bit AdamW; fine-tuning takes adamw for sgd).",
              choices=OPTIMIZERS),
    JobOption("finetune", "str", None, f"{one_of(FINETUNE_MODES)}: fine-tune a decoder LLM (full: every weight in the "
              "parameter dtype; lora: adapters over frozen weights; qlora: over NF4 weights; default precision bf16).",
              choices=FINETUNE_MODES),
    JobOption("lora_rank", "int", DEFAULT_LORA_RANK, "LoRA's rank (--finetune lora or qlora).", high=MAX_LORA_RANK),
    JobOption("lora_targets", "str", "all-linear", f"{one_of(LORA_TARGETS)}: the Linears of each block LoRA adapts "
              "(qv: query and value; qkv: query, key and value; attention: q, k, v, o; all-linear: every one).", choices=LORA_TARGETS),
    JobOption("nf4_double_quant", "bool", True, "QLoRA: quantize NF4's block constants again (Hugging Face's "
              "bnb_4bit_use_double_quant); --no-double-quant: an fp32 constant per 64 weights (LitGPT's bnb.nf4).",
              negative_flag="--no-double-quant"),
    JobOption("quantize_head", "bool", False, "QLoRA: the output head in NF4 too (Lightning/LitGPT quantize every "
              "Linear); default: kept in bf16 as Hugging Face does.", negative_flag="--bf16-head"),
    JobOption("optimizer_in_backward", "bool", False, "Fine-tuning: step each parameter as its gradient is ready and free "
              "the gradient (torchtune's optimizer_in_bwd; no --grad-accum).", negative_flag="--optimizer-after-backward"),
    JobOption("activation_offloading", "bool", False, "Fine-tuning: saved activations to host memory in forward, back in "
              "backward (torchtune's enable_activation_offloading); copy time beyond compute is priced.",
              negative_flag="--no-activation-offloading"),
    JobOption("cpu_offload", "str", "none", f"{one_of(CPU_OFFLOADS)}: fine-tuning's optimizer states (params: and parameter "
              "shards, --parallelism fsdp) in host memory, stepped by CPU Adam (DeepSpeed ZeRO-Offload, FSDP CPUOffload).",
              choices=CPU_OFFLOADS),
    JobOption("stack", "str", None, f"{one_of(STACKS)}: the training stack, whose behaviours (gradient-reduce and "
              "TP overlap, bucketing, the layout's data parallelism) price the job (configs/stacks.yaml; default: a "
              "profile's detected stack, else megatron-core for a --layout, pytorch for data parallelism).",
              choices=STACKS),
    JobOption("kfac_strategy", "str", "spd", f"{_KFAC} strategy: {one_of(KFAC_STRATEGIES)}.", choices=KFAC_STRATEGIES),
    JobOption("kfac_inverse_method", "str", "inverse", f"{_KFAC} inverse method: {one_of(KFAC_INVERSE_METHODS)} (damped "
              "Cholesky inverse, or eigh).", choices=KFAC_INVERSE_METHODS),
    JobOption("kfac_factor_steps", "int", 1, f"{_KFAC} factor update interval, iterations.", high=MAX_KFAC_INTERVAL),
    JobOption("kfac_inv_steps", "int", 1, f"{_KFAC} inverse update interval, iterations (a multiple of the factor "
              "interval).", high=MAX_KFAC_INTERVAL),
    JobOption("epochs", "float", None, "Job length in epochs (with --dataset-size).", high=MAX_EPOCHS, part="length"),
    JobOption("dataset_size", "int", None, "Samples per epoch.", high=MAX_DATASET_SIZE, part="length"),
    JobOption("samples", "int", None, "Job length in samples (e.g. 1.2e8): more GPUs, fewer steps.", high=MAX_SAMPLES,
              part="length", scientific=True),
    JobOption("tokens", "int", None, "Job length in tokens, sequence models (e.g. 1e9): samples x sequence length.",
              high=MAX_TOKENS, part="length", scientific=True),
    JobOption("steps", "int", None, "Job length in iterations (a search needs --global-batch-size with it).",
              high=MAX_STEPS, part="length"),
)
OPTIONS_BY_NAME: dict[str, JobOption] = {o.name: o for o in JOB_OPTIONS}
SETTINGS: tuple[str, ...] = tuple(o.name for o in JOB_OPTIONS if o.part == "setting")
LENGTH: tuple[str, ...] = tuple(o.name for o in JOB_OPTIONS if o.part == "length")


def build_job(values: Mapping[str, Any]) -> Job:
    """The ``Job`` these option values give: the one place a command or a job file makes one.

    Args:
        values: Option name -> value; a missing or None value takes the option's default (no
            length option given: a job of unknown length).

    Raises:
        ValueError: for a name that is not a job option (a programming error).
        SriftError: for a value out of its vocabulary or bound, or an inconsistent job (``Job``).
    """
    unknown = sorted(set(values) - set(OPTIONS_BY_NAME))
    if unknown:
        raise ValueError(f"not job options: {', '.join(unknown)}.")
    given = {k: v for k, v in values.items() if v is not None}
    length = JobLength.given(**{k: given[k] for k in LENGTH if k in given})
    return Job(**{k: given[k] for k in SETTINGS if k in given}, length=length)
