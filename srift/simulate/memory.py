"""Per-GPU memory of data-parallel training: the peak the caching allocator reserves, and does it fit?

Every breakdown below is what PyTorch *allocates* at the peak (the start of backward, when every
saved activation is alive), plus ``allocator``: what PyTorch's caching allocator reserves beyond
that (block rounding, blocks split between tensors of different lifetimes, per-stream pools,
cuBLAS/cuDNN workspaces), ``reserved = ALLOCATOR_FACTOR x allocated + ALLOCATOR_FIXED_BYTES``,
fitted on every published peak-reserved figure srift can model (scripts/validate_memory.py, which
prints the fit, its MAPE and leave-one-source-out). The breakdown adds up to the peak reserved
memory (``Prediction.memory_per_gpu_bytes``): what decides an out-of-memory error.

DDP (``memory_breakdown_bytes``, any profile; documented in docs/simulator.md):
  weights      params x 4 bytes (fp32 master weights; + 2 bytes/param for amp's or bf16's half copies)
  gradients    DDP's bucket buffers (grad_bytes; none on one GPU: no DDP) + the gradients (grad_bytes,
               fp32) when they outweigh the activations (they replace them during backward)
  optimizer    params x optimizer state bytes per parameter (SGD momentum 4, Adam 8)
  activations  what autograd saves at this per-GPU batch (``layer_activation_bytes``), when it
               outweighs the gradients
  allocator    the caching allocator's reserve beyond what is allocated (above)

Sharded jobs, and any job of a profile with FSDP units (``sharded_memory_bytes``; docs/sharded.md
has the formula with a worked 7B example). ``P`` parameters, ``N`` GPUs the states are sharded
over (``fsdp``, ``zero2``: all; ``hsdp``: one node's; ``ddp``: 1), ``e`` bytes of a parameter as
computed (2 under bf16, FSDP MixedPrecision's param_dtype; 4 otherwise), ``s`` optimizer state
bytes per parameter (Adam: 8):
  weights           4P/N: the fp32 master parameters (DDP: 4P, + 2P half copies under amp/bf16)
  gathered_weights  parameters all-gathered for compute: fsdp/hsdp the root unit (embeddings,
                    head: kept from forward to backward) + 2 block units (the one computing and the
                    one prefetched); zero2 every unit (kept from forward to the end of backward)
  gradients         4P/N sharded fp32 gradients + the unsharded gradients in flight: the root's
                    (alive through backward, in param dtype) and 2 block units' (one computing,
                    in param dtype; one reduce-scattering, plus its fp32 copy when reduced in fp32).
                    DDP: 4P + 4P buckets
  optimizer_state   sP/N
  activations       what autograd keeps (below), for one micro-batch
  allocator         the caching allocator's reserve beyond what is allocated (above)
Activations (``layer_activation_bytes``): where the profile counted them, the storages autograd
saves (``LayerProfile.saved_bytes``, fp32, or ``saved_half_bytes`` under amp/bf16; measured with
saved_tensors_hooks, srift/profiling/saved.py: the loss's are the last layer's). Otherwise (the
analytic LLM profiles) the layer outputs, plus what autograd keeps that no leaf outputs: a gated
MLP's product ``act(gate) * up`` (``sharded.gated_product_bytes``) and, at the loss, the fp32 copy
of the logits and log-softmax's fp32 output (cross-entropy upcasts half-precision logits: 4 + 4
bytes per logit; 4 under fp32; none with a fused cross-entropy kernel, ``Job.fused_loss``).
Checkpointed block units keep their input and, under ``selective``, the outputs of the layers the
policy saves; the unit recomputing in backward holds the rest of its activations once more (the
largest unit's, at the peak).
Fit, at confidence (``fit_state``): the reserved peak has a typical relative error
(``ALLOCATOR_ERROR``, the fit's leave-one-source-out error); a configuration ``fits`` when the 90th
percentile of its reserved peak is at most USABLE_FRACTION of the GPU's memory (the rest holds the
CUDA context and NCCL's buffers, which PyTorch does not reserve), ``does not fit`` when its median
is above that, and ``may not fit`` between the two: shown, never dropped.
"""

from __future__ import annotations

import numpy as np

from srift.job import BF16, DDP, FP32, HALF_PRECISIONS, NO_CHECKPOINTING, REDUCE_BYTES_PER_ELEMENT, ZERO2
from srift.perf.compute import layer_kind
from srift.perf.quantiles import Z90
from srift.profile import Profile
from srift.simulate.sharded import checkpoint_masks, gated_product_bytes, unit_layout

