"""Fine-tuning: full, LoRA and QLoRA as a transform of a training profile, and its memory.

Pure arithmetic (no torch). ``finetune_profile`` turns the profile of one training step into the
profile of the same step fine-tuned, so that the compute model, the DDP and FSDP schedules and
the optimizer model price it as they price any job:

- ``full``: every weight trains; only the optimizer's state size changes (``--optimizer``).
- ``lora`` (Hu et al. 2021): the base weights are frozen. A frozen Linear keeps its forward and
  runs one GEMM in backward (the input gradient), not two: no weight gradient. Layers before the
  first adapter run no backward at all (autograd stops there); a frozen embedding never does.
  Each targeted Linear gets two adapter leaves after it, ``lora_A`` (d_in -> r) and ``lora_B``
  (r -> d_out, its output added to the base output), as PEFT names them. They are ordinary
  Linear leaves with their own FLOPs and bytes, so the compute model prices them at its own rate:
  with r = 16 they are memory-bound (2 r FLOPs per element of width d moved), which is their poor
  efficiency; their bytes are the tensor passes counted from the frameworks' code
  (``ADAPTER_*_PASSES``: the scaling and the sum with the base output are kernels of their own).
  ``lora_A`` keeps its r-wide output for ``lora_B``'s weight gradient. Targets (``lora_targets``):
  ``qv`` (query and value projections: PEFT's default for Llama and Mistral, LitGPT's), ``qkv``
  (query, key and value: NeMo's performance recipes' ``linear_qkv``), ``attention`` (q, k, v, o)
  or ``all-linear`` (every Linear of a block: PEFT's ``all-linear``, which leaves the output head
  out). ``fused`` (Megatron-Core, srift/simulate/layouts.py): Linears that read one input are one
  GEMM there (``linear_qkv``, ``linear_fc1``) and take one adapter pair. LoRA's dropout on the
  adapters' input is not counted (PEFT's default is none, NeMo's 0).
- ``qlora`` (Dettmers et al. 2023): LoRA over base weights stored in NF4. Every frozen Linear of
  a block (bitsandbytes quantizes ``nn.Linear`` modules; embeddings, norms and the head stay in
  the compute dtype, as Hugging Face's ``llm_int8_skip_modules`` default keeps ``lm_head``;
  ``Job.quantize_head``: the head too, as Lightning's ``BitsandbytesPrecision`` replaces every
  ``nn.Linear``) is dequantized to the compute dtype before its forward GEMM and again before its
  backward GEMM: a ``Dequantize`` leaf (element-wise kind) moving the NF4 bytes in and 2 bytes out
  per weight, priced at the compute model's memory rate. This is an estimate from the kernel's
  traffic (bitsandbytes' ``dequantize_4bit`` is a streaming kernel), not a measured figure. NF4
  takes ``NF4_BYTES_PER_PARAM`` with double quantization, ``NF4_NO_DQ_BYTES_PER_PARAM`` without
  (``Job.nf4_double_quant``). bitsandbytes' 4-bit matmul (``MatMul4Bit`` in
  bitsandbytes/autograd/_functions.py, 0.42.0, the version LitGPT pins) keeps its input for
  backward (``ctx.tensors = (A, B)``) where a frozen torch Linear keeps none: the leaf carries
  those bytes, once per tensor read and not where an adapter's ``lora_A`` keeps it anyway
  (``_kept_inputs``; none under ``all-linear``).

Memory (``finetune_memory_bytes``, one function, so a better activation model drops in at its one
call to ``srift.simulate.memory.activation_bytes``): every tensor is stored in the parameter dtype
of the precision (``bf16``: 2 bytes, no fp32 master copy, as LitGPT's ``bf16-true``, torchtune and a
bf16-loaded Hugging Face model train; otherwise 4), base weights of QLoRA in NF4; gradients and optimizer states only for what trains; activations and the loss's
fp32 upcast of the logits from ``activation_bytes``; FSDP's gathered units and the caching
allocator's reserve as ``sharded_memory_bytes`` counts them.

Optimizer states per trainable parameter: ``adamw`` two moments in the parameter dtype (torch's
AdamW allocates them ``zeros_like`` the parameter); ``adamw8bit`` and ``paged-adamw8bit``
(bitsandbytes) two 8-bit moments with one fp32 scale per block of 2048 (Dettmers et al. 2022,
"8-bit Optimizers via Block-wise Quantization"). Paged states can be evicted to host memory under
pressure; srift counts them on the GPU (what they take while they are resident).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from srift.errors import SriftError
from srift.job import (
    ADAMW, ADAMW8BIT, DDP, FULL_FINETUNE, LORA, LORA_ALL_LINEAR, LORA_ATTENTION, LORA_QKV, PAGED_ADAMW8BIT, QLORA,
    ZERO2, Job,
)
from srift.perf.compute import ATTENTION, layer_kind
from srift.profile import LayerProfile, OptimizerInfo, Profile
from srift.simulate.memory import activation_bytes, allocated_parts, compute_param_bytes, with_allocator
from srift.simulate.offload import NO_TRICKS, MemoryTricks, largest_layer_params, offloaded_activation_bytes, paged_params
from srift.simulate.sharded import unit_layout

# NF4 with double quantization (QLoRA paper, section 3): 4 bits per weight, one 8-bit absmax per
# block of 64 weights, one fp32 constant per 256 of those blocks: 0.5 + 1/64 + 4/(64 x 256) bytes.
NF4_BLOCK = 64
NF4_DQ_BLOCK = 256
NF4_BYTES_PER_PARAM = 0.5 + 1.0 / NF4_BLOCK + 4.0 / (NF4_BLOCK * NF4_DQ_BLOCK)
# Tensor passes of an adapter pair over its d_in-wide input and its d_out-wide output, counted from
# the code both frameworks run, ``base(x) + lora_B(lora_A(x)) * scaling`` (Hugging Face PEFT's
# ``lora.Linear.forward``; NeMo 2.1's ``LoRALinear`` + ``ParallelLinearAdapter.forward``, whose
# ``x * (alpha / dim)`` is the scaling), without dropout (NeMo's default; PEFT's is none):
# forward, lora_A reads x (1); lora_B writes its output (1), the scaling reads and writes it (2), the
# sum reads it and the base output and writes the result (3) = 6. Backward, the scaling reads the
# output gradient and writes it scaled (2), lora_B's input- and weight-gradient GEMMs each read it
# (2) = 4; lora_A's input-gradient GEMM writes dx (1), its weight-gradient GEMM reads x (1), and
# autograd adds dx to the base layer's input gradient (2 reads, 1 write: 3) = 5. Each kernel on its
# own: neither framework fuses them (eager PyTorch; Megatron-Core runs the adapter as two
# Linear modules and two element-wise ops).
ADAPTER_IN_PASSES_FWD = 1.0
ADAPTER_IN_PASSES_BWD = 5.0
ADAPTER_OUT_PASSES_FWD = 6.0
ADAPTER_OUT_PASSES_BWD = 4.0
# Without double quantization (bitsandbytes' compress_statistics=False: Lightning's and LitGPT's
# ``nf4``): one fp32 absmax per block of 64 weights.
NF4_NO_DQ_BYTES_PER_PARAM = 0.5 + 4.0 / NF4_BLOCK
# bitsandbytes' 8-bit optimizers: 1 byte per moment plus an fp32 scale per block of 2048.
OPT8BIT_BLOCK = 2048
OPT8BIT_BYTES_PER_MOMENT = 1.0 + 4.0 / OPT8BIT_BLOCK
# The recipes' optimizer when the job names none of the fine-tuning ones (LitGPT, Hugging Face's
# Trainer and torchtune default to AdamW).
DEFAULT_FINETUNE_OPTIMIZER = "adamw"


@dataclass(frozen=True)
class LoraSpec:
    """LoRA over frozen base weights in a Megatron-Core layout (srift/simulate/layouts.py): the
    adapters' rank and targets (``Job.lora_rank``, ``Job.lora_targets``); hashable, so the layout
    model's caches key on it."""

    rank: int
    targets: str

    def job(self) -> Job:
        """A LoRA job of this rank and targets, for ``finetune_profile``."""
        return Job(finetune="lora", lora_rank=self.rank, lora_targets=self.targets)  # type: ignore[arg-type]


