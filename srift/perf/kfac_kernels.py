"""Seconds of K-FAC's own kernels on one device (no torch): factor computation, the inversion
of a factor (``inverse``: damped Cholesky inverse; ``eigen``: ``eigh``) and preconditioning,
priced as srift's runtime (``srift.kfac``) runs them, in fp32.

**Solvers.** One call on an ``n x n`` factor takes

    t(n) = latency_s + column_s * n + n^3 / (rate_n3_per_s * e(n)),   e(n) = 1 / (1 + (n_half / n)^shape)

a fixed cost per call (dispatch, launches, and on a GPU the host synchronisation
``torch.linalg.cholesky`` and ``eigh`` make to check their result), a cost per column for
steps that wait on each other column by column (the tridiagonal reduction of ``eigh`` on a GPU,
a GPU Cholesky inverse's panels and triangular solves), and
a throughput that rises with ``n`` to an asymptote (``rate_n3_per_s``, in ``n^3`` per second),
reaching half of it at ``n_half``. The form is fitted on measured tables (the CPU's; a GPU's when
one is measured); ``shape`` is the CPU's (srift/fitting/kfac_kernels.py). A GPU without a table
prices the Cholesky inverse on ``gpu_inverse_curve`` (fitted on PipeFisher's timings of the same
operations: ``n_half`` 0, a cost per column, the FLOPs at a share of the FP32 peak).

**Factors.** Factor A of a convolution unfolds its input (``F.unfold`` writes the patches, and the
transpose to rows copies them: three passes over the unfolded bytes, plus reading the input),
then forms ``a^T a``; factor G copies the output gradient to rows (two passes) and forms ``g^T g``;
a Linear layer's rows are a view. Copies run at the memory rate, the Gram product at
``max(FLOPs / gemm rate, bytes read / memory rate)`` (arithmetic intensity ``d/2`` FLOP per byte:
compute-bound above a few dozen columns on every device here), plus a fixed cost per call. Under
``amp``/``bf16`` the half-precision input or gradient is first cast to fp32 (read 2, write 4 bytes
per element).

**Preconditioning** of a ``d_G x d_A`` block: ``G^-1 grad A^-1`` (two GEMMs; four for ``eigen``),
the gradient gathered with its bias column, the KL-clip term read back on the host (a
synchronisation per layer on a GPU) and the result written back: a fixed cost per call, the GEMMs
and ``PRECONDITION_PASSES`` passes over the block at the memory rate.

**Parameters** (configs/perf/kfac_kernels.json, written by scripts/fit_models.py): a device with a
measured table (data/measurements/kfac-kernels-<device>.csv, the columns of
scripts/measure_kfac_kernels.py) uses its fitted curves and rates; any other GPU derives them from
its datasheet (FP32 peak and clock at the sustained clock: the factors' and preconditioning's
GEMMs and the Cholesky inverse (``gpu_inverse_curve``) with constants fitted on PipeFisher's GPU
block timings, srift/fitting/kfac_phases.py), the compute model (memory rate, per-pass launch cost
and, for ``eigh``, its FP32 matmul rate: ``srift.perf.compute.kernel_rates``) and the documented
assumptions of the file's ``gpu_assumptions`` (``eigh``'s rate relative to the GEMM rate, FLOPs
per ``n^3``, size at half throughput from the SM count, latencies), each with its source and
range (docs/kfac.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srift.errors import SriftError
from srift.files import configs_dir, read_json
from srift.hardware import CPU, find_gpu, gpu as gpu_spec
from srift.job import FP32, HALF_PRECISIONS, INVERSE

PARAMS_SCHEMA = "srift.perf.kfac_kernels/v1"
METHODS = ("inverse", "eigen")  # srift.kfac.schedule.INVERSE_METHODS
FP32_BYTES = 4.0
HALF_BYTES = 2.0
# Bytes moved per element of a d x d factor besides the Gram product itself (srift.kfac.layers and
# srift.kfac.preconditioner), counted from the code:
# * in the hook: the GEMM writes the Gram (4); ``(gram + gram.T)`` reads 8 and writes 4; ``mul_``
#   reads 4 and writes 4: 24; with a bias, the Gram is first copied into the (d+1) x (d+1) result: +8;
# * ``pack_upper`` (``triu_indices`` writes two int64 indices per packed element, the gather reads
#   them and the values and writes the values: 40 bytes per packed element, 20 per element);
#   ``unpack_upper`` (indices 16 per packed element, a zeroed matrix 4 per element, two scatters
#   reading indices and values and writing, 24 per packed element each: 36 per element);
# * in ``step()``, per factor update: a pack, the copy into the fused buffer (4) and the division
#   after the all-reduce (4), an unpack, and the running average (``mul_`` 8, ``add_`` 12): 84.
#   An inverse broadcast packs on its owner and unpacks everywhere else (``inverse`` method).
HOOK_BYTES_PER_ELEMENT = 24.0
BIAS_BYTES_PER_ELEMENT = 8.0
PACK_BYTES_PER_ELEMENT = 20.0
UNPACK_BYTES_PER_ELEMENT = 36.0
STEP_BYTES_PER_ELEMENT = PACK_BYTES_PER_ELEMENT + 8.0 + UNPACK_BYTES_PER_ELEMENT + 20.0
# Passes over a d_G x d_A block besides the GEMMs when preconditioning (srift.kfac.second_order
# ``precondition`` and ``KFACLayer.grad_matrix/set_grad``): the gradient gathered with its bias
# column (read + write), the KL-clip term ``(p * grad).sum()`` (read both), ``p.mul_(nu)`` (read +
# write) and the copy back into the weight gradient (read + write).
PRECONDITION_PASSES = 8.0
# ``eigen`` preconditions with four GEMMs and three more element-wise passes (the eigenvalue outer
# product, the division, the transposes).
EIGEN_PRECONDITION_PASSES = 11.0


@dataclass(frozen=True)
class SolverCurve:
    """Seconds of one solver call on an ``n x n`` matrix (see the module docstring)."""

    latency_s: float
    rate_n3_per_s: float
    n_half: float
    shape: float
    column_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.latency_s >= 0 and self.rate_n3_per_s > 0 and self.n_half >= 0 and self.shape > 0 and self.column_s >= 0):
            raise SriftError("a K-FAC solver curve is out of range.", "re-run scripts/fit_models.py.")

    def efficiency(self, n: float) -> float:
        """Share of the asymptotic throughput reached at size ``n``."""
        return 1.0 / (1.0 + (self.n_half / n) ** self.shape)

    def time_s(self, n: float) -> float:
        """Seconds of one call at size ``n`` (>= 1)."""
        if not n >= 1:
            raise ValueError(f"matrix size must be at least 1, got {n}")
        return self.latency_s + self.column_s * n + n**3 / (self.rate_n3_per_s * self.efficiency(n))

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SolverCurve":
        return cls(float(d["latency_s"]), float(d["rate_n3_per_s"]), float(d["n_half"]), float(d["shape"]),
                   float(d.get("column_s", 0.0)))


@dataclass(frozen=True)
class DeviceKernels:
    """K-FAC's kernel model of one device.

    Attributes:
        device: ``cpu`` or a canonical GPU name.
        basis: Where the figures come from (a measured table, or derived and from which assumptions).
        inverse: The ``inverse`` method's damped Cholesky inverse.
        eigen: The ``eigen`` method's ``eigh``.
        gemm_flops_per_s: Rate of the factors' and the preconditioning's GEMMs (fp32).
        memory_bytes_per_s: Rate of the copies (unfold, transposes, casts).
        call_s: Fixed cost of one factor or preconditioning call.
        sync_s: Host round trip of a call whose result is read on the host (0 on a CPU).
        step_bytes_per_s: Rate of ``step()``'s per-factor work (packing, the fused buffer,
            unpacking, the running average: ``STEP_BYTES_PER_ELEMENT``) and of the inverses'
            packing, when measured (``factor_step`` rows); else ``memory_bytes_per_s``. On a CPU
            these contiguous and index passes run several times faster than the strided unfold.
        step_call_s: Fixed cost of that per-factor work (its several calls), when measured.
        precondition_flops_per_s: Rate of preconditioning's GEMMs, when it differs from
            ``gemm_flops_per_s`` (a derived GPU: ``d``-deep GEMMs run below the factors' rate).
    """

    device: str
    basis: str
    inverse: SolverCurve
    eigen: SolverCurve
    gemm_flops_per_s: float
    memory_bytes_per_s: float
    call_s: float
    sync_s: float = 0.0
    step_bytes_per_s: float | None = None
    step_call_s: float = 0.0
    precondition_flops_per_s: float | None = None

    def __post_init__(self) -> None:
        if not ((self.precondition_flops_per_s is None or self.precondition_flops_per_s > 0) and self.gemm_flops_per_s > 0 and self.memory_bytes_per_s > 0 and self.call_s >= 0 and self.sync_s >= 0
                and (self.step_bytes_per_s is None or self.step_bytes_per_s > 0) and self.step_call_s >= 0):
            raise SriftError(f"the K-FAC kernel rates of '{self.device}' are out of range.", "re-run scripts/fit_models.py.")

    @property
    def step_rate_bytes_per_s(self) -> float:
        """The rate ``factor_step_s``, ``pack_s`` and ``unpack_s`` run at."""
        return self.step_bytes_per_s or self.memory_bytes_per_s

    def solver(self, method: str) -> SolverCurve:
        if method not in METHODS:
            raise SriftError(f"unknown K-FAC inverse method '{method}'.", f"use one of {', '.join(METHODS)}.")
        return self.inverse if method == INVERSE else self.eigen

    def invert_s(self, n: int, method: str = "inverse") -> float:
        """Seconds of one inversion (``inverse``) or eigendecomposition (``eigen``) of an n x n factor."""
        return self.solver(method).time_s(n)

    def gemm_s(self, flops: float, bytes_read: float, flops_per_s: float | None = None) -> float:
        """A GEMM's seconds on the roofline: compute- or memory-bound, whichever is slower (at
        ``flops_per_s``, default the factors' GEMM rate)."""
        return max(flops / (flops_per_s or self.gemm_flops_per_s), bytes_read / self.memory_bytes_per_s)

    def factor_a_s(self, rows: float, dim: int, unfold: bool, input_elements: float = 0.0, half_input: bool = False,
                   bias: bool = False) -> float:
        """Seconds to form one factor A in the hook from ``rows`` rows of ``dim`` columns.

        Args:
            rows: Rows of the (unfolded) input: batch x positions.
            dim: Width of the rows (the factor's dimension without the bias column).
            unfold: The rows are a convolution's patches (im2col); a Linear's rows are a view.
            input_elements: Elements of the layer input the unfold reads (and a cast converts).
            half_input: The input is in half precision (amp/bf16) and is cast to fp32 first.
            bias: The layer has a bias (a column sum and the copy into the larger factor).
        """
        unfolded = FP32_BYTES * rows * dim
        mem = (HALF_BYTES + FP32_BYTES) * input_elements if half_input else 0.0
        if unfold:
            mem += FP32_BYTES * input_elements + 3.0 * unfolded
        if bias:
            mem += unfolded + BIAS_BYTES_PER_ELEMENT * dim**2
        mem += HOOK_BYTES_PER_ELEMENT * dim**2
        return self.call_s + mem / self.memory_bytes_per_s + self.gemm_s(2.0 * rows * dim**2, unfolded)

    def factor_g_s(self, rows: float, dim: int, copy: bool, half_input: bool = False) -> float:
        """Seconds to form one factor G in the hook from ``rows`` rows of ``dim`` output-gradient
        columns (``copy``: a convolution's gradient is permuted to rows, a copy)."""
        grad = FP32_BYTES * rows * dim
        mem = (HALF_BYTES + FP32_BYTES) / FP32_BYTES * grad if half_input else 0.0
        if copy:
            mem += 2.0 * grad
        mem += HOOK_BYTES_PER_ELEMENT * dim**2
        return self.call_s + mem / self.memory_bytes_per_s + self.gemm_s(2.0 * rows * dim**2, grad)

    def factor_step_s(self, dim: int) -> float:
        """Seconds ``step()`` spends on one factor besides its collective: packing, the fused
        buffer's copy and division, unpacking and the running average (``STEP_BYTES_PER_ELEMENT``)."""
        call = self.step_call_s if self.step_bytes_per_s else self.call_s
        return call + STEP_BYTES_PER_ELEMENT * dim**2 / self.step_rate_bytes_per_s

    def pack_s(self, dim: int) -> float:
        """Seconds to pack a ``dim x dim`` symmetric matrix's upper triangle (``pack_upper``)."""
        return self.call_s + PACK_BYTES_PER_ELEMENT * dim**2 / self.step_rate_bytes_per_s

    def unpack_s(self, dim: int) -> float:
        """Seconds to rebuild a ``dim x dim`` symmetric matrix from its triangle (``unpack_upper``)."""
        return self.call_s + UNPACK_BYTES_PER_ELEMENT * dim**2 / self.step_rate_bytes_per_s

    def precondition_s(self, a_dim: int, g_dim: int, method: str = "inverse") -> float:
        """Seconds to precondition one ``g_dim x a_dim`` block (every iteration)."""
        self.solver(method)  # validates the method
        gemms = 1 if method == INVERSE else 2
        flops = gemms * 2.0 * a_dim * g_dim * (a_dim + g_dim)
        passes = PRECONDITION_PASSES if method == INVERSE else EIGEN_PRECONDITION_PASSES
        block = FP32_BYTES * a_dim * g_dim
        # The GEMMs read the block and the two square matrices.
        read = gemms * FP32_BYTES * (a_dim * a_dim + g_dim * g_dim) + 2.0 * gemms * block
        return (self.call_s + self.sync_s + self.gemm_s(flops, read, self.precondition_flops_per_s)
                + passes * block / self.memory_bytes_per_s)


# ---- parameters -------------------------------------------------------------------------------
@dataclass(frozen=True)
class MeasuredDevice:
    """Fitted kernel figures of a device with a measured table (per thread count on a CPU)."""

    inverse: SolverCurve
    eigen: SolverCurve
    gemm_flops_per_s: float
    memory_bytes_per_s: float
    call_s: float
    sync_s: float = 0.0
    step_bytes_per_s: float | None = None
    step_call_s: float = 0.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MeasuredDevice":
        step = d.get("step_bytes_per_s")
        return cls(SolverCurve.from_dict(d["inverse"]), SolverCurve.from_dict(d["eigen"]), float(d["gemm_flops_per_s"]),
                   float(d["memory_bytes_per_s"]), float(d["call_s"]), float(d.get("sync_s", 0.0)),
                   None if step is None else float(step), float(d.get("step_call_s", 0.0)))

    def to_dict(self) -> dict[str, Any]:
        out = {"inverse": self.inverse.to_dict(), "eigen": self.eigen.to_dict(), "gemm_flops_per_s": self.gemm_flops_per_s,
               "memory_bytes_per_s": self.memory_bytes_per_s, "call_s": self.call_s, "sync_s": self.sync_s}
        if self.step_bytes_per_s is not None:
            out.update(step_bytes_per_s=self.step_bytes_per_s, step_call_s=self.step_call_s)
        return out


@dataclass(frozen=True)
class GpuAssumptions:
    """How a GPU's solver figures follow from its compute-model rates when it has no measured table.

    Each value is documented, with its source and range, in configs/perf/kfac_kernels.json
    (``gpu_assumptions``) and docs/kfac.md.

    Attributes:
        inverse_flops_per_n3: FLOPs of the Cholesky inverse per ``n^3``.
        solver_to_gemm: Asymptotic rate of ``eigh``'s level-3 kernels over the GEMM rate.
        eigen_bytes_per_n3: Bytes ``eigh``'s tridiagonal reduction reads per ``n^3`` (memory-bound).
        eigen_flops_per_n3: ``eigh``'s other FLOPs per ``n^3`` (at the solver rate).
        tile: GEMM tile edge: ``eigh``'s ``n_half = tile * sqrt(SMs)`` (an ``n x n`` update fills the SMs once).
        latency_passes: An ``eigh`` call's fixed cost in the compute model's per-pass launch costs.
        sync_s: Host round trip of a synchronising call.
        eigen_column_launches: Kernel launches per column of ``eigh`` (the reduction's ``symv``).
        launch_gap_s: Gap between two back-to-back kernels a library launches.
        factor_gemm_efficiency: Share of the FP32 peak (configs/gpus.yaml, at the sustained clock)
            the factors' Gram products reach (``a^T a``: ``d x d`` out, the token count deep).
        precondition_gemm_efficiency: The same for preconditioning's GEMMs (``d`` deep).
        solver_efficiency: Share of the FP32 peak the Cholesky inverse's ``inverse_flops_per_n3 n^3``
            FLOPs run at (``gpu_inverse_curve``).
        solver_cycles_per_column: GPU clock cycles per column of the factor the Cholesky inverse
            spends in steps that wait on each other (panels, triangular solves, launches): the
            ``column_s`` of ``gpu_inverse_curve`` is this over the clock.
        call_s: Fixed seconds of one factor or preconditioning call (the hooks' launches and host
            work).
        The last five are fitted on PipeFisher's per-phase timings of one transformer block on
        P100, V100 and RTX 3090 (data/kfac-layer-phases, srift/fitting/kfac_phases.py).
    """

    inverse_flops_per_n3: float = 7.0 / 3.0
    solver_to_gemm: float = 0.7
    eigen_bytes_per_n3: float = 2.0 / 3.0
    eigen_flops_per_n3: float = 10.0 / 3.0
    tile: float = 128.0
    latency_passes: float = 2.0
    sync_s: float = 10e-6
    eigen_column_launches: float = 1.0
    launch_gap_s: float = 5.5e-6
    factor_gemm_efficiency: float = 0.9
    precondition_gemm_efficiency: float = 0.8
    solver_efficiency: float = 0.5
    solver_cycles_per_column: float = 4000.0
    call_s: float = 8.5e-5

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GpuAssumptions":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise SriftError(f"unknown K-FAC GPU assumption(s): {', '.join(sorted(unknown))}.", "re-run scripts/fit_models.py.")
        a = cls(**{k: float(v) for k, v in d.items()})
        positive = (a.solver_to_gemm, a.inverse_flops_per_n3, a.tile, a.factor_gemm_efficiency, a.precondition_gemm_efficiency,
                    a.solver_efficiency)
        if not all(getattr(a, n) >= 0 for n in names) or min(positive) <= 0:
            raise SriftError("a K-FAC GPU assumption is out of range.", "re-run scripts/fit_models.py.")
        return a

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class KernelParams:
    """configs/perf/kfac_kernels.json.

    Attributes:
        shape: The solvers' efficiency exponent (fitted on the CPU table).
        measured: Fitted figures of devices with a measured table: ``cpu`` by thread count
            (``{"1": ..., "2": ...}``), a GPU by its canonical name (``{"": ...}``).
        gpu_assumptions: The central assumptions for GPUs without a table.
        meta: Provenance (ranges, sources, fit quality), carried but unused.
    """

    shape: float
    measured: dict[str, dict[str, MeasuredDevice]]
    gpu_assumptions: GpuAssumptions = field(default_factory=GpuAssumptions)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "K-FAC kernel params") -> "KernelParams":
        if not isinstance(d, dict) or d.get("schema") != PARAMS_SCHEMA:
            raise SriftError(f"{source} is not a '{PARAMS_SCHEMA}' file.", "re-run scripts/fit_models.py.")
        try:
            measured = {dev: {threads: MeasuredDevice.from_dict(v) for threads, v in per.items()}
                        for dev, per in d["measured"].items()}
            params = cls(float(d["shape"]), measured, GpuAssumptions.from_dict(d["gpu_assumptions"]["central"]),
                         {k: v for k, v in d.items() if k not in ("schema", "shape", "measured")})
        except (KeyError, TypeError, ValueError) as e:
            raise SriftError(f"{source} lacks a K-FAC kernel parameter ({e}).", "re-run scripts/fit_models.py.") from None
        if not params.shape > 0:
            raise SriftError(f"{source}: shape must be positive.", "re-run scripts/fit_models.py.")
        return params

    def to_dict(self) -> dict[str, Any]:
        return {"schema": PARAMS_SCHEMA, "shape": self.shape,
                "measured": {dev: {t: m.to_dict() for t, m in per.items()} for dev, per in self.measured.items()},
                **self.meta, "gpu_assumptions": {**self.meta.get("gpu_assumptions", {}), "central": self.gpu_assumptions.to_dict()}}