USABLE_FRACTION = 0.95
# The caching allocator: reserved = ALLOCATOR_FACTOR x allocated + ALLOCATOR_FIXED_BYTES, and the
# typical relative error of that reserved peak (ALLOCATOR_ERROR, a standard deviation).
# ALLOCATOR_FACTOR: fitted by scripts/validate_memory.py on the 12 published peak-reserved figures
# of data/ (torchtitan, torchao: 0.965, held at 1 since the allocator never reserves less than it
# allocates). ALLOCATOR_FIXED_BYTES: estimated (cuBLAS/cuDNN workspaces; peaks of tens of GiB cannot
# pin it). ALLOCATOR_ERROR: the std of the leave-one-source-out errors the script prints.
ALLOCATOR_FACTOR = 1.0
ALLOCATOR_FIXED_BYTES = 0.5 * 2**30
ALLOCATOR_ERROR = 0.137
FIT_STATES = ("fits", "may not fit", "does not fit")
FITS = FIT_STATES[0]
MASTER_BYTES = 4.0  # fp32 master parameters and sharded gradients
LOSS_FP32_BYTES = 4.0  # log-softmax's fp32 output per logit, and the fp32 upcast of half logits


def allocator_bytes(allocated_bytes: float) -> float:
    """What the caching allocator reserves beyond ``allocated_bytes`` at the peak (module docstring)."""
    return (ALLOCATOR_FACTOR - 1.0) * allocated_bytes + ALLOCATOR_FIXED_BYTES


def with_allocator(allocated: dict[str, float]) -> dict[str, float]:
    """``allocated`` (bytes by kind) with the ``allocator`` entry added: the parts add up to the
    peak reserved memory."""
    return {**allocated, "allocator": allocator_bytes(sum(allocated.values()))}


def allocated_parts(breakdown: dict[str, float]) -> dict[str, float]:
    """A breakdown less its ``allocator`` entry: what PyTorch allocates at the peak, by kind."""
    return {k: v for k, v in breakdown.items() if k != "allocator"}


def reserved_p90_bytes(reserved_bytes: float) -> float:
    """The 90th percentile of a predicted reserved peak (its typical error, ALLOCATOR_ERROR)."""
    return reserved_bytes * (1.0 + Z90 * ALLOCATOR_ERROR)


def sure_fit_bytes(usable: float) -> float:
    """The largest reserved peak that fits ``usable`` bytes for sure (its p90 under them: ``fit_state``)."""
    return usable / (1.0 + Z90 * ALLOCATOR_ERROR)


def usable_bytes(gpu_memory_gib: float) -> float:
    """What PyTorch may reserve on a GPU of ``gpu_memory_gib``."""
    return gpu_memory_gib * 2**30 * USABLE_FRACTION


def fit_state(reserved_bytes: float, gpu_memory_gib: float) -> str:
    """``fits`` (its p90 is under the usable memory), ``does not fit`` (its median is over) or
    ``may not fit`` (between: within the prediction's error)."""
    cap = usable_bytes(gpu_memory_gib)
    if reserved_p90_bytes(reserved_bytes) <= cap:
        return "fits"
    return "may not fit" if reserved_bytes <= cap else "does not fit"


def reserved_breakdown_bytes(*, weight_bytes: float, gradient_bytes: float, optimizer_bytes: float,
                             activation_bytes: float, **other_bytes: float) -> dict[str, float]:
    """The peak's parts by kind, the allocator's reserve added (they add up to the peak reserved
    memory): the building block for a job this module does not lay out itself (fine-tuning with
    frozen or quantised weights, LoRA adapters). Each argument is what is alive at the peak.

    Raises:
        ValueError: for a negative or non-finite part.
    """
    parts = {"weights": weight_bytes, "gradients": gradient_bytes, "optimizer_state": optimizer_bytes,
             "activations": activation_bytes, **other_bytes}
    for key, value in parts.items():
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"memory part {key} must be a finite number of bytes >= 0, got {value!r}")
    return with_allocator({k: float(v) for k, v in parts.items()})


def has_saved_bytes(profile: Profile, precision: str) -> bool:
    """Whether the profile counted what autograd saves at ``precision`` (module docstring)."""
    half = precision in HALF_PRECISIONS
    return bool(profile.layers) and all(
        (layer.saved_half_bytes if half else layer.saved_bytes) is not None for layer in profile.layers
        if layer.type != "Parameters")