def layout_lora(job: Job) -> LoraSpec | None:
    """The ``LoraSpec`` of a job with a ``--layout``: None for full fine-tuning (Megatron trains
    every weight as in pre-training) and for jobs that do not fine-tune.

    Raises:
        SriftError: for QLoRA (bitsandbytes' NF4 weights run with data parallelism, not in
            Megatron-Core's tensor or pipeline layouts).
    """
    if job.finetune == QLORA:
        raise SriftError("QLoRA is modelled with data parallelism (bitsandbytes' NF4 layers), not with --layout.",
                         "drop --layout (use --parallelism ddp or fsdp), or use --finetune lora with --layout.")
    return LoraSpec(job.lora_rank, job.lora_targets) if job.finetune == LORA else None


@dataclass(frozen=True)
class FrozenBase:
    """What fine-tuning froze in a profile.

    Attributes:
        mode: ``full``, ``lora`` or ``qlora``.
        optimizer: ``adamw``, ``adamw8bit`` or ``paged-adamw8bit``.
        frozen_params: Base parameters that do not train (all of them under LoRA/QLoRA).
        quantized_params: Of those, stored in NF4 (QLoRA's block Linears, and the head under
            ``Job.quantize_head``).
        unit_frozen_params: Frozen parameters per FSDP unit name (None: the root unit).
        unit_quantized_params: Quantized parameters per FSDP unit name.
        largest_quantized: Parameters of the largest quantized Linear (its dequantized copy is
            alive while it computes).
        trainable_params: Parameters that train (adapters under LoRA/QLoRA, all under full).
        unit_measured_bytes: Frozen bytes per unit as a measured profile recorded them (its
            layers' ``frozen_bytes``, quantized weights at their packed size); None when the
            frozen weights are counted (``unit_frozen_params``).
        nf4_bytes_per_param: Bytes of a quantized weight (with or without double quantization).
    """

    mode: str
    optimizer: str
    frozen_params: int
    quantized_params: int
    unit_frozen_params: dict[str | None, int]
    unit_quantized_params: dict[str | None, int]
    largest_quantized: int
    trainable_params: int
    unit_measured_bytes: dict[str | None, float] | None = None
    nf4_bytes_per_param: float = NF4_BYTES_PER_PARAM

    def stored_bytes(self, precision: str) -> float:
        """Bytes of the frozen base weights: NF4 for the quantized ones, the parameter dtype else."""
        if self.unit_measured_bytes is not None:
            return sum(self.unit_measured_bytes.values())
        return _frozen_bytes(self.frozen_params, self.quantized_params, precision, self.nf4_bytes_per_param)

    def unit_stored_bytes(self, unit: str | None, precision: str) -> float:
        """``stored_bytes`` of one FSDP unit."""
        if self.unit_measured_bytes is not None:
            return self.unit_measured_bytes.get(unit, 0.0)
        return _frozen_bytes(self.unit_frozen_params.get(unit, 0), self.unit_quantized_params.get(unit, 0), precision,
                             self.nf4_bytes_per_param)