def params_path() -> Path:
    return configs_dir() / "perf" / "kfac_kernels.json"


@functools.lru_cache(maxsize=4)
def load_params(path: str | None = None) -> KernelParams:
    """The shipped (fitted) K-FAC kernel parameters, or those in ``path``."""
    p = Path(path) if path else params_path()
    return KernelParams.from_dict(read_json(p, "K-FAC kernel parameters", "re-run scripts/fit_models.py."), str(p))


def _matmul_precision(precision: str) -> str:
    """K-FAC's GEMMs run in IEEE fp32 whatever the training precision: autocast is off in its hooks
    and srift.kfac.layers.ieee_fp32 turns TF32 off around them (review item P3)."""
    return FP32


def derive_gpu(gpu: str, precision: str, shape: float, assumptions: GpuAssumptions) -> DeviceKernels:
    """A GPU's kernel model from its datasheet (configs/gpus.yaml), the compute model's memory rate
    and launch cost, and ``assumptions`` (no measured table).

    The factors' and preconditioning's GEMMs run at their efficiency times the FP32 peak at the
    sustained clock, the ``inverse`` method's damped Cholesky inverse on ``gpu_inverse_curve``
    (all three fitted on PipeFisher's GPU timings); ``eigh`` (``eigen``, no GPU measurement) from
    the compute model's matmul and memory rates and the documented assumptions.

    Args:
        gpu: A GPU name of configs/gpus.yaml.
        precision: The training precision (K-FAC's GEMMs are FP32 under every one: ``_matmul_precision``).
        shape: The ``eigen`` curve's efficiency exponent.
        assumptions: The derivation's assumptions.
    """
    from srift.perf.compute import kernel_rates

    spec = gpu_spec(gpu)
    rates = kernel_rates(spec.name, _matmul_precision(precision))
    a = assumptions
    peak = spec.peak_flops(FP32) / spec.clock_derate
    solver_flops = a.solver_to_gemm * rates.matmul_flops_per_s
    n_half = a.tile * math.sqrt(spec.sm_count)
    latency = a.latency_passes * rates.launch_s + a.sync_s
    inverse = gpu_inverse_curve(spec.name, shape, a)
    # eigh: the memory-bound half of the tridiagonal reduction and the rest at the solver rate.
    eigen_s_per_n3 = a.eigen_bytes_per_n3 / rates.memory_bytes_per_s + a.eigen_flops_per_n3 / solver_flops
    eigen = SolverCurve(latency, 1.0 / eigen_s_per_n3, n_half, shape, a.eigen_column_launches * a.launch_gap_s)
    gemm, pre = a.factor_gemm_efficiency * peak, a.precondition_gemm_efficiency * peak
    basis = (f"derived for {spec.name} (no measured table): from its FP32 peak {peak / 1e12:.1f} TFLOP/s, factor GEMMs at "
             f"{a.factor_gemm_efficiency:.2f} of it, preconditioning at {a.precondition_gemm_efficiency:.2f}, the Cholesky "
             f"inverse's {a.inverse_flops_per_n3:.2f} n^3 FLOPs at {a.solver_efficiency:.2f} of it plus "
             f"{a.solver_cycles_per_column:.0f} clock cycles per column (fitted on PipeFisher's P100/V100/RTX 3090 block "
             f"timings, factors of 768-4096: smaller ones extrapolated); copies at {rates.memory_bytes_per_s / 1e9:.0f} GB/s; "
             f"eigh at {a.solver_to_gemm:.2f} of the compute model's GEMM rate, half throughput at n = {n_half:.0f}")
    return DeviceKernels(spec.name, basis, inverse, eigen, gemm, rates.memory_bytes_per_s, a.call_s, a.sync_s,
                         precondition_flops_per_s=pre)


