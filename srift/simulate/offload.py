"""The memory tricks of fine-tuning recipes: what each keeps on the GPU and what it costs in time.

Pure arithmetic (no torch), on the fine-tuning memory model (srift/simulate/finetune.py's
``finetune_memory_bytes`` applies them; srift/simulate/workload.py prices their time for the plans).
Each is a plain job option (``Job.optimizer_in_backward``, ``Job.activation_offloading``,
``Job.cpu_offload``), which a stack's defaults may set.

- **Optimizer in backward** (torchtune's ``optimizer_in_bwd``, recipes/full_finetune_single_device.py,
  torchtune 0.6.1; ``8B_full_single_device.yaml`` sets it True): one optimizer per parameter, stepped
  by a post-accumulate-grad hook, so each gradient is freed once its parameter is updated. The
  peak holds the largest layer's gradients (``largest_layer_params``), not all of them. torchtune
  refuses it with gradient accumulation (``Job`` does too) and with gradient clipping.
- **Activation offloading** (torchtune's ``OffloadActivations``, training/_activation_offloading.py,
  0.6.1: a ``saved_tensors_hooks`` moving every saved tensor of at least ``min_offload_size`` = 1024
  bytes to pinned host memory on a side stream in forward, and back in backward): the GPU keeps
  two block units' saved tensors (the one computing and the one in flight), the root unit's
  (embedding, head) and, under checkpointing, the recomputed unit's; the loss's fp32 copies are made
  outside the context and stay. Time: every offloaded byte crosses the GPU's host link once each
  way; the copies run beside compute, so only what exceeds the forward (down) and the backward (up)
  time shows (``exposed_copy_s``).
- **CPU offload** (``optimizer``: DeepSpeed ZeRO-Offload's ``offload_optimizer`` device cpu, valid
  with ZeRO stage 1-3, deepspeed 0.16.4 runtime/zero/offload_config.py; FSDP's CPU Adam forms;
  ``params``: DeepSpeed's ``offload_param``, "valid only with stage 3", and FSDP's
  ``CPUOffload(offload_params=True)``, which also steps the optimizer on the CPU): the optimizer
  states and the gradient shards live in host memory (the GPU keeps the gradients in flight);
  ``params`` moves the parameter shards there too (the GPU keeps the gathered units). Time: the CPU
  Adam step (``CPU_ADAM_BYTES_PER_PARAM`` over ``HOST_MEMORY_GB_PER_S``) and the gradients down and
  the updated parameters up over the host link, after backward; ``params`` adds each unit's shard
  brought up before its all-gather in forward and backward, beside compute.
- **Paged 8-bit optimizers** (``--optimizer paged-adamw8bit``, bitsandbytes 0.45.5
  optim/optimizer.py ``get_state_buffer``): a state of a parameter of at least ``PAGED_MIN_NUMEL``
  = 1e5 elements is CUDA managed memory (``cudaMallocManaged``), which the driver evicts to the host
  under pressure and which PyTorch's allocator does not count; smaller ones are ordinary device
  tensors. At the activation peak the paged states may be on the host; in the step they are brought
  in while the activations are gone. The peak is the larger of the two (``finetune_memory_bytes``).

The host link of a GPU is its PCIe generation x16 (``HOST_LINK``, NVIDIA's datasheets: Volta and
Turing PCIe 3.0, Ampere and Ada 4.0, Hopper and Blackwell 5.0), at the link's peak in
configs/gpus.yaml: an estimate (pinned copies reach 80-90 % of it; DeepSpeed's ``pin_memory``
default is False, whose copies are slower), not validated on a measured offloaded run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from srift.hardware import CPU, gpu as gpu_spec, link
from srift.job import CPU_OFFLOAD_PARAMS, NO_CHECKPOINTING, NO_CPU_OFFLOAD, PAGED_ADAMW8BIT, Job
from srift.profile import Profile
from srift.simulate.memory import layer_activation_bytes, loss_bytes
from srift.simulate.sharded import checkpoint_masks, unit_layout

# bitsandbytes 0.45.5, optim/optimizer.py ``get_state_buffer``: ``p.numel() < 1e5`` -> a device tensor.
PAGED_MIN_NUMEL = 100_000
# DeepSpeed 0.16.4 csrc/includes/cpu_adam.h ``Step_AVX``: loads grads, exp_avg, exp_avg_sq and
# params and stores params, exp_avg and exp_avg_sq, every one fp32: 7 x 4 bytes per parameter.
CPU_ADAM_BYTES_PER_PARAM = 28.0
# Host DRAM bandwidth per GPU, an estimate: a dual-socket server of 8 DDR4-3200 channels per
# socket (2 x 204.8 GB/s) shared by 8 GPUs. Unvalidated (no measured offloaded step in data/).
HOST_MEMORY_GB_PER_S = 51.2
# The GPU's host interface by architecture (PCIe x16; NVIDIA datasheets), a link of configs/gpus.yaml.
HOST_LINK = {"kepler": "pcie3", "maxwell": "pcie3", "pascal": "pcie3", "volta": "pcie3", "turing": "pcie3",
             "ampere": "pcie4", "ada": "pcie4", "rdna": "pcie4", "hopper": "pcie5", "blackwell": "pcie5"}
# torchtune's OffloadActivations: the unit computing and the one whose tensors are in flight.
OFFLOAD_UNITS_ON_GPU = 2


@dataclass(frozen=True)
class MemoryTricks:
    """The memory tricks a job uses (module docstring)."""

    optimizer_in_backward: bool = False
    activation_offloading: bool = False
    cpu_offload: str = NO_CPU_OFFLOAD
    paged: bool = False

    @classmethod
    def of(cls, job: Job) -> "MemoryTricks":
        """The tricks of ``job``."""
        return cls(job.optimizer_in_backward, job.activation_offloading, job.cpu_offload,
                   job.optimizer == PAGED_ADAMW8BIT)

    @property
    def offloads_optimizer(self) -> bool:
        """Optimizer states (and gradient shards) in host memory."""
        return self.cpu_offload != NO_CPU_OFFLOAD

    @property
    def offloads_params(self) -> bool:
        """Parameter shards in host memory."""
        return self.cpu_offload == CPU_OFFLOAD_PARAMS


NO_TRICKS = MemoryTricks()


def host_link_gb_per_s(gpu: str) -> float:
    """GB/s one way between a GPU and its host (``HOST_LINK``)."""
    if gpu == CPU:
        return float("inf")
    return link(HOST_LINK.get(gpu_spec(gpu).architecture, "pcie4")).bandwidth_gb_per_s


def largest_layer_params(profile: Profile) -> float:
    """Trainable parameters of the largest layer: the gradients alive at once under optimizer in backward."""
    return float(max((layer.params for layer in profile.layers), default=0))


def paged_params(profile: Profile) -> float:
    """Trainable parameters whose states a paged optimizer puts in managed memory (``PAGED_MIN_NUMEL``)."""
    return float(sum(layer.params for layer in profile.layers if layer.params >= PAGED_MIN_NUMEL))


def offloaded_activation_bytes(profile: Profile, precision: str, checkpointing: str, fused_loss: bool) -> float:
    """Bytes of saved activations left on the GPU at the peak under activation offloading (module
    docstring): the root unit's, two block units' kept tensors (and checkpoint inputs), the
    recomputing unit's under checkpointing, and the loss's."""
    layout = unit_layout(profile)
    act = layer_activation_bytes(profile, precision)
    extra = loss_bytes(profile, precision, fused_loss)
    if layout.blocks == 0:
        return float(act.sum()) + extra
    masks = checkpoint_masks(profile, checkpointing)
    keep = masks.keep if checkpointing != NO_CHECKPOINTING else np.ones(len(act), dtype=bool)
    kept = np.zeros(len(layout.units))
    np.add.at(kept, layout.layer_unit, act * keep)
    if checkpointing != NO_CHECKPOINTING:
        kept = kept + layout.input_bytes
    dropped = np.zeros(len(layout.units))
    np.add.at(dropped, layout.layer_unit, act * ~keep)
    blocks = np.sort(kept[1:])[::-1][:OFFLOAD_UNITS_ON_GPU]
    return float(kept[0] + blocks.sum() + (dropped[1:].max() if len(dropped) > 1 else 0.0)) + extra


def exposed_copy_s(copy_bytes: float, gpu: str, beside_s: float) -> float:
    """Seconds a copy of ``copy_bytes`` over the host link adds beyond ``beside_s`` of compute it overlaps."""
    return max(0.0, copy_bytes / (host_link_gb_per_s(gpu) * 1e9) - beside_s)


@dataclass(frozen=True)
class OffloadTimes:
    """Seconds the tricks add to an iteration: waiting for copies in forward and in backward (per
    micro-batch), and the optimizer step in place of the GPU's (None: the GPU's)."""

    forward_s: float = 0.0
    backward_s: float = 0.0
    optimizer_s: float | None = None


def cpu_step_s(trainable_per_gpu: float, param_bytes: float, gpu: str) -> float:
    """The CPU Adam step of ``trainable_per_gpu`` parameters and its host traffic: the gradients down
    and the updated parameters up (``param_bytes`` each) over the host link, after backward."""
    cpu = trainable_per_gpu * CPU_ADAM_BYTES_PER_PARAM / (HOST_MEMORY_GB_PER_S * 1e9)
    pcie = 2.0 * trainable_per_gpu * param_bytes / (host_link_gb_per_s(gpu) * 1e9)
    return cpu + pcie


def trick_notes(tricks: MemoryTricks) -> list[str]:
    """One line per trick a prediction used, with what it rests on."""
    notes = []
    if tricks.optimizer_in_backward:
        notes.append("optimizer in backward: each gradient freed once its parameter is stepped (the largest layer's "
                     "alive at once; torchtune's optimizer_in_bwd)")
    if tricks.activation_offloading:
        notes.append("activation offloading: saved activations to host memory (two block units kept on the GPU); "
                     "the copies beyond the forward and backward they overlap are in those phases (host link: PCIe "
                     "peak, an estimate)")
    if tricks.offloads_optimizer:
        what = "optimizer states, gradient and parameter shards" if tricks.offloads_params else "optimizer states and gradient shards"
        notes.append(f"CPU offload: {what} in host memory; the optimizer step is CPU Adam ({CPU_ADAM_BYTES_PER_PARAM:g} "
                     f"bytes per parameter at an estimated {HOST_MEMORY_GB_PER_S:g} GB/s of host memory per GPU) plus the "
                     "gradients down and the parameters up over PCIe (estimates, unvalidated)")
    if tricks.paged and not tricks.offloads_optimizer:
        notes.append(f"paged 8-bit states: those of tensors of {PAGED_MIN_NUMEL:,} elements or more are CUDA managed "
                     "memory, off the GPU at the activation peak, on it in the step (bitsandbytes 0.45.5)")
    return notes