def _frozen_bytes(frozen: int, quantized: int, precision: str, nf4_bytes: float) -> float:
    return quantized * nf4_bytes + (frozen - quantized) * compute_param_bytes(precision)


def finetune_optimizer(job: Job) -> str:
    """The fine-tuning optimizer of ``job``: its own when it names one, else AdamW."""
    return job.optimizer if job.optimizer in (ADAMW, ADAMW8BIT, PAGED_ADAMW8BIT) else DEFAULT_FINETUNE_OPTIMIZER


def optimizer_state_bytes_per_param(optimizer: str, precision: str) -> float:
    """Optimizer state bytes per trainable parameter (see the module docstring)."""
    if optimizer == ADAMW:
        return 2.0 * compute_param_bytes(precision)
    if optimizer in (ADAMW8BIT, PAGED_ADAMW8BIT):
        return 2.0 * OPT8BIT_BYTES_PER_MOMENT
    raise SriftError(f"unknown fine-tuning optimizer '{optimizer}'.", "use adamw, adamw8bit or paged-adamw8bit.")


def _is_linear(layer: LayerProfile) -> bool:
    return layer_kind(layer.type) == "matmul" and "linear" in layer.type.lower()


def lora_targets(profile: Profile, targets: str) -> list[int]:
    """Indices of the Linear layers LoRA adapts, per block unit: every Linear (``all-linear``),
    those up to and including the first Linear after the attention core (``attention``: q, k, v,
    o), those before the core (``qkv``), or of the Linears before the core the query and value
    projections (``qv``: the first and the third of separate q, k, v; a fused qkv projection whole)."""
    out: list[int] = []
    by_unit: dict[str | None, list[int]] = {}
    core: dict[str | None, int] = {}
    for i, layer in enumerate(profile.layers):
        if layer.unit is None:
            continue
        if layer_kind(layer.type) == ATTENTION and layer.unit not in core:
            core[layer.unit] = i
        elif _is_linear(layer) and layer.params > 0:
            by_unit.setdefault(layer.unit, []).append(i)
    for unit, linears in by_unit.items():
        if targets == LORA_ALL_LINEAR or unit not in core:
            out.extend(linears)
            continue
        before = [i for i in linears if i < core[unit]]
        after = [i for i in linears if i > core[unit]]
        if targets == LORA_ATTENTION:
            out.extend(before + after[:1])
        elif targets == LORA_QKV:
            out.extend(before)
        else:
            out.extend([before[0], before[2]] if len(before) == 3 else before)
    return sorted(out)