def gpu_inverse_curve(gpu: str, shape: float, assumptions: GpuAssumptions) -> SolverCurve:
    """The ``inverse`` method's damped Cholesky inverse of one ``n x n`` factor on a GPU, as the
    runtime runs it (``torch.linalg.cholesky_ex`` then ``torch.cholesky_inverse``, one factor at a
    time, fp32): its ``inverse_flops_per_n3 n^3`` FLOPs at ``solver_efficiency`` of the FP32 peak,
    ``solver_cycles_per_column`` clock cycles per column (the factorisation's and the triangular
    solves' steps that wait on each other) and a host synchronisation. Both constants are fitted on
    PipeFisher's timings of the same operations (ASDL's ``cholesky_inv``) on P100, V100 and RTX 3090
    (srift/fitting/kfac_phases.py)."""
    spec = gpu_spec(gpu)
    a = assumptions
    peak = spec.peak_flops(FP32) / spec.clock_derate
    clock_hz = (spec.sustained_clock_mhz or spec.boost_clock_mhz) * 1e6
    return SolverCurve(a.sync_s, a.solver_efficiency * peak / a.inverse_flops_per_n3, 0.0, shape,
                       a.solver_cycles_per_column / clock_hz)


def device_kernels(device: str, precision: str = "fp32", threads: int | None = None,
                   params: KernelParams | None = None, assumptions: GpuAssumptions | None = None) -> DeviceKernels:
    """The kernel model of ``device`` (``cpu`` or a GPU name) for a training precision.

    A device with a measured table uses its fitted figures (a CPU those of ``threads``, default
    the most threads measured); another GPU derives them (``derive_gpu``) from ``assumptions``
    (default: the shipped central ones).

    Raises:
        SriftError: for a CPU without a measured table, or an unmeasured thread count.
    """
    params = params or load_params()
    key = CPU if device == CPU else (find_gpu(device) or gpu_spec(device).name)
    measured = params.measured.get(key)
    if measured and assumptions is None:
        if key == CPU:
            counts = sorted(measured, key=int)
            pick = str(threads) if threads is not None else counts[-1]
            if pick not in measured:
                raise SriftError(f"no K-FAC kernel table for {threads} CPU thread(s) (measured: {', '.join(counts)}).",
                                 "run scripts/measure_kfac_kernels.py --threads N --merge, then scripts/fit_models.py.")
            m, label = measured[pick], f"cpu, {pick} thread(s)"
        else:
            m, label = next(iter(measured.values())), key
        basis = f"measured: data/measurements/kfac-kernels-{'cpu' if key == CPU else key}.csv ({label})"
        return DeviceKernels(key, basis, m.inverse, m.eigen, m.gemm_flops_per_s, m.memory_bytes_per_s, m.call_s, m.sync_s,
                             m.step_bytes_per_s, m.step_call_s)
    if key == CPU:
        raise SriftError("srift has no K-FAC kernel table for CPUs.",
                         "run scripts/measure_kfac_kernels.py, then scripts/fit_models.py.")
    return derive_gpu(key, precision, params.shape, assumptions or params.gpu_assumptions)


def half_precision(precision: str) -> bool:
    """Inputs and output gradients reach K-FAC's hooks in half precision (cast to fp32 there)."""
    return precision in HALF_PRECISIONS