def layer_activation_bytes(profile: Profile, precision: str) -> np.ndarray:
    """Per layer, the bytes autograd keeps from forward to backward at ``precision``: the saved
    storages where the profile counted them (``has_saved_bytes``), else the layer outputs with a
    gated MLP's product (the profile's own precision: the predictor scales them)."""
    half = precision in HALF_PRECISIONS
    if has_saved_bytes(profile, precision):
        return np.array([(layer.saved_half_bytes if half else layer.saved_bytes) or 0.0 for layer in profile.layers],
                        dtype=float)
    outputs = np.array([layer.activation_bytes for layer in profile.layers], dtype=float) + gated_product_bytes(profile)
    # Layer outputs counted at another precision: 16-bit outputs are half as large (an estimate).
    was_half = profile.precision in HALF_PRECISIONS
    return outputs * (0.5 if (half and not was_half) else (2.0 if (was_half and not half) else 1.0))


def memory_breakdown_bytes(profile: Profile, precision: str, buckets: bool = True) -> dict[str, float]:
    """DDP's bytes per GPU alive at the peak, by kind, for a profile (already at the per-GPU batch)
    and precision (``buckets``: DDP's bucket buffers; False on one GPU), the allocator's reserve
    included (they add up to the peak reserved memory).

    Gradients are freed between iterations (``zero_grad(set_to_none=True)``, PyTorch's default
    since 2.0) and appear during backward as the activations are freed, so the peak is at the
    start of backward (the activations, ``layer_activation_bytes``, with the loss's fp32 copies,
    ``loss_bytes``, for layer outputs) or at its end (the gradients), whichever holds more; the
    other shows as 0. DDP's buckets are allocated once and stay.
    """
    params = float(profile.params)
    state = float(profile.optimizer.state_bytes_per_param)
    acts = float(layer_activation_bytes(profile, precision).sum())
    if not has_saved_bytes(profile, precision):
        acts += loss_bytes(profile, precision)
    grads = float(profile.grad_bytes)
    return with_allocator({
        "weights": params * (6.0 if precision in HALF_PRECISIONS else 4.0),
        "gradients": (grads if buckets else 0.0) + (grads if grads > acts else 0.0),
        "optimizer_state": params * state,
        "activations": acts if acts >= grads else 0.0,
    })


def compute_param_bytes(precision: str) -> float:
    """Bytes of a parameter as the GPU computes with it: 2 under bf16 (FSDP MixedPrecision
    ``param_dtype``), else 4 (fp32 parameters; amp's autocast casts per op)."""
    return 2.0 if precision == BF16 else 4.0


def loss_bytes(profile: Profile, precision: str, fused: bool = False) -> float:
    """What the loss keeps beyond the logits (the output of a sequence model's head, its last
    layer): log-softmax's fp32 output and, for half-precision logits, their fp32 upcast; nothing
    for a fused cross-entropy kernel (it writes the gradient over the logits)."""
    if fused or not profile.layers or profile.seq_len is None or has_saved_bytes(profile, precision):
        return 0.0  # saved bytes count the loss's own (it ran in the counted step)
    head = profile.layers[-1]
    if head.unit is not None or layer_kind(head.type) != "matmul":
        return 0.0
    e = 2.0 if precision in HALF_PRECISIONS else 4.0
    elements = head.activation_bytes / e
    return elements * (LOSS_FP32_BYTES + (LOSS_FP32_BYTES if e < LOSS_FP32_BYTES else 0.0))


def activation_bytes(profile: Profile, precision: str, checkpointing: str, fused_loss: bool = False) -> float:
    """Peak bytes autograd keeps for one micro-batch of ``profile`` (at its batch) under a
    checkpointing policy (see the module docstring)."""
    layout = unit_layout(profile)
    act = layer_activation_bytes(profile, precision)
    extra = loss_bytes(profile, precision, fused_loss)
    if checkpointing == NO_CHECKPOINTING or layout.blocks == 0:
        return float(act.sum()) + extra
    masks = checkpoint_masks(profile, checkpointing)
    kept = np.zeros(len(layout.units))
    np.add.at(kept, layout.layer_unit, act * masks.keep)
    dropped = np.zeros(len(layout.units))
    np.add.at(dropped, layout.layer_unit, act * ~masks.keep)
    return float(kept.sum() + layout.input_bytes.sum() + dropped[1:].max()) + extra