def _dims(layer: LayerProfile) -> tuple[int, int, float]:
    """(d_in, d_out, tokens) of a Linear leaf, from its K-FAC dimensions and forward FLOPs."""
    if not layer.kfac_a_dim or not layer.kfac_g_dim:
        raise SriftError(f"layer '{layer.name}' has no input/output widths (K-FAC dimensions), so LoRA cannot size its adapters.",
                         "profile the model again with this srift (it records them for every Linear).")
    d_in, d_out = int(layer.kfac_a_dim), int(layer.kfac_g_dim)
    tokens = layer.fwd_flops / (2.0 * d_in * d_out) if layer.fwd_flops > 0 else 0.0
    return d_in, d_out, tokens


def _adapters(layer: LayerProfile, rank: int, d_out_total: int | None = None) -> list[LayerProfile]:
    """``lora_A`` and ``lora_B`` of one targeted Linear (see the module docstring); ``d_out_total``:
    the output width of a fused projection the pair adapts whole (``layer`` its last part)."""
    d_in, d_layer, t = _dims(layer)
    d_out = d_out_total or d_layer
    e = layer.activation_bytes / (t * d_layer) if t > 0 else 2.0  # the base output's element size
    grad_per_param = layer.grad_bytes / layer.params if layer.params else 4.0
    out = []
    wide_in, wide_out, narrow = t * d_in * e, t * d_out * e, t * rank * e
    # (name, d_in, d_out, forward bytes, backward bytes, kept): ADAPTER_PASSES' tensor passes, plus
    # the r-wide tensor each GEMM writes or reads.
    for part, a, b, fwd_io, bwd_io, kept in (
            ("lora_A", d_in, rank, ADAPTER_IN_PASSES_FWD * wide_in + narrow, ADAPTER_IN_PASSES_BWD * wide_in + 2.0 * narrow,
             narrow),
            ("lora_B", rank, d_out, ADAPTER_OUT_PASSES_FWD * wide_out + narrow,
             ADAPTER_OUT_PASSES_BWD * wide_out + 2.0 * narrow, 0.0)):
        params = a * b
        grad = grad_per_param * params
        fwd = 2.0 * t * a * b
        out.append(LayerProfile(
            name=f"{layer.name}.{part}", type="Linear", params=params, param_tensors=1, grad_bytes=int(round(grad)),
            fwd_flops=fwd, bwd_flops=2.0 * fwd, fwd_bytes=fwd_io + grad, bwd_bytes=bwd_io + 2.0 * grad,
            activation_bytes=kept, kfac_a_dim=a, kfac_g_dim=b, kfac_spatial=layer.kfac_spatial, unit=layer.unit))
    return out


def _frozen(layer: LayerProfile, backward: bool) -> LayerProfile:
    """A frozen layer: no parameters to train; a Linear runs only its input-gradient GEMM; none
    runs a backward when nothing before it trains (``backward`` False)."""
    if not backward:
        bwd_flops, bwd_bytes = 0.0, 0.0
    elif _is_linear(layer):
        bwd_flops, bwd_bytes = layer.fwd_flops, layer.fwd_bytes  # read dy and W, write dx
    elif layer_kind(layer.type) == "embedding":
        bwd_flops, bwd_bytes = 0.0, 0.0  # token ids take no gradient
    else:
        bwd_flops, bwd_bytes = layer.bwd_flops, layer.bwd_bytes
    ratio = bwd_flops / layer.bwd_flops if layer.bwd_flops else 0.0
    return dataclasses.replace(
        layer, params=0, param_tensors=0, grad_bytes=0, bwd_flops=bwd_flops, bwd_bytes=bwd_bytes,
        bwd_flops_seq2=layer.bwd_flops_seq2 * ratio,
        bwd_s=None if layer.bwd_s is None else layer.bwd_s * ratio,
        bwd_s_std=None if layer.bwd_s_std is None else layer.bwd_s_std * ratio,
        grad_ready_order=None)


