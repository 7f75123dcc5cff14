"""Per-layer compute time of a profile on a target GPU and precision.

Model (a roofline with learned efficiencies): for every layer and pass (forward, backward)

    t = max(FLOPs x derate / (peak_flops(gpu, precision) * eff_kind), bytes / (bandwidth * eff_mem)) + launch_s

``derate`` = boost / sustained clock: a power-capped GPU (T4, L4, A10 by their board power) holds a
lower clock under load than the boost clock its datasheet peak assumes (srift.hardware).

where ``eff_kind`` (per layer kind: conv, matmul, attention, norm, ...) and ``eff_mem`` depend on
the GPU and precision through a few features (see ``FEATURES``); the coefficients are learned by
``scripts/fit_models.py`` from the measured data in data/ and shipped in
``configs/perf/compute.json``. ``launch_s`` is the framework's fixed cost per layer pass (a few
kernel launches, eager dispatch and the unhooked functional ops between modules), fitted with the
rest. It is added, not maxed with the kernels' time: eager PyTorch launches asynchronously, but a
max() fitted on the measured runs put 152 us per pass, which the small-batch runs kept out of the
fit refute (docs/accuracy.md, "Dispatch"). The optimizer step reads and writes parameters,
gradients and optimizer state at memory bandwidth, plus its dispatches (``optimizer_s_per_tensor``
each; one per tensor before PyTorch 2.0, one per list of 48 tensors since:
srift/perf/optimizer_step.py). ``overhead_s`` is a per-iteration
constant: the fit puts the framework's fixed costs per layer instead (it generalises to unseen
models; see srift/fitting/compute_fit.py), and a measured profile brings its own unattributed time.

Fused attention (SDPA / FlashAttention: an attention layer that keeps no s x s scores, as the
zoo's LLM profiles have) runs in half precision as one FLOP-bound kernel whose rate the eager
models of the compute fit never showed. Its time is ``FLOPs / (eff_fa x mma_rate)``:
``mma_rate = min(peak, SMs x clock x 2048)`` is the GPU's dense rate through Ampere-style ``mma``
instructions (2048 bf16 FLOP per SM and clock, A100's rate), which FlashAttention-2 and Triton
kernels issue also on Hopper (they do not use Hopper's ``wgmma``, which doubles it), and
``eff_fa`` (``fused_attention_efficiency``) is fitted on the FSDP LLM runs of
data/llm-training-throughput (srift/fitting/sharded.py, shipped in configs/perf/sharded.json).
Matmuls of a profile with FSDP units (``LayerProfile.unit``: the decoder LLMs) run at
``llm_matmul_factor`` times the model's time in half precision (fitted there too): the fit above
saw no decoder LLM.
Precision is applied per layer kind, as PyTorch runs it (``math_mode``): ``fp32`` is PyTorch's
default, where cuDNN convolutions use TF32 on GPUs that have it (``torch.backends.cudnn.allow_tf32``
is True by default) and matmuls (linear, attention) stay FP32 (``torch.backends.cuda.matmul.allow_tf32``
is False by default since PyTorch 1.12); ``fp32-strict`` runs everything in FP32; ``tf32`` allows
TF32 for both; ``amp`` runs both on half-precision tensor cores. Layers without FLOP-heavy math
(norms, element-wise, embeddings) are memory-bound whatever the mode. On GPUs without TF32 units
(before Ampere) ``fp32``, ``fp32-strict`` and ``tf32`` are the same.

Anchoring: a profile measured on the target GPU (at the target precision) returns its measured
times; a structural profile is predicted from FLOPs and bytes alone. One measured on another GPU or
precision scales each measured layer by the model's ratio between the two, then moves the total
only part of the way from the model's prediction to that: by ``anchor_factor``. How far the
measurement departs from the model on its own GPU is partly the job (which carries over to every
GPU) and partly that GPU and its host (which does not); on the shared measurements, carrying all
of it over was worse than ignoring it (srift/fitting/compute_fit.py ``fit_anchor``).
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from srift.bounds import key_text, require, shown
from srift.errors import SriftError
from srift.files import configs_dir, read_json
from srift.job import FP32, FP32_STRICT, HALF_PRECISIONS, require_precision
from srift.hardware import CPU, GpuSpec, find_gpu, gpu as gpu_spec
from srift.perf.optimizer_step import param_tensor_count, step_dispatches, step_kind
from srift.profile import Profile

PARAMS_SCHEMA = "srift.perf.compute/v1"
# What the fitted parameters may be: coefficients of 1/efficiency, and seconds per layer pass,
# per parameter tensor and per iteration.
_MAX_COEFFICIENT = 1e6
_TIME_BOUNDS = {"launch_s": 1.0, "optimizer_s_per_tensor": 1.0, "overhead_s": 100.0}

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

# Ceilings on the fraction of peak a training kernel sustains (a physical prior, not fitted):
# dense GEMM/convolution kernels stay below ~80 % of the datasheet peak, streaming kernels below
# ~90 % of the DRAM bandwidth. Without them the fit, which cannot tell a slow conv from a slow
# BatchNorm on whole-model times, pushed conv efficiency to 100 % and put everything on memory.
MIN_INV_EFF_COMPUTE = 1.0 / 0.8
MIN_INV_EFF_MEMORY = 1.0 / 0.9

# FlashAttention-2 / Triton attention kernels issue Ampere's mma instructions: at most this many
# dense half-precision FLOP per SM and clock (A100: 312 TFLOP/s = 108 SMs x 1.41 GHz x 2048).
MMA_FLOPS_PER_SM_CLOCK = 2048.0
LLM_PARAMS_SCHEMA = "srift.perf.sharded/v1"

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


def layer_kind(type_name: str) -> str:
    """Kind of a layer from its module class name (``Conv2d`` -> ``conv``)."""
    low = type_name.lower()
    # HF GPT-2 uses a module named ``Conv1D`` that is a Linear (x @ W + b), not a convolution.
    if low == "conv1d" and type_name == "Conv1D":
        return "matmul"
    for kind, keys in _KIND_RULES:
        if any(k in low for k in keys):
            return kind
    return "other"


# ---- GPU / precision features ---------------------------------------------------------------
def _tensor_path(spec: GpuSpec, precision: str) -> float:
    return 1.0 if spec.peak_flops(precision) > spec.fp32_tflops * 1e12 * 1.01 else 0.0


FEATURES: dict[str, Callable[[GpuSpec, str], float]] = {
    "one": lambda s, p: 1.0,
    # Faster GPUs reach a smaller fraction of their peak (fixed costs, occupancy): log peak TFLOP/s.
    "log_peak": lambda s, p: math.log(s.peak_flops(p) / 1e13),
    # Ridge point (FLOP per byte): above it more layers are memory-bound on this GPU.
    "log_ridge": lambda s, p: math.log(s.peak_flops(p) / s.memory_bandwidth_bytes_per_s / 100.0),
    # Tensor-core path (tf32/amp on a GPU that has them) reaches a lower fraction of peak.
    "tensor": _tensor_path,
    "log_sm": lambda s, p: math.log(s.sm_count / 80.0),
    # Mixed precision: half-precision operands (autocast keeps norms, softmax and losses in fp32;
    # bf16 runs the same tensor-core kernels at the same rate).
    "half": lambda s, p: 1.0 if p in HALF_PRECISIONS else 0.0,
}


def gpu_features(spec: GpuSpec, precision: str, names: tuple[str, ...]) -> np.ndarray:
    """Feature vector of a (GPU, precision) in the order ``names``."""
    return np.array([FEATURES[n](spec, precision) for n in names], dtype=float)


# ---- parameters -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ComputeParams:
    """Learned compute-model parameters (see module docstring and configs/perf/compute.json).

    Attributes:
        features: Names of the GPU features the coefficients multiply (keys of ``FEATURES``).
        inv_eff: Per kind, coefficients of 1/efficiency (clipped to >= 1) as a linear function of
            the features. Kinds missing here use ``inv_eff["other"]``.
        inv_eff_mem: Coefficients of 1/memory-efficiency, same features.
        launch_s: Fixed cost per layer pass (kernel launches, framework dispatch), seconds.
        optimizer_s_per_tensor: Optimizer-step cost per parameter tensor, seconds.
        overhead_s: Per-iteration framework overhead (zero_grad, Python, sync), seconds.
        anchor_weight: Share of a measured profile's departure from the model (log of measured /
            predicted on the profiling GPU) carried to another GPU or precision (1 = all of it).
        anchor_clip: Departures beyond this (in log) are carried over whole: larger than the
            model's per-GPU errors, they are the job's own (unhooked ops, custom kernels).
        meta: Provenance (sources, fit statistics), carried but unused by the model.
    """

    features: tuple[str, ...]
    inv_eff: dict[str, tuple[float, ...]]
    inv_eff_mem: tuple[float, ...]
    launch_s: float
    optimizer_s_per_tensor: float
    overhead_s: float
    anchor_weight: float = 1.0
    anchor_clip: float = math.inf
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # Per-instance (init=False: dataclasses.replace must not share it with the original).
    _cache: dict[tuple[str, str], Any] = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)

    def kind_matrix(self) -> np.ndarray:
        """(len(KINDS), len(features)) coefficient matrix."""
        other = self.inv_eff.get("other") or next(iter(self.inv_eff.values()))
        return np.array([self.inv_eff.get(k, other) for k in KINDS], dtype=float)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PARAMS_SCHEMA,
            "features": list(self.features),
            "inv_eff": {k: list(v) for k, v in self.inv_eff.items()},
            "inv_eff_mem": list(self.inv_eff_mem),
            "launch_s": self.launch_s,
            "optimizer_s_per_tensor": self.optimizer_s_per_tensor,
            "overhead_s": self.overhead_s,
            "anchor_weight": self.anchor_weight,
            "anchor_clip": None if math.isinf(self.anchor_clip) else self.anchor_clip,
            **self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "compute params") -> "ComputeParams":
        hint = "re-run scripts/fit_models.py, or reinstall srift-planner."
        if not isinstance(d, dict) or d.get("schema") != PARAMS_SCHEMA:
            raise SriftError(f"{source} is not a '{PARAMS_SCHEMA}' file.", hint)
        feats_raw = d.get("features")
        if not isinstance(feats_raw, list) or not feats_raw or not all(isinstance(f, str) for f in feats_raw):
            raise SriftError(f"{source}: 'features' must be a list of feature names.", hint)
        feats = tuple(feats_raw)
        unknown = [f for f in feats if f not in FEATURES]
        if unknown:
            raise SriftError(f"{source} uses unknown features {shown(unknown)}.", hint)
        n = len(feats)

        def coefficients(v: Any, where: str) -> tuple[float, ...]:
            if not isinstance(v, list) or len(v) != n:
                raise SriftError(f"{source}: {where} must list {n} coefficients, one per feature.", hint)
            return tuple(float(require(x, f"{source}: {where}", -_MAX_COEFFICIENT, _MAX_COEFFICIENT, hint=hint)) for x in v)

        raw_inv = d.get("inv_eff")
        if not isinstance(raw_inv, dict) or not raw_inv:
            raise SriftError(f"{source}: 'inv_eff' must map layer kinds to coefficients.", hint)
        inv = {str(k): coefficients(v, f"inv_eff.{key_text(k)}") for k, v in raw_inv.items()}
        inv_mem = coefficients(d.get("inv_eff_mem"), "inv_eff_mem")
        times = {key: float(require(d.get(key), f"{source}: {key}", 0.0, high, hint=hint)) for key, high in _TIME_BOUNDS.items()}
        known = {"schema", "features", "inv_eff", "inv_eff_mem", *_TIME_BOUNDS, "anchor_weight", "anchor_clip"}
        weight, clip = d.get("anchor_weight", 1.0), d.get("anchor_clip")

        def number_in(v: Any, high: float) -> bool:  # NaN fails the comparison
            return isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= high

        if not number_in(weight, 1.0) or (clip is not None and not number_in(clip, 100.0)):
            raise SriftError(f"{source}: anchor_weight must be in [0, 1] and anchor_clip in [0, 100] or null.", hint)
        return cls(
            features=feats,
            inv_eff=inv,
            inv_eff_mem=inv_mem,
            launch_s=times["launch_s"],
            optimizer_s_per_tensor=times["optimizer_s_per_tensor"],
            overhead_s=times["overhead_s"],
            anchor_weight=float(weight),
            anchor_clip=math.inf if clip is None else float(clip),
            meta={k: v for k, v in d.items() if k not in known},
        )


def params_path() -> Path:
    return configs_dir() / "perf" / "compute.json"


@functools.lru_cache(maxsize=4)
def load_params(path: str | None = None) -> ComputeParams:
    """The shipped (fitted) compute parameters, or those in ``path``."""
    p = Path(path) if path else params_path()
    data = read_json(p, "compute-model parameters", "reinstall srift-planner, or re-run scripts/fit_models.py.")
    return ComputeParams.from_dict(data, str(p))


# ---- result ---------------------------------------------------------------------------------
@dataclass
class LayerTimes:
    """Predicted (or measured) compute times of one iteration on one GPU.

    Attributes:
        fwd_s: Forward seconds per layer, in profile layer order.
        bwd_s: Backward seconds per layer, in profile layer order.
        optimizer_s: Optimizer step seconds.
        overhead_s: Per-iteration time no layer accounts for (framework, unhooked ops).
        anchored: True when measured times were used (directly or scaled from another GPU).
        anchored_from: ``GPU precision`` of the measurement when it was scaled from another GPU or
            precision (``anchor_factor``), else None.
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    optimizer_s: float
    overhead_s: float
    anchored: bool
    anchored_from: str | None = None

    @property
    def forward_s(self) -> float:
        return float(self.fwd_s.sum())

    @property
    def backward_s(self) -> float:
        return float(self.bwd_s.sum())

    @property
    def total_s(self) -> float:
        """Forward + backward + optimizer + overhead (no communication, no data loading)."""
        return self.forward_s + self.backward_s + self.optimizer_s + self.overhead_s


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


