"""What a DDP communication hook (``--grad-compression``) costs per gradient bucket: the bytes each
of its all-reduces puts on the wire and the GPU work it adds, read off PyTorch's own hooks
(torch 2.13.0, torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py and powerSGD_hook.py).

DDP's default hook divides the bucket by the world size in place and all-reduces it: one kernel
reading and writing each element (``DEFAULT_BYTES_PER_ELEMENT``). The figures here are what a hook
adds on top of that (so ``none`` adds nothing):

- ``fp16`` / ``bf16`` (``_compress_hook``): ``buffer.to(dtype).div_(world_size)``, all-reduce,
  ``buffer.copy_(result)``: a cast (4 bytes read, 2 written), a half-precision divide (2 + 2) and the
  copy back (2 + 4) in place of the default's divide (4 + 4): 8 bytes more per fp32 element and
  two more kernels. The wire carries 2 bytes per element (gradients already in 16 bits: as many).
- ``powersgd:R`` (``powerSGD_hook``, PowerSGDState defaults: ``min_compression_rate`` 2, error
  feedback and warm start on): each gradient ``tensor.view(shape[0], -1)`` (n x m) with
  ``(n + m) R x 2 < n m`` is compressed to P (n x R) and Q (m x R); the others (biases, norms, 1-D
  tensors) are all-reduced as they are. Three all-reduces per bucket, one after the other: the
  uncompressed tensors, the Ps, the Qs. GPU work: error feedback over the whole bucket (add the
  error 4+4+4, clone 4+4, new error 4+4+4: 32 bytes per element), three batched matmuls per
  compressed matrix (M Q, M^T P, P Q^T: 2 n m R FLOPs each, each reading or writing M: 4 bytes per
  element), the uncompressed tensors' concatenation and copy back (8 + 8), and Gram-Schmidt of Q
  and P (R columns, two kernels each). A layer's matrix shape is the one its profile records for
  K-FAC (``kfac_g_dim`` rows); a layer without one (norms, embeddings) is counted uncompressed.

Each hook kernel also pays the compute model's fixed cost per pass (``launch_s``). PyTorch's hook
starts compressing only after ``start_powerSGD_iter`` (1,000) iterations; srift prices the steady
state after it.

Accuracy: fp16/bf16 compression sums gradients in 16 bits (bf16: 8 mantissa bits); PowerSGD is
lossy, made unbiased over time by error feedback (Vogels et al., "PowerSGD: Practical Low-Rank
Gradient Compression for Distributed Optimization", NeurIPS 2019: rank 2 matched full-precision
ResNet-18 / CIFAR-10 accuracy, rank 1 lost about 0.3 points). srift prices time, not accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from srift.hardware import gpu as gpu_spec
from srift.job import GradCompression
from srift.profile import LayerProfile, Profile

DEFAULT_BYTES_PER_ELEMENT = 8.0  # DDP's default hook: tensor.div_(world_size) on fp32 gradients
HALF_EXTRA_BYTES_PER_ELEMENT = 8.0  # cast 4+2, divide 2+2, copy back 2+4, less the default's 4+4
HALF_EXTRA_KERNELS = 2
POWERSGD_FEEDBACK_BYTES = 32.0  # per element of the bucket: add error, clone, new error
POWERSGD_MATMUL_BYTES = 12.0  # per compressed element: M read by two matmuls, written by the third
POWERSGD_UNCOMPRESSED_BYTES = 16.0  # per uncompressed element: torch.cat and the copy back
POWERSGD_MIN_COMPRESSION_RATE = 2  # PowerSGDState(min_compression_rate=2)
GRAD_BYTES = 4  # fp32 gradients (parameters in fp32, autocast or not)


@dataclass(frozen=True)
class HookCost:
    """A hook's cost per DDP bucket (arrays in bucket order).

    Attributes:
        wire_bytes: Bytes of each all-reduce a bucket runs, one row per all-reduce (one row for
            none/fp16/bf16; three for PowerSGD: uncompressed tensors, Ps, Qs).
        extra_bytes: GPU memory traffic the hook adds over DDP's default, per bucket.
        flops: Matmul FLOPs it adds (fp32), per bucket.
        kernels: Kernels it adds, per bucket.
    """

    wire_bytes: np.ndarray
    extra_bytes: np.ndarray
    flops: np.ndarray
    kernels: np.ndarray

    def seconds(self, gpu: str, launch_s: float) -> np.ndarray:
        """The hook's GPU seconds per bucket on ``gpu``: memory traffic at its bandwidth, the
        matmuls at its fp32 peak, and ``launch_s`` per kernel (the compute model's fixed cost)."""
        spec = gpu_spec(gpu)
        return (self.extra_bytes / spec.memory_bandwidth_bytes_per_s + self.flops / (spec.fp32_tflops * 1e12)
                + self.kernels * launch_s)


def matrix_shape(layer: LayerProfile) -> tuple[int, int] | None:
    """The (n, m) a layer's weight has as ``tensor.view(shape[0], -1)``: ``kfac_g_dim`` rows (output
    features or channels) by its parameters over them. A bias (``n`` more elements, a 1-D tensor
    all-reduced uncompressed) is counted in the matrix: ``kfac_a_dim`` includes it or a bias-free
    input alike, so the profile cannot tell them apart, and it is ``1 / m`` of the layer. None
    without a recorded shape."""
    n = layer.kfac_g_dim
    if not n or not layer.kfac_a_dim or layer.params <= 0 or layer.params % n:
        return None
    return n, layer.params // n


def _layer_cost(layer: LayerProfile, hook: GradCompression) -> tuple[float, ...]:
    """(uncompressed, P and Q bytes on the wire, extra bytes, FLOPs, kernels) of one layer's
    gradients under ``hook`` (elements of the gradients' own size: ``grad_bytes / params``)."""
    elems = float(layer.params) if layer.params > 0 else float(layer.grad_bytes) / GRAD_BYTES
    size = float(layer.grad_bytes) / elems if elems else float(GRAD_BYTES)
    if hook.half:
        scale = min(size, 4.0) / GRAD_BYTES  # the copies move elements of the gradients' size
        return min(size, 2.0) * elems, 0.0, 0.0, HALF_EXTRA_BYTES_PER_ELEMENT * scale * elems, 0.0, 0.0
    shape = matrix_shape(layer)
    feedback = (POWERSGD_FEEDBACK_BYTES - DEFAULT_BYTES_PER_ELEMENT) * size / GRAD_BYTES * elems
    if shape is not None:
        n, m = shape
        rank = min(n, m, hook.rank)
        if (n + m) * rank * POWERSGD_MIN_COMPRESSION_RATE < n * m:
            rest = elems - n * m
            return (size * rest, size * n * rank, size * m * rank,
                    feedback + (POWERSGD_MATMUL_BYTES * n * m + POWERSGD_UNCOMPRESSED_BYTES * rest) * size / GRAD_BYTES,
                    6.0 * n * m * rank, 3.0 + 4.0 * rank + (1.0 if rest > 0 else 0.0))
    return size * elems, 0.0, 0.0, feedback + POWERSGD_UNCOMPRESSED_BYTES * size / GRAD_BYTES * elems, 0.0, 1.0


def hook_cost(profile: Profile, starts: np.ndarray, hook: GradCompression) -> HookCost:
    """Each bucket's cost under ``hook``. ``starts``: where each bucket begins in the profile's
    gradient-ready order (``BucketLayout.starts``: DDP cuts buckets on the gradients as they are,
    before any hook)."""
    order = profile.gradient_order()
    bounds = [*map(int, starts), len(order)]
    if not hook.active:
        grads = np.array([sum(float(x.grad_bytes) for x in order[bounds[k]:bounds[k + 1]]) for k in range(len(starts))])
        zero = np.zeros(len(starts))
        return HookCost(grads[None, :], zero, zero, zero)
    c = np.array([np.sum([_layer_cost(x, hook) for x in order[bounds[k]:bounds[k + 1]]], axis=0)
                  for k in range(len(starts))]).reshape(-1, 6)
    if hook.half:
        return HookCost(c[:, 0:1].T, c[:, 3], c[:, 4], np.full(len(starts), float(HALF_EXTRA_KERNELS)))
    # + per bucket: error add, clone, torch.cat, the divide, the new error.
    return HookCost(c[:, 0:3].T, c[:, 3], c[:, 4], c[:, 5] + 5.0)