def _dequantize(layer: LayerProfile, backward: bool, nf4_bytes: float, kept_bytes: float) -> LayerProfile:
    """QLoRA's NF4 -> compute-dtype dequantization of ``layer``'s weight, before its forward GEMM
    and (when it runs a backward) its backward GEMM; ``kept_bytes``: the input bitsandbytes keeps
    for that backward (``_kept_inputs``)."""
    moved = layer.params * (nf4_bytes + 2.0)
    return LayerProfile(name=f"{layer.name}.dequantize", type="Dequantize", fwd_bytes=moved,
                        bwd_bytes=moved if backward else 0.0, activation_bytes=kept_bytes, unit=layer.unit)


def _input_key(profile: Profile, i: int) -> tuple[int, int]:
    """Which tensor Linear ``i`` reads: (index of the layer that wrote it, its width). Linears and
    element-wise layers in between are skipped: q, k and v read the norm's output, and so do a
    gated MLP's gate and up; its down projection reads the product (the same norm, another width)."""
    layer = profile.layers[i]
    j = i - 1
    while j >= 0 and profile.layers[j].unit == layer.unit and layer_kind(profile.layers[j].type) in ("matmul", "elementwise"):
        j -= 1
    return j, _dims(layer)[0]


def _kept_inputs(profile: Profile, quantized: list[int], targets: set[int], backward_from: int) -> dict[int, float]:
    """Bytes of input bitsandbytes' 4-bit matmul keeps per quantized Linear (by index): its autograd
    function holds its input until backward (``MatMul4Bit``: ``ctx.tensors = (A, B)``) where a frozen
    torch Linear keeps none. Counted once per tensor read, at its first reader, and not where an
    adapter's ``lora_A`` reads it (it keeps that input anyway, as the LoRA count has it) or where no
    backward runs."""
    adapted = {_input_key(profile, i) for i in targets}
    seen: set[tuple[int, int]] = set()
    out: dict[int, float] = {}
    for i in quantized:
        if not profile.layers[i].kfac_a_dim or not profile.layers[i].kfac_g_dim:
            continue  # a Linear without its widths (an old profile): nothing to size
        key = _input_key(profile, i)
        if i < backward_from or key in adapted or key in seen:
            continue
        seen.add(key)
        d_in, d_out, tokens = _dims(profile.layers[i])
        element = profile.layers[i].activation_bytes / (tokens * d_out) if tokens > 0 else 2.0
        out[i] = tokens * d_in * element
    return out