# ---- the model ------------------------------------------------------------------------------
def _efficiency_terms(gpu_name: str, precision: str, params: ComputeParams) -> tuple[np.ndarray, float, float, float]:
    """(seconds per FLOP per kind, seconds per byte, peak FLOP/s, bandwidth) for a GPU and precision;
    each kind at its own math mode (``math_mode``), the peak that of the precision's matmuls."""
    hit = params._cache.get((gpu_name, precision))
    if hit is None:
        hit = params._cache[(gpu_name, precision)] = _efficiency_terms_uncached(gpu_name, precision, params)
    return hit


def _efficiency_terms_uncached(gpu_name: str, precision: str, params: ComputeParams) -> tuple[np.ndarray, float, float, float]:
    spec = gpu_spec(gpu_name)
    matrix = params.kind_matrix()
    s_per_flop = np.empty(len(KINDS))
    for mode in {math_mode(precision, k) for k in KINDS}:
        z = gpu_features(spec, mode, params.features)
        inv_kind = np.maximum(MIN_INV_EFF_COMPUTE, matrix @ z) / spec.peak_flops(mode)
        rows = [i for i, k in enumerate(KINDS) if math_mode(precision, k) == mode]
        s_per_flop[rows] = inv_kind[rows]
    # A power-capped GPU runs its compute units below the boost clock its peak rates assume
    # (srift.hardware.sustained_clock_mhz); DRAM bandwidth does not follow the core clock.
    s_per_flop = s_per_flop * spec.clock_derate
    # Memory-bound kernels (norms, element-wise) do not depend on the TF32 flags: every 4-byte
    # precision takes the memory efficiency the fit learned for its rows (tf32), half precision its own.
    mem_mode = precision if precision in HALF_PRECISIONS else "tf32"
    z = gpu_features(spec, mem_mode, params.features)
    inv_mem = max(MIN_INV_EFF_MEMORY, float(np.dot(params.inv_eff_mem, z)))
    bw = spec.memory_bandwidth_bytes_per_s
    return s_per_flop, inv_mem / bw, spec.peak_flops(math_mode(precision, "matmul")), bw


