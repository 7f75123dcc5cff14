"""Per-GPU memory of data-parallel training: does the job fit?

DDP (``memory_breakdown_bytes``, any profile; documented in docs/simulator.md):
  weights      params x 4 bytes (fp32 master weights; + 2 bytes/param for amp's or bf16's half copies)
  gradients    grad_bytes (fp32) + the same again for DDP's bucket buffers
  optimizer    params x optimizer state bytes per parameter (SGD momentum 4, Adam 8)
  activations  the profile's activation bytes at this per-GPU batch (halved under AMP by the profiler)
  workspace    1 GiB for the CUDA context, cuDNN/cuBLAS workspaces and the allocator's slack

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
  fragmentation     FRAGMENTATION of what is allocated and freed every iteration (activations,
                    gathered weights, gradients in flight): the caching allocator's slack
  workspace         1 GiB: CUDA context, cuBLAS/NCCL workspaces
Activations: the profile's layer outputs, plus what autograd keeps that no leaf outputs: a gated
MLP's product ``act(gate) * up`` (``sharded.gated_product_bytes``) and, at the loss, the fp32 copy
of the logits and log-softmax's fp32 output (cross-entropy upcasts half-precision logits: 4 + 4
bytes per logit; 4 under fp32; none with a fused cross-entropy kernel, ``Job.fused_loss``). Checkpointed block units keep their input and, under
``selective``, the outputs of the layers the policy saves; the unit recomputing in backward holds
the rest of its activations once more (the largest unit's, at the peak).
A configuration fits when the total is at most USABLE_FRACTION of the GPU's memory.
"""

from __future__ import annotations

import numpy as np

from srift.job import HALF_PRECISIONS
from srift.perf.compute import layer_kind
from srift.profile import Profile
from srift.simulate.sharded import checkpoint_masks, gated_product_bytes, unit_layout

WORKSPACE_BYTES = 1.0 * 2**30
USABLE_FRACTION = 0.95
# Slack of PyTorch's caching allocator on the memory it recycles every iteration (block rounding,
# blocks split between tensors of different lifetimes): 10 %. Persistent states (parameters,
# sharded gradients, optimizer states) are allocated once and are not charged.
FRAGMENTATION = 0.10
MASTER_BYTES = 4.0  # fp32 master parameters and sharded gradients
LOSS_FP32_BYTES = 4.0  # log-softmax's fp32 output per logit, and the fp32 upcast of half logits


def memory_breakdown_bytes(profile: Profile, precision: str) -> dict[str, float]:
    """DDP's bytes per GPU by kind for a profile (already at the per-GPU batch) and precision."""
    params = float(profile.params)
    state = float(profile.optimizer.get("state_bytes_per_param", 4))
    return {
        "weights": params * (6.0 if precision in HALF_PRECISIONS else 4.0),
        "gradients": 2.0 * float(profile.grad_bytes),
        "optimizer_state": params * state,
        "activations": float(profile.activation_bytes),
        "workspace": WORKSPACE_BYTES,
    }


def compute_param_bytes(precision: str) -> float:
    """Bytes of a parameter as the GPU computes with it: 2 under bf16 (FSDP MixedPrecision
    ``param_dtype``), else 4 (fp32 parameters; amp's autocast casts per op)."""
    return 2.0 if precision == "bf16" else 4.0


def loss_bytes(profile: Profile, precision: str, fused: bool = False) -> float:
    """What the loss keeps beyond the logits (the output of a sequence model's head, its last
    layer): log-softmax's fp32 output and, for half-precision logits, their fp32 upcast; nothing
    for a fused cross-entropy kernel (it writes the gradient over the logits)."""
    if fused or not profile.layers or profile.seq_len is None:
        return 0.0
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
    act = np.array([layer.activation_bytes for layer in profile.layers], dtype=float) + gated_product_bytes(profile)
    extra = loss_bytes(profile, precision, fused_loss)
    if checkpointing == "none" or layout.blocks == 0:
        return float(act.sum()) + extra
    masks = checkpoint_masks(profile, checkpointing)
    kept = np.zeros(len(layout.units))
    np.add.at(kept, layout.layer_unit, act * masks.keep)
    dropped = np.zeros(len(layout.units))
    np.add.at(dropped, layout.layer_unit, act * ~masks.keep)
    return float(kept.sum() + layout.input_bytes.sum() + dropped[1:].max()) + extra


def sharded_memory_bytes(profile: Profile, precision: str, parallelism: str, checkpointing: str, shard_gpus: int,
                         reduce_dtype: str = "fp32", fused_loss: bool = False,
                         activations: float | None = None) -> dict[str, float]:
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
    """
    layout = unit_layout(profile)
    p = layout.params
    n = float(max(1, shard_gpus)) if parallelism != "ddp" else 1.0
    e = compute_param_bytes(precision)
    state = float(profile.optimizer.get("state_bytes_per_param", 4) or 0)
    acts = activation_bytes(profile, precision, checkpointing, fused_loss) if activations is None else activations
    if parallelism == "ddp":
        weights = p * MASTER_BYTES
        gathered = p * 2.0 if precision in HALF_PRECISIONS else 0.0
        grads = 2.0 * layout.grad_bytes
        in_flight = 0.0
    else:
        weights = p * MASTER_BYTES / n
        root, block = float(layout.root_params), float(layout.max_block_params)
        live = p if parallelism == "zero2" else root + 2.0 * block
        gathered = live * e
        # The root's gradients (head, embeddings) live through backward in param dtype; two
        # blocks' are in flight: one computing (param dtype), one reduce-scattering (plus its
        # fp32 copy when reduced in fp32).
        grad_e = e + (MASTER_BYTES if (reduce_dtype == "fp32" and e < MASTER_BYTES) else 0.0)
        in_flight = root * e + block * (e + grad_e)
        grads = p * MASTER_BYTES / n + in_flight
    churn = acts + (gathered if parallelism != "ddp" else 0.0) + in_flight
    return {
        "weights": weights,
        "gathered_weights": gathered,
        "gradients": grads,
        "optimizer_state": p * state / n,
        "activations": acts,
        "fragmentation": FRAGMENTATION * churn,
        "workspace": WORKSPACE_BYTES,
    }


def fits(total_bytes: float, gpu_memory_gib: float) -> bool:
    """True when ``total_bytes`` fits in a GPU of ``gpu_memory_gib`` (usable fraction applied)."""
    return total_bytes <= gpu_memory_gib * 2**30 * USABLE_FRACTION