def finetune_profile(profile: Profile, job: Job, fused: bool = False) -> tuple[Profile, FrozenBase]:
    """``profile`` fine-tuned as ``job.finetune`` says (see the module docstring).

    Args:
        profile: A training profile (at the batch and sequence length to price: the transform
            adds weight-sized bytes that ``Profile.rescale`` would scale with the batch).
        job: The job; ``finetune`` must be set.
        fused: Targeted Linears that read the same input are one projection, adapted by one
            ``lora_A``/``lora_B`` pair of their summed output width (Megatron-Core's ``linear_qkv``
            and ``linear_fc1``: NeMo's LoRA adapts the fused GEMM); False: one pair per Linear
            (Hugging Face PEFT, LitGPT: separate modules).

    Returns:
        The transformed profile (its optimizer's state bytes set) and what it froze.

    Raises:
        SriftError: for a profile without a Linear layer in a block unit to adapt.
    """
    mode = job.finetune
    if mode is None:
        raise SriftError("the job is not a fine-tuning job.", "pass --finetune full, lora or qlora.")
    opt = finetune_optimizer(job)
    precision = job.precision or profile.precision
    state = optimizer_state_bytes_per_param(opt, precision)
    optimizer = OptimizerInfo(opt, state)
    if mode == FULL_FINETUNE:
        return (dataclasses.replace(profile, optimizer=optimizer),
                FrozenBase(mode, opt, 0, 0, {}, {}, 0, profile.params))
    targets = set(lora_targets(profile, job.lora_targets))
    if not targets:
        raise SriftError(f"profile '{profile.name}' has no Linear layer in a transformer block for LoRA to adapt.",
                         "use --finetune full, or a decoder LLM (zoo, --model-config, or a profile with FSDP units).")
    first = min(targets)
    # Under ``fused``, the pair of a group of targets reading one input goes after its last member.
    fused_width: dict[int, int] = {}
    if fused:
        groups: dict[tuple[int, int], list[int]] = {}
        for i in sorted(targets):
            groups.setdefault(_input_key(profile, i), []).append(i)
        fused_width = {g[-1]: sum(_dims(profile.layers[i])[1] for i in g) for g in groups.values()}
    nf4_bytes = NF4_BYTES_PER_PARAM if job.nf4_double_quant else NF4_NO_DQ_BYTES_PER_PARAM
    quantized = [i for i, layer in enumerate(profile.layers) if mode == QLORA and _is_linear(layer) and layer.params > 0
                 and (layer.unit is not None or job.quantize_head)]
    kept = _kept_inputs(profile, quantized, targets, first)
    quantized_set = set(quantized)
    layers: list[LayerProfile] = []
    unit_frozen: dict[str | None, int] = {}
    unit_quant: dict[str | None, int] = {}
    largest = 0
    for i, layer in enumerate(profile.layers):
        backward = i >= first
        if layer.params > 0:
            unit_frozen[layer.unit] = unit_frozen.get(layer.unit, 0) + layer.params
        if i in quantized_set:
            unit_quant[layer.unit] = unit_quant.get(layer.unit, 0) + layer.params
            largest = max(largest, layer.params)
            # A block Linear's leaf goes after it (one between a gated MLP's activation and its up
            # projection would hide the product act(gate) * up from the activation count), the
            # head's before it (the loss's memory reads the last layer as the head).
            deq = _dequantize(layer, backward, nf4_bytes, kept.get(i, 0.0))
            layers.extend([deq, _frozen(layer, backward)] if layer.unit is None else [_frozen(layer, backward), deq])
        else:
            layers.append(_frozen(layer, backward))
        if i in targets and (not fused or i in fused_width):
            layers.extend(_adapters(layer, job.lora_rank, fused_width.get(i)))
    frozen = sum(unit_frozen.values())
    out = dataclasses.replace(profile, layers=layers, optimizer=optimizer,
                              notes=[*profile.notes, f"{mode} fine-tuning: rank {job.lora_rank} adapters on "
                                     f"{job.lora_targets} Linears; base weights frozen"
                                     + (" in NF4" if mode == QLORA else "")])
    return out, FrozenBase(mode, opt, frozen, sum(unit_quant.values()), unit_frozen, unit_quant, largest, out.params,
                           nf4_bytes_per_param=nf4_bytes)


def frozen_in_profile(profile: Profile) -> FrozenBase | None:
    """What a measured profile of a fine-tuning script froze (``srift profile`` records the bytes of
    parameters with ``requires_grad=False`` per layer), or None when it is not one: when its frozen
    weights do not outweigh the trained ones (a frozen table in a model that trains, which the usual
    memory model counts as it is). ``qlora`` when a frozen layer is a 4-bit one (bitsandbytes'
    ``Linear4bit``), else ``lora``; the profile's layers already are the fine-tuning step, adapters
    included."""
    unit_bytes: dict[str | None, float] = {}
    for layer in profile.layers:
        if layer.frozen_bytes > 0:
            unit_bytes[layer.unit] = unit_bytes.get(layer.unit, 0.0) + layer.frozen_bytes
    if sum(unit_bytes.values()) <= profile.grad_bytes:
        return None
    mode = "qlora" if any(layer.frozen_bytes > 0 and "4bit" in layer.type.lower() for layer in profile.layers) else "lora"
    return FrozenBase(mode, profile.optimizer.type, 0, 0, {}, {}, 0, profile.params, unit_bytes)


def trainable_params(profile: Profile, job: Job) -> int:
    """Parameters that train when ``profile`` is fine-tuned as ``job`` says."""
    return finetune_profile(profile, job)[1].trainable_params


