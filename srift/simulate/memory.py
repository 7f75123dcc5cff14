"""Per-GPU memory of data-parallel training: does the job fit?

Estimate (documented in docs/simulator.md):
  weights      params x 4 bytes (fp32 master weights; + 2 bytes/param for AMP's fp16 copies)
  gradients    grad_bytes (fp32) + the same again for DDP's bucket buffers
  optimizer    params x optimizer state bytes per parameter (SGD momentum 4, Adam 8)
  activations  the profile's activation bytes at this per-GPU batch (halved under AMP by the profiler)
  workspace    1 GiB for the CUDA context, cuDNN/cuBLAS workspaces and the allocator's slack
A configuration fits when the total is at most 95 % of the GPU's memory.
"""

from __future__ import annotations

from srift.profile import Profile

WORKSPACE_BYTES = 1.0 * 2**30
USABLE_FRACTION = 0.95


def memory_breakdown_bytes(profile: Profile, precision: str) -> dict[str, float]:
    """Bytes per GPU by kind for a profile (already at the per-GPU batch) and precision."""
    params = float(profile.params)
    state = float(profile.optimizer.get("state_bytes_per_param", 4))
    return {
        "weights": params * (6.0 if precision == "amp" else 4.0),
        "gradients": 2.0 * float(profile.grad_bytes),
        "optimizer_state": params * state,
        "activations": float(profile.activation_bytes),
        "workspace": WORKSPACE_BYTES,
    }


def fits(total_bytes: float, gpu_memory_gib: float) -> bool:
    """True when ``total_bytes`` fits in a GPU of ``gpu_memory_gib`` (usable fraction applied)."""
    return total_bytes <= gpu_memory_gib * 2**30 * USABLE_FRACTION