def sharded_memory_bytes(profile: Profile, precision: str, parallelism: str, checkpointing: str, shard_gpus: int,
                         reduce_dtype: str = "fp32", fused_loss: bool = False,
                         activations: float | None = None, buckets: bool = True) -> dict[str, float]:
    """Bytes per GPU by kind (see the module docstring) for ``profile`` at its per-GPU micro-batch.

    Args:
        profile: The job's profile at the micro-batch.
        precision: One of srift.job.PRECISIONS.
        parallelism: ``ddp``, ``zero2``, ``fsdp`` or ``hsdp``.
        checkpointing: ``none``, ``selective`` or ``full``.
        shard_gpus: GPUs the states are sharded over (all of them; one node's under hsdp; 1 for ddp).
        reduce_dtype: ``fp32`` or ``bf16`` (gradients reduced in).
        fused_loss: The loss is a fused cross-entropy kernel (``loss_bytes``).
        activations: ``activation_bytes`` of this profile, precision, checkpointing and loss when
            the caller has it (it does not depend on the parallelism).
        buckets: DDP's gradient buckets (``ddp`` on more than one GPU).
    """
    layout = unit_layout(profile)
    p = layout.params
    n = float(max(1, shard_gpus)) if parallelism != DDP else 1.0
    e = compute_param_bytes(precision)
    state = float(profile.optimizer.state_bytes_per_param)
    acts = activation_bytes(profile, precision, checkpointing, fused_loss) if activations is None else activations
    if parallelism == DDP:
        weights = p * MASTER_BYTES
        gathered = p * 2.0 if precision in HALF_PRECISIONS else 0.0
        grads = (2.0 if buckets else 1.0) * layout.grad_bytes
    else:
        states = sharded_state_bytes(p, float(layout.root_params), float(layout.max_block_params), e, state,
                                     parallelism, n, reduce_dtype)
        return with_allocator({**states, "activations": acts})
    return with_allocator({
        "weights": weights,
        "gathered_weights": gathered,
        "gradients": grads,
        "optimizer_state": p * state / n,
        "activations": acts,
    })


def sharded_state_bytes(params: float, root_params: float, block_params: float, param_bytes: float, state_bytes: float,
                        parallelism: str, shard: float, reduce_dtype: str = "fp32",
                        resharded: bool = True) -> dict[str, float]:
    """Bytes per GPU of a sharded job's parameters, gradients and optimizer states (the module
    docstring's ``weights``, ``gathered_weights``, ``gradients`` and ``optimizer_state``): ``params``
    over ``shard`` GPUs, of which ``root_params`` in the root unit and ``block_params`` in the
    largest block unit, ``param_bytes`` a parameter as computed, ``state_bytes`` of optimizer state
    per parameter. ``resharded``: FSDP frees a block's gathered parameters after its forward and
    frees its unsharded gradients once reduced (``reshard_after_forward``); otherwise (``zero2``,
    and FSDP2 under a pipeline, which gathers once a step and reduce-scatters after the last
    micro-batch: torchtitan) every parameter stays gathered and every unsharded gradient is
    accumulated in the reduce dtype until the step's reduce-scatter."""
    grad_e = param_bytes + (MASTER_BYTES if (reduce_dtype == FP32 and param_bytes < MASTER_BYTES) else 0.0)
    if not resharded and parallelism != ZERO2:
        # FSDP2 without gradient sync keeps the accumulated unsharded gradients in the reduce dtype.
        gathered = params * param_bytes
        in_flight = params * float(REDUCE_BYTES_PER_ELEMENT[reduce_dtype]) + block_params * param_bytes  # type: ignore[index]
    else:
        live = params if parallelism == ZERO2 else root_params + 2.0 * block_params
        gathered = live * param_bytes
        # The root's gradients (head, embeddings) live through backward in param dtype; two
        # blocks' are in flight: one computing (param dtype), one reduce-scattering (plus its
        # fp32 copy when reduced in fp32).
        in_flight = root_params * param_bytes + block_params * (param_bytes + grad_e)
    return {"weights": params * MASTER_BYTES / shard, "gathered_weights": gathered,
            "gradients": params * MASTER_BYTES / shard + in_flight, "optimizer_state": params * state_bytes / shard}


def fits(total_bytes: float, gpu_memory_gib: float) -> bool:
    """True unless the reserved peak ``total_bytes`` certainly does not fit a GPU of
    ``gpu_memory_gib`` (``fit_state``: "fits" and "may not fit" are kept; a run people ran must
    never be refused)."""
    return fit_state(total_bytes, gpu_memory_gib) != "does not fit"