def finetune_memory_bytes(profile: Profile, frozen: FrozenBase, precision: str, parallelism: str, checkpointing: str,
                          shard_gpus: int, gpus: int = 1, fused_loss: bool = False,
                          activations: float | None = None, tricks: MemoryTricks = NO_TRICKS) -> dict[str, float]:
    """Bytes per GPU by kind of a fine-tuning job (see the module docstring).

    Args:
        profile: The fine-tuned profile (``finetune_profile``) at the per-GPU micro-batch.
        frozen: What ``finetune_profile`` froze.
        precision: The training precision.
        parallelism: ``ddp``, ``zero2``, ``fsdp`` or ``hsdp``.
        checkpointing: ``none``, ``selective`` or ``full``.
        shard_gpus: GPUs the states are sharded over (1 for ddp).
        gpus: GPUs of the job (DDP keeps a bucket copy of the trainable gradients when above 1).
        fused_loss: A fused cross-entropy kernel keeps no fp32 copy of the logits.
        activations: ``activation_bytes`` of this profile when the caller has it.
        tricks: The recipe's memory tricks (srift/simulate/offload.py): optimizer in backward
            (the gradients alive are the largest layer's, not all), activation offloading, CPU
            offload of the optimizer states and gradient shards (and of the parameter shards),
            paged optimizer states (off the GPU at the activation peak, on it in the step: the
            peak is the larger).
    """
    layout = unit_layout(profile)
    n = float(max(1, shard_gpus)) if parallelism != DDP else 1.0
    e = compute_param_bytes(precision)
    trainable = float(profile.params)
    state = float(profile.optimizer.state_bytes_per_param)
    acts = activation_bytes(profile, precision, checkpointing, fused_loss) if activations is None else activations
    stored = frozen.stored_bytes(precision) + trainable * e
    if parallelism == DDP:
        weights, gathered = stored, 0.0
        grads = trainable * e * (2.0 if gpus > 1 else 1.0)  # DDP's buckets copy the gradients
    else:
        weights = stored / n
        if parallelism == ZERO2:
            gathered = stored
        else:
            unit_bytes = [frozen.unit_stored_bytes(u, precision) + p * e
                          for u, p in zip(layout.units, layout.unit_params)]
            gathered = unit_bytes[0] + 2.0 * max(unit_bytes[1:], default=0.0)
        grads = trainable * e / n + (float(layout.root_params) + 2.0 * layout.max_block_params) * e
    if tricks.activation_offloading:
        acts = offloaded_activation_bytes(profile, precision, checkpointing, fused_loss)
    states = trainable * state / n
    if tricks.optimizer_in_backward or tricks.offloads_optimizer:
        # The whole set of gradients is never alive: each is stepped (on the GPU, or on the CPU
        # after its copy down) and freed; DDP's buckets, allocated once, stay.
        unsharded = trainable * e * (1.0 if parallelism == DDP and gpus > 1 else 0.0)
        grads = (unsharded + largest_layer_params(profile) * e if parallelism == DDP
                 else grads - trainable * e / n)
    if tricks.offloads_optimizer:
        states = 0.0
    if tricks.offloads_params:
        weights = 0.0
    parts = {"weights": weights, "gathered_weights": gathered, "dequantized_weight": frozen.largest_quantized * e,
             "gradients": grads, "optimizer_state": states, "activations": acts}
    if tricks.paged and not tricks.offloads_optimizer:
        # Paged states (managed memory) may sit on the host at the activation peak. Stepped in
        # backward, one parameter's are brought in at a time; else the step holds them all with
        # every gradient and no activation: the peak is the larger of the two.
        resident = states - paged_params(profile) * state / n
        if tricks.optimizer_in_backward:
            parts["optimizer_state"] = resident + largest_layer_params(profile) * state / n
        else:
            step = {**parts, "gathered_weights": 0.0, "dequantized_weight": 0.0, "activations": 0.0,
                    "gradients": grads if parallelism == DDP else trainable * e / n}
            parts = max({**parts, "optimizer_state": resident}, step, key=lambda p: sum(p.values()))
    return with_allocator(parts)


def allocated_bytes(breakdown: dict[str, float]) -> float:
    """What PyTorch's ``torch.cuda.max_memory_allocated`` would report of a memory breakdown:
    everything but the caching allocator's reserve."""
    return sum(allocated_parts(breakdown).values())
