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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from srift.errors import SriftError
from srift.files import configs_dir, read_json
from srift.job import HALF_PRECISIONS, require_precision
from srift.hardware import CPU, GpuSpec, find_gpu, gpu as gpu_spec
from srift.perf.optimizer_step import step_dispatches, step_kind
from srift.profile import Profile

# The layers' kinds and arrays (srift/perf/layer_kinds.py) and the fitted parameters
# (srift/perf/compute_params.py) live in their own modules; every public name of theirs is
# re-exported here.
from srift.perf.compute_params import *
from srift.perf.layer_kinds import _KIND_INDEX
from srift.perf.layer_kinds import *

# Ceilings on the fraction of peak a training kernel sustains (a physical prior, not fitted):
# dense GEMM/convolution kernels stay below ~80 % of the datasheet peak, streaming kernels below
# ~90 % of the DRAM bandwidth. Without them the fit, which cannot tell a slow conv from a slow
# BatchNorm on whole-model times, pushed conv efficiency to 100 % and put everything on memory.
MIN_INV_EFF_COMPUTE = 1.0 / 0.8
MIN_INV_EFF_MEMORY = 1.0 / 0.9

# FlashAttention-2 / Triton attention kernels issue Ampere's mma instructions: at most this many
# dense half-precision FLOP per SM and clock (A100: 312 TFLOP/s = 108 SMs x 1.41 GHz x 2048).
MMA_FLOPS_PER_SM_CLOCK = 2048.0


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