@dataclass(frozen=True)
class LlmKernelParams:
    """Fitted rates of decoder-LLM kernels in half precision (configs/perf/sharded.json; see the
    module docstring).

    Attributes:
        fused_attention_efficiency: Fraction of ``mma_rate`` fused attention sustains, forward and
            backward together.
        llm_matmul_factor: Time of a matmul of an FSDP unit over the compute model's.
        meta: Provenance, carried but unused.
    """

    fused_attention_efficiency: float
    llm_matmul_factor: float = 1.0
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "LLM kernel params") -> "LlmKernelParams":
        if not isinstance(d, dict) or d.get("schema") != LLM_PARAMS_SCHEMA:
            raise SriftError(f"{source} is not a '{LLM_PARAMS_SCHEMA}' file.", "re-run scripts/fit_models.py.")
        hint = "re-run scripts/fit_models.py."
        eff = float(require(d.get("fused_attention_efficiency"), f"{source}: fused_attention_efficiency", 0.01, 1.0, hint=hint))
        factor = float(require(d.get("llm_matmul_factor", 1.0), f"{source}: llm_matmul_factor", 0.5, 3.0, hint=hint))
        return cls(eff, factor, {k: v for k, v in d.items()
                                 if k not in ("schema", "fused_attention_efficiency", "llm_matmul_factor")})

    def to_dict(self) -> dict[str, Any]:
        return {"schema": LLM_PARAMS_SCHEMA, "fused_attention_efficiency": self.fused_attention_efficiency,
                "llm_matmul_factor": self.llm_matmul_factor, **self.meta}


