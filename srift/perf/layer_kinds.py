"""A profile's layers as the compute model reads them: each layer's kind from its module class
(``layer_kind``: conv, matmul, attention, norm, ...), the math a kind runs in under a training
precision (``math_mode``, ``precision_label``, ``ELEMENT_BYTES``), and the profile's per-layer
figures as arrays by kind (``layer_arrays``, cached per profile).

srift/perf/compute.py re-exports every public name here.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import numpy as np

from srift.job import FP32, FP32_STRICT
from srift.perf.optimizer_step import param_tensor_count
from srift.profile import Profile

KINDS = ("conv", "matmul", "attention", "norm", "elementwise", "pool", "embedding", "other")
ATTENTION, NORM = "attention", "norm"  # the kinds of attention and normalization layers, which code singles out
_KIND_INDEX = {k: i for i, k in enumerate(KINDS)}

# Module class names -> kind. Matched on the lower-cased class name; first rule that matches wins.
_KIND_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attention", "sdpa", "scaleddotproduct")),
    ("conv", ("conv1d", "conv2d", "conv3d", "convtranspose")),
    ("matmul", ("linear", "conv1d_hf", "gpt2conv1d", "bilinear", "matmul", "bmm", "lstm", "gru", "rnn")),
    ("norm", ("batchnorm", "layernorm", "groupnorm", "instancenorm", "rmsnorm", "norm")),
    ("pool", ("pool",)),
    ("embedding", ("embedding",)),
    ("elementwise", ("relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "dropout", "identity", "add",
                     "mul", "activation", "hardswish", "mish", "elu", "flatten", "cat",
                     "dequantize")),
)

# An unfused attention layer moves its S x S score matrix (``activation_bytes_seq2``: the
# probabilities it keeps) through memory several times that its input/output bytes do not show.
# Counted from the eager code (srift/zoo/text.py AttentionCore): forward writes the scores, scales
# them (read + write), softmax (read + write), reads the probabilities for the value product = 6;
# backward writes the probability gradient, reads the probabilities, softmax backward (2 reads +
# 1 write), scale backward (read + write), reads the score gradient for the q and k products = 9.
ATTENTION_SCORE_PASSES_FWD = 6.0
ATTENTION_SCORE_PASSES_BWD = 9.0

# Bytes per element of activations at each training precision (amp keeps activations in fp16,
# bf16 in bf16).
ELEMENT_BYTES = {"fp32": 4.0, "fp32-strict": 4.0, "tf32": 4.0, "amp": 2.0, "bf16": 2.0}

# Layer kinds whose math cuDNN runs (convolutions): TF32 under PyTorch's default ``fp32``.
CUDNN_KINDS = ("conv",)


def math_mode(precision: str, kind: str) -> str:
    """The math a layer of ``kind`` runs in under a training ``precision``: ``fp32``, ``tf32`` or
    ``amp`` (the peak-rate vocabulary of ``GpuSpec.peak_flops``). PyTorch's default ``fp32`` runs
    convolutions in TF32 (cuDNN's flag) and matmuls in FP32 (cuBLAS's flag); see the module docstring.
    """
    if precision == FP32:
        return "tf32" if kind in CUDNN_KINDS else "fp32"
    if precision == FP32_STRICT:
        return "fp32"
    return precision


def precision_label(cudnn_tf32: bool, matmul_tf32: bool) -> str:
    """srift's precision for a run without autocast, from PyTorch's two TF32 flags: both on ->
    ``tf32``, convolutions only (PyTorch's default) -> ``fp32``, neither -> ``fp32-strict``; matmuls
    only (no srift name) -> ``tf32``."""
    if matmul_tf32:
        return "tf32"
    return "fp32" if cudnn_tf32 else "fp32-strict"


@functools.lru_cache(maxsize=4096)
def layer_kind(type_name: str) -> str:
    """Kind of a layer from its module class name (``Conv2d`` -> ``conv``; cached: every profile
    of a search asks it of the same few names)."""
    low = type_name.lower()
    # HF GPT-2 uses a module named ``Conv1D`` that is a Linear (x @ W + b), not a convolution.
    if low == "conv1d" and type_name == "Conv1D":
        return "matmul"
    for kind, keys in _KIND_RULES:
        if any(k in low for k in keys):
            return kind
    return "other"


# ---- per-profile arrays (cached) ------------------------------------------------------------
@dataclass(frozen=True)
class LayerArrays:
    """A profile's per-layer figures as arrays (layer order), the compute model's input.

    Attributes:
        kind_idx: Index into ``KINDS`` of each layer.
        fwd_flops, bwd_flops: FLOPs per pass.
        fwd_bytes, bwd_bytes: Bytes moved per pass (attention scores included).
        fwd_meas, bwd_meas: Measured seconds (NaN where a layer has none), or None when structural.
        n_param_tensors: Parameter tensors the optimizer updates.
        params: Trainable parameters.
        fused_attention: Attention layers that keep no s x s scores (SDPA/flash kernels).
        in_unit: Layers of an FSDP unit (a decoder block).
    """

    kind_idx: np.ndarray
    fwd_flops: np.ndarray
    bwd_flops: np.ndarray
    fwd_bytes: np.ndarray
    bwd_bytes: np.ndarray
    fwd_meas: np.ndarray | None
    bwd_meas: np.ndarray | None
    n_param_tensors: int
    params: int
    fused_attention: np.ndarray
    in_unit: np.ndarray


_ARRAY_CACHE: dict[int, tuple[weakref.ref, LayerArrays]] = {}


def layer_arrays(profile: Profile) -> LayerArrays:
    """The profile's ``LayerArrays`` (cached per profile object)."""
    key = id(profile)
    hit = _ARRAY_CACHE.get(key)
    if hit is not None and hit[0]() is profile:
        return hit[1]
    layers = profile.layers
    measured = profile.measured
    kind_idx = np.array([_KIND_INDEX[layer_kind(l.type)] for l in layers], dtype=np.intp)
    scores = np.array([l.activation_bytes_seq2 for l in layers], dtype=float) * (kind_idx == _KIND_INDEX["attention"])
    arr = LayerArrays(
        kind_idx=kind_idx,
        fwd_flops=np.array([l.fwd_flops for l in layers], dtype=float),
        bwd_flops=np.array([l.bwd_flops for l in layers], dtype=float),
        fwd_bytes=np.array([l.fwd_bytes for l in layers], dtype=float) + ATTENTION_SCORE_PASSES_FWD * scores,
        bwd_bytes=np.array([l.bwd_bytes for l in layers], dtype=float) + ATTENTION_SCORE_PASSES_BWD * scores,
        fwd_meas=np.array([np.nan if l.fwd_s is None else l.fwd_s for l in layers], dtype=float) if measured else None,
        bwd_meas=np.array([np.nan if l.bwd_s is None else l.bwd_s for l in layers], dtype=float) if measured else None,
        n_param_tensors=param_tensor_count(layers),
        params=profile.params,
        fused_attention=(kind_idx == _KIND_INDEX["attention"]) & (scores == 0)
        & (np.array([l.fwd_flops_seq2 for l in layers], dtype=float) > 0),
        in_unit=np.array([l.unit is not None for l in layers], dtype=bool),
    )
    if len(_ARRAY_CACHE) > 256:
        for k in [k for k, (ref, _) in _ARRAY_CACHE.items() if ref() is None]:
            del _ARRAY_CACHE[k]
    _ARRAY_CACHE[key] = (weakref.ref(profile), arr)
    return arr


