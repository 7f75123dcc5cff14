"""Job: how a profile is trained (batch, sequence length, precision, optimizer, length, parallelism,
fine-tuning), with the rules that refuse a combination srift cannot price.

The vocabularies of those settings are in srift/job_vocabulary.py and the job's length and one run
of it in srift/job_length.py; this module re-exports every name of both.

This is the one place job settings are validated: the command line and the job file
(srift/jobfile.py) both build a Job; the search's limits (srift/search/limits.py) hold only limits.
Every count is bounded by what srift models (srift/bounds.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from srift.bounds import (
    MAX_BATCH_SIZE, MAX_BUCKET_CAP_MB, MAX_GLOBAL_BATCH_SIZE, MAX_GRAD_ACCUM, MAX_KFAC_INTERVAL, MAX_LORA_RANK,
    MAX_MOE_IMBALANCE, MAX_MTP_LAYERS, MAX_PARALLEL_DEGREE, MAX_SEQ_LEN, require,
)
from srift.errors import SriftError

# The vocabularies (srift/job_vocabulary.py) and the job's length (srift/job_length.py) live in
# their own modules; every name of theirs is re-exported here, so ``from srift.job import ...``
# stays the one way code imports a job's words.
from srift.job_length import JobLength, JobRun, usd_per_million_samples  # noqa: F401
from srift.job_vocabulary import *


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
            (ep == 1 and self.moe_imbalance != DEFAULT_MOE_IMBALANCE,
             f"--moe-imbalance is the load of the busiest expert-parallel rank; --layout {self.layout} has ep=1: every "
             "rank computes every routed token.", "add ep=E (E > 1) to --layout, or drop --moe-imbalance."),
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
                --moe-dispatcher, --moe-imbalance, --moe-ep-overlap or --mtp-layers without a layout.
        """
        if self.layout is not None:
            return
        for flag, given in (("--parallelism zero1", self.parallelism == ZERO1),
                            ("--pipeline-schedule", self.pipeline_schedule is not None),
                            ("--virtual-stages", self.virtual_stages != 1), ("--fp8", self.fp8 is not None),
                            ("--moe-dispatcher", self.moe_dispatcher != ALLTOALL),
                            ("--moe-imbalance", self.moe_imbalance != DEFAULT_MOE_IMBALANCE),
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