def llm_params_path() -> Path:
    return configs_dir() / "perf" / "sharded.json"


@functools.lru_cache(maxsize=4)
def load_llm_params(path: str | None = None) -> LlmKernelParams:
    """The shipped (fitted) decoder-LLM kernel parameters, or those in ``path``."""
    p = Path(path) if path else llm_params_path()
    data = read_json(p, "LLM kernel parameters", "reinstall srift-planner, or re-run scripts/fit_models.py.")
    return LlmKernelParams.from_dict(data, str(p))


def mma_rate_flops(spec: GpuSpec, precision: str) -> float:
    """Dense half-precision FLOP/s through Ampere-style mma instructions: min(peak, SMs x clock x
    MMA_FLOPS_PER_SM_CLOCK) (see the module docstring)."""
    return min(spec.peak_flops(precision), spec.sm_count * spec.boost_clock_mhz * 1e6 * MMA_FLOPS_PER_SM_CLOCK) / spec.clock_derate


def _model_times(arr: LayerArrays, gpu_name: str, precision: str, byte_factor: float,
                 params: ComputeParams, llm: LlmKernelParams | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    s_per_flop, s_per_byte, _, _ = _efficiency_terms(gpu_name, precision, params)
    per_layer = s_per_flop[arr.kind_idx]
    if precision in HALF_PRECISIONS and (arr.in_unit.any() or arr.fused_attention.any()):
        llm = llm or load_llm_params()
        per_layer = per_layer.copy()
        if arr.in_unit.any():  # a decoder LLM (FSDP units): all its matmuls, the head's too
            per_layer[arr.kind_idx == _KIND_INDEX["matmul"]] *= llm.llm_matmul_factor
        per_layer[arr.fused_attention] = 1.0 / (llm.fused_attention_efficiency * mma_rate_flops(gpu_spec(gpu_name), precision))
    fwd_work = (arr.fwd_flops > 0) | (arr.fwd_bytes > 0)
    bwd_work = (arr.bwd_flops > 0) | (arr.bwd_bytes > 0)
    fwd = np.maximum(arr.fwd_flops * per_layer, arr.fwd_bytes * byte_factor * s_per_byte) + params.launch_s * fwd_work
    bwd = np.maximum(arr.bwd_flops * per_layer, arr.bwd_bytes * byte_factor * s_per_byte) + params.launch_s * bwd_work
    return fwd, bwd, s_per_byte


def optimizer_time_s(profile: Profile, gpu: str, precision: str, params: ComputeParams | None = None) -> float:
    """Predicted optimizer-step seconds on ``gpu``: parameters, gradients and optimizer state read
    and written once at memory bandwidth (fp32 master weights under amp too), plus its dispatches
    (``optimizer_s_per_tensor`` each; how many: srift/perf/optimizer_step.py).
    """
    params = params or load_params()
    arr = layer_arrays(profile)
    _, s_per_byte, _, _ = _efficiency_terms(gpu, precision, params)
    state = float(profile.optimizer.state_bytes_per_param)
    # weight read + write (4 + 4), gradient read (4), state read + write (2 x state).
    bytes_moved = arr.params * (12.0 + 2.0 * state)
    dispatches = step_dispatches(step_kind(profile.framework.get("torch")), arr.n_param_tensors)
    return bytes_moved * s_per_byte + dispatches * params.optimizer_s_per_tensor


@dataclass(frozen=True)
class KernelRates:
    """What the compute model prices a kernel outside the model's layers at, on one GPU and math
    mode (srift/perf/kfac_kernels.py prices K-FAC's GEMMs and copies with it).

    Attributes:
        matmul_flops_per_s: A cuBLAS matmul's rate (the ``matmul`` kind's fitted efficiency).
        memory_bytes_per_s: A streaming kernel's rate (the fitted memory efficiency).
        launch_s: The fixed cost of one layer pass (a few kernel launches and eager dispatch).
    """

    matmul_flops_per_s: float
    memory_bytes_per_s: float
    launch_s: float


def kernel_rates(gpu: str, precision: str, params: ComputeParams | None = None) -> KernelRates:
    """The compute model's matmul and memory rates on ``gpu`` for a training ``precision`` (a
    matmul runs in ``math_mode(precision, "matmul")``: FP32 under ``fp32``, TF32 under ``tf32``),
    and its per-pass launch cost."""
    params = params or load_params()
    s_per_flop, s_per_byte, _, _ = _efficiency_terms(_canonical_target(gpu), precision, params)
    return KernelRates(1.0 / float(s_per_flop[_KIND_INDEX["matmul"]]), 1.0 / s_per_byte, params.launch_s)


def _canonical_target(gpu: str) -> str:
    if gpu == CPU:
        return CPU
    key = find_gpu(gpu)
    if key is None:
        gpu_spec(gpu)  # raises the standard unknown-GPU error
    return key  # type: ignore[return-value]


def measured_gpu(profile: Profile) -> str | None:
    """Canonical GPU the profile was measured on, 'cpu', or None (structural / unknown GPU)."""
    if not profile.measured:
        return None
    dev = profile.device
    if dev.kind == "cpu":
        return CPU
    name = dev.gpu or (dev.name if dev.kind == "cuda" else None)
    return find_gpu(str(name)) if name else None


def _measured_overhead_s(profile: Profile, fwd_sum: float, bwd_sum: float, opt_s: float) -> float:
    """Measured iteration time that no layer, optimizer, data phase, (FSDP on CPU workers)
    collective or (multi-process DDP) wait for the gradients' all-reduce accounts for: the
    communication model predicts those."""
    ph = profile.phases
    if ph.total_s is None:
        return 0.0
    rest = ph.total_s - (ph.data_s or 0.0) - fwd_sum - bwd_sum - opt_s - (ph.collectives_s or 0.0) - (ph.comm_wait_s or 0.0)
    return max(0.0, rest)


def layer_times(profile: Profile, gpu: str, precision: str, params: ComputeParams | None = None) -> LayerTimes:
    """Forward/backward seconds per layer, optimizer and overhead seconds for one iteration.

    Args:
        profile: The job's profile (at the per-GPU batch and sequence length to predict).
        gpu: Canonical GPU name from configs/gpus.yaml (aliases accepted), or ``"cpu"``.
        precision: One of srift.job.PRECISIONS (applied per layer kind: ``math_mode``).
        params: Model parameters (default: the shipped fitted ones).

    Returns:
        LayerTimes; ``anchored`` is True when measured times were used.

    Raises:
        SriftError: for an unknown GPU or precision, or ``"cpu"`` without a CPU-measured profile.
    """
    require_precision(precision)
    target = _canonical_target(gpu)
    source = measured_gpu(profile)
    arr = layer_arrays(profile)

    if target == CPU:
        if source != CPU:
            raise SriftError(
                f"profile '{profile.name}' was not measured on a CPU, and srift has no CPU compute model.",
                "profile on this machine first (`srift profile train.py`), then predict for 'cpu'.",
            )
        return _measured(profile, arr)

    params = params or load_params()
    byte_factor = ELEMENT_BYTES[precision] / ELEMENT_BYTES.get(profile.precision, 4.0)
    fwd, bwd, _ = _model_times(arr, target, precision, byte_factor, params)
    opt = optimizer_time_s(profile, target, precision, params)

    if source is None or source == CPU:
        # Structural profile (or measured on a CPU, which says nothing about a GPU): model only.
        return LayerTimes(fwd, bwd, opt, params.overhead_s, anchored=False)

    if source == target and same_math(precision, profile.precision):
        return _measured(profile, arr, fallback=(fwd, bwd, opt))

    # Measured on another GPU (or precision): scale each measured layer by the model's ratio ...
    fwd_src, bwd_src, _ = _model_times(arr, source, profile.precision, 1.0, params)
    opt_src = optimizer_time_s(profile, source, profile.precision, params)
    m = _measured(profile, arr, fallback=(fwd_src, bwd_src, opt_src))
    with np.errstate(divide="ignore", invalid="ignore"):
        rf = np.where(fwd_src > 0, fwd / fwd_src, 1.0)
        rb = np.where(bwd_src > 0, bwd / bwd_src, 1.0)
    total_ratio = (fwd.sum() + bwd.sum()) / max(fwd_src.sum() + bwd_src.sum(), 1e-30)
    opt_ratio = opt / opt_src if opt_src > 0 else 1.0
    a_fwd, a_bwd = m.fwd_s * rf, m.bwd_s * rb
    # Unattributed measured time is mostly unhooked GPU work (residual adds, functional ops).
    a_over = m.overhead_s * total_ratio
    a_opt = m.optimizer_s * opt_ratio
    # ... then keep the measured split over layers, with the total moved from the model's by
    # anchor_factor of how far the scaled measurement is from it.
    anchored_s = float(a_fwd.sum() + a_bwd.sum() + a_over)
    model_s = float(fwd.sum() + bwd.sum() + params.overhead_s)
    scale = model_s * anchor_factor(anchored_s / model_s, params) / anchored_s if anchored_s > 0 and model_s > 0 else 1.0
    opt_final = opt * anchor_factor(a_opt / opt, params) if a_opt > 0 and opt > 0 else a_opt
    return LayerTimes(a_fwd * scale, a_bwd * scale, float(opt_final), float(a_over * scale), anchored=True,
                      anchored_from=f"{source} {profile.precision}")


def same_math(a: str, b: str) -> bool:
    """Two precisions that run the same kernels at the same rates: equal, or both half precision
    (fp16 and bf16 tensor cores run at the same rate, and both move 2-byte values)."""
    return a == b or (a in HALF_PRECISIONS and b in HALF_PRECISIONS)


def anchor_factor(ratio: float, params: ComputeParams) -> float:
    """How much of a measured/predicted ``ratio`` (from the profiling GPU) to carry to another GPU:
    ``exp(w * clip(log r) + (log r - clip(log r)))`` with ``w = anchor_weight`` and the clip at
    ``+-anchor_clip``. 1 carries nothing, ``ratio`` carries all of it (``anchor_weight = 1``)."""
    log_r = math.log(ratio)
    inside = min(max(log_r, -params.anchor_clip), params.anchor_clip)
    return math.exp(params.anchor_weight * inside + (log_r - inside))


def _measured(profile: Profile, arr: LayerArrays,
              fallback: tuple[np.ndarray, np.ndarray, float] | None = None) -> LayerTimes:
    """The profile's measured times; layers without a measurement take the ``fallback`` model."""
    fwd = arr.fwd_meas.copy() if arr.fwd_meas is not None else np.full(len(arr.kind_idx), np.nan)
    bwd = arr.bwd_meas.copy() if arr.bwd_meas is not None else np.full(len(arr.kind_idx), np.nan)
    if fallback is not None:
        fwd = np.where(np.isnan(fwd), fallback[0], fwd)
        bwd = np.where(np.isnan(bwd), fallback[1], bwd)
    fwd = np.nan_to_num(fwd, nan=0.0)
    bwd = np.nan_to_num(bwd, nan=0.0)
    opt = profile.phases.optimizer_s
    if opt is None:
        opt = fallback[2] if fallback is not None else 0.0
    if profile.timing == "step" and fallback is not None:
        # Whole steps measured (compiled model): the model splits the measured compute over layers.
        compute_s = _measured_overhead_s(profile, 0.0, 0.0, float(opt))
        model_s = float(fwd.sum() + bwd.sum())
        if compute_s > 0 and model_s > 0:
            fwd, bwd = fwd * (compute_s / model_s), bwd * (compute_s / model_s)
    overhead = _measured_overhead_s(profile, float(fwd.sum()), float(bwd.sum()), float(opt))
    return LayerTimes(fwd, bwd, float(opt), overhead, anchored=True)
