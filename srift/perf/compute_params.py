"""The compute model's fitted parameters: the GPU and precision features its efficiencies are
linear in (``FEATURES``, ``gpu_features``), the coefficients fitted on them
(``ComputeParams``: configs/perf/compute.json) and the decoder-LLM kernel rates
(``LlmKernelParams``: configs/perf/sharded.json).

srift/perf/compute.py loads them (``load_params``, ``load_llm_params``) and re-exports every public
name here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from srift.bounds import key_text, require, shown
from srift.errors import SriftError
from srift.hardware import GpuSpec
from srift.job import HALF_PRECISIONS
from srift.perf.layer_kinds import KINDS

PARAMS_SCHEMA = "srift.perf.compute/v1"
# What the fitted parameters may be: coefficients of 1/efficiency, and seconds per layer pass,
# per parameter tensor and per iteration.
_MAX_COEFFICIENT = 1e6
_TIME_BOUNDS = {"launch_s": 1.0, "optimizer_s_per_tensor": 1.0, "overhead_s": 100.0}

LLM_PARAMS_SCHEMA = "srift.perf.sharded/v1"


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


