"""Training stacks (``--stack``): each one's named behaviours, read from configs/stacks.yaml, and
which of them srift prices.

A stack is a row of behaviours (gradient-reduce overlap and bucketing, tensor-parallel
communication overlap, sequence parallelism, attention kernel, fused kernels, default recompute,
optimizer step, master weights, reduce dtype, activation offloading, CUDA graphs, torch.compile,
the data parallelism a layout runs under, gradient accumulation), each with the package file and
version (or document) it was read from. ``load_stacks`` checks the whole file up front: a bad file is a ``SriftError``
naming the stack and behaviour (exit 2), never a traceback halfway through a prediction.

What the simulators do with a stack (docs/stacks.md):

- the layout simulator (srift/simulate/layout_prediction.py) prices ``grad_reduce_overlap`` (the
  data-parallel reduction hidden under the last micro-batch's backward, or waited for after it),
  ``tp_comm_overlap`` (userbuffers or async TP: the collectives beside the GEMMs; none: NCCL's,
  waited for), ``layout_data_parallel`` (Megatron's distributed optimizer with Megatron-Core's
  kernels, or FSDP2 with PyTorch's) and ``grad_accumulation`` (``fp32-copy``: DeepSpeed's
  per-micro-batch cast-and-add of the gradients into fp32, ``FP32_COPY_BYTES_PER_PARAM`` at the
  GPU's memory rate);
- the data-parallel simulator (srift/simulate/workload.py) prices ``grad_reduce_overlap`` and
  ``grad_bucket_mb`` of plain DDP (the bucket cap, and one reduction after backward when the stack
  does not overlap it), and ``fused_kernels`` ``transformers-eager`` (Transformers' element-wise
  chains added to an analytic decoder profile, srift/simulate/eager.py);
- every other behaviour is named in the prediction's notes as not modelled.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from srift.bounds import MAX_BUCKET_CAP_MB
from srift.errors import SriftError
from srift.files import configs_dir, read_json, read_yaml
from srift.job import (DDP, FSDP, HSDP, MEGATRON_CORE, PYTORCH_STACK, STACKS, TORCHTITAN, ZERO1, ZERO2, Job, Stack as StackName)

T = TypeVar("T")


class TpCommOverlap(enum.Enum):
    """How a stack overlaps tensor-parallel collectives with the GEMMs."""

    NONE = "none"
    ASYNC = "async"  # PyTorch's async TP (symmetric memory)
    USERBUFFERS = "userbuffers"  # Transformer Engine's userbuffers


class AttentionKernel(enum.Enum):
    CUDNN_FUSED = "cudnn-fused"
    FLASH_ATTENTION = "flash-attention"
    SDPA = "sdpa"
    FUSED_SOFTMAX = "fused-softmax"


class FusedKernels(enum.Enum):
    TRANSFORMER_ENGINE = "transformer-engine"
    APEX = "apex"
    PYTORCH = "pytorch"
    TRANSFORMERS_EAGER = "transformers-eager"  # Transformers' modelling code: norms, RoPE, sums as separate kernels


class Recompute(enum.Enum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class OptimizerStep(enum.Enum):
    FUSED = "fused"
    FOREACH = "foreach"
    IN_BACKWARD = "in-backward"
    EIGHT_BIT = "8-bit"
    OFFLOAD = "offload"


class MasterWeights(enum.Enum):
    FP32 = "fp32"
    NONE = "none"


class ReduceDtype(enum.Enum):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


class GradAccumulation(enum.Enum):
    """How a stack sums the weight gradients of a step's micro-batches."""

    FUSED = "fused"  # the weight-gradient GEMM adds into fp32 main grads (Megatron's gradient_accumulation_fusion)
    AUTOGRAD = "autograd"  # torch's AccumulateGrad adds into ``.grad``
    FP32_COPY = "fp32-copy"  # DeepSpeed's BF16_Optimizer: each micro-batch's bf16 grads cast and added to fp32 copies


# DeepSpeed's BF16_Optimizer after every micro-batch's backward (deepspeed 0.6.5, the release of
# the BLOOM-176B run's bf16 branch, deepspeed/runtime/bf16_optimizer.py ``update_hp_grads``:
# ``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))``; the pipeline engine calls it after each
# micro-batch, deepspeed/runtime/pipe/engine.py ``_exec_backward_pass``): the cast reads the bf16
# gradient (2 bytes) and writes an fp32 copy (4); the add reads the fp32 gradient and the copy (8)
# and writes the gradient (4). Bytes per trainable parameter per micro-batch, two kernels outside
# the GEMMs (``clear_lp_grads`` sets the bf16 gradients to None: nothing more).
FP32_COPY_BYTES_PER_PARAM: Final = 2.0 + 4.0 + 8.0 + 4.0


class LayoutDataParallel(enum.Enum):
    """The data parallelism a ``--layout`` job of the stack runs under (``--parallelism auto``)."""

    ZERO1 = "zero1"
    FSDP = "fsdp"


@dataclass(frozen=True)
class Behaviour(Generic[T]):
    """One behaviour's value and where it was read (package file and version, or a document)."""

    value: T
    source: str


@dataclass(frozen=True)
class StackSpec:
    """One row of configs/stacks.yaml (the module docstring says what each behaviour is)."""

    name: str
    description: str
    grad_reduce_overlap: Behaviour[bool]
    grad_bucket_mb: Behaviour[float | None]
    tp_comm_overlap: Behaviour[TpCommOverlap]
    sequence_parallel: Behaviour[bool]
    attention_kernel: Behaviour[AttentionKernel]
    fused_kernels: Behaviour[FusedKernels]
    default_recompute: Behaviour[Recompute]
    optimizer_step: Behaviour[OptimizerStep]
    master_weights: Behaviour[MasterWeights]
    reduce_dtype: Behaviour[ReduceDtype]
    activation_offloading: Behaviour[bool]
    cuda_graphs: Behaviour[bool]
    torch_compile: Behaviour[bool]
    layout_data_parallel: Behaviour[LayoutDataParallel]
    grad_accumulation: Behaviour[GradAccumulation]

    @property
    def grad_accum_bytes(self) -> float:
        """The layout simulator's ``grad_accum_bytes``: bytes per trainable parameter each
        micro-batch's backward moves outside the GEMMs to sum the gradients (0: in the GEMM, or as
        the compute model prices a backward)."""
        return FP32_COPY_BYTES_PER_PARAM if self.grad_accumulation.value == GradAccumulation.FP32_COPY else 0.0

    @property
    def tp_overlap(self) -> bool:
        """The layout simulator's ``tp_overlap``: TP collectives run beside the GEMMs."""
        return self.tp_comm_overlap.value != TpCommOverlap.NONE

    def behaviours(self) -> dict[str, Behaviour[Any]]:
        """Behaviour name -> behaviour, in the file's order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("name", "description")}


# What each behaviour's value must be: an enum, bool, or a bucket size (a positive number or null).
_KINDS: Final[dict[str, Any]] = {
    "grad_reduce_overlap": bool, "grad_bucket_mb": "bucket", "tp_comm_overlap": TpCommOverlap,
    "sequence_parallel": bool, "attention_kernel": AttentionKernel, "fused_kernels": FusedKernels,
    "default_recompute": Recompute, "optimizer_step": OptimizerStep, "master_weights": MasterWeights,
    "reduce_dtype": ReduceDtype, "activation_offloading": bool, "cuda_graphs": bool, "torch_compile": bool,
    "layout_data_parallel": LayoutDataParallel, "grad_accumulation": GradAccumulation,
}
# The behaviours each simulator prices (module docstring); the rest are named as not modelled.
LAYOUT_PRICED: Final = ("grad_reduce_overlap", "tp_comm_overlap", "layout_data_parallel", "grad_accumulation")
DATA_PARALLEL_PRICED: Final = ("grad_reduce_overlap", "grad_bucket_mb", "fused_kernels")
STACKS_FILE = "stacks.yaml"


def _bad(where: str, what: str) -> SriftError:
    return SriftError(f"{where}: {what}.", f"correct {STACKS_FILE} in the configs folder (docs/stacks.md lists the "
                                          "behaviours and their values).")


def _value(where: str, kind: Any, raw: Any) -> Any:
    if kind is bool:
        if not isinstance(raw, bool):
            raise _bad(where, f"value {raw!r} is not true or false")
        return raw
    if kind == "bucket":
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw <= MAX_BUCKET_CAP_MB:
            raise _bad(where, f"value {raw!r} is not a bucket size in MiB (above 0, at most {MAX_BUCKET_CAP_MB:,}) or null")
        return float(raw)
    words = [m.value for m in kind]
    if raw not in words:
        raise _bad(where, f"value {raw!r} is not one of {', '.join(words)}")
    return kind(raw)


def parse_stacks(data: Any, origin: str = STACKS_FILE) -> dict[str, StackSpec]:
    """The stacks of a loaded configs/stacks.yaml, every row and behaviour checked.

    Raises:
        SriftError: for a missing or unknown stack or behaviour, a value outside its vocabulary,
            or a behaviour without its source.
    """
    rows = data.get("stacks") if isinstance(data, dict) else None
    if not isinstance(rows, dict):
        raise _bad(origin, "no 'stacks' mapping")
    if set(rows) != set(STACKS):
        missing = sorted(str(k) for k in set(STACKS) - set(rows))
        unknown = sorted(str(k) for k in set(rows) - set(STACKS))
        raise _bad(origin, "stacks " + "; ".join(x for x in (f"missing: {', '.join(missing)}" if missing else "",
                                                             f"unknown: {', '.join(map(str, unknown))}" if unknown else "") if x))
    out: dict[str, StackSpec] = {}
    for name in STACKS:
        row = rows[name]
        if not isinstance(row, dict) or not isinstance(row.get("description"), str):
            raise _bad(f"{origin}: stack {name}", "needs a description and its behaviours")
        if set(row) - {"description"} != set(_KINDS):
            extra = sorted(set(row) - {"description"} - set(_KINDS))
            missing = sorted(str(k) for k in set(_KINDS) - set(row))
            raise _bad(f"{origin}: stack {name}", "behaviours " + (f"missing: {', '.join(missing)}" if missing else
                                                                  f"unknown: {', '.join(map(str, extra))}"))
        got: dict[str, Behaviour[Any]] = {}
        for key, kind in _KINDS.items():
            where = f"{origin}: stack {name}, {key}"
            b = row[key]
            if not isinstance(b, dict) or set(b) != {"value", "source"}:
                raise _bad(where, "needs exactly a value and a source")
            if not isinstance(b["source"], str) or not b["source"].strip():
                raise _bad(where, "has no source (the package file and version, or the document, it was read from)")
            got[key] = Behaviour(_value(where, kind, b["value"]), b["source"])
        out[name] = StackSpec(name, row["description"], **got)
    return out


@functools.lru_cache(maxsize=4)
def load_stacks(path: Path | None = None) -> dict[str, StackSpec]:
    """Every stack of configs/stacks.yaml (or ``path``), checked (``parse_stacks``)."""
    p = path or configs_dir() / STACKS_FILE
    return parse_stacks(read_yaml(p, "stack table"), str(p.name))


@dataclass(frozen=True)
class ResolvedStack:
    """The stack a prediction is priced under, and whether it was the default (not given or detected)."""

    spec: StackSpec
    defaulted: bool

    @property
    def name(self) -> str:
        return self.spec.name


def default_stack(layout: bool, parallelism: str) -> StackName:
    """The stack srift prices when none is given or detected: Megatron-Core for a layout (torchtitan
    for a layout under FSDP/HSDP, which srift prices as torchtitan runs it), plain PyTorch for data
    parallelism."""
    if layout:
        return TORCHTITAN if parallelism in (FSDP, HSDP) else MEGATRON_CORE
    return PYTORCH_STACK


@functools.lru_cache(maxsize=64)
def resolve(name: str | None, layout: bool, parallelism: str) -> ResolvedStack:
    """The ``ResolvedStack`` of ``--stack name`` (None: ``default_stack``)."""
    if name is None:
        return ResolvedStack(load_stacks()[default_stack(layout, parallelism)], True)
    return ResolvedStack(load_stacks()[name], False)


def job_stack(job: Job) -> ResolvedStack:
    """The stack ``job`` is priced under (its ``stack``, else the default for its path)."""
    return resolve(job.stack, job.layout is not None, job.parallelism)


def eager_kernels(job: Job) -> bool:
    """Whether ``job``'s stack runs Transformers' eager modelling code (``fused_kernels:
    transformers-eager``): the data-parallel simulator adds its element-wise chains to an analytic
    decoder profile (srift/simulate/eager.py)."""
    return job_stack(job).spec.fused_kernels.value == FusedKernels.TRANSFORMERS_EAGER


def layout_parallelism(job: Job) -> str:
    """A layout job's data parallelism: the job's, or under ``auto`` the stack's
    ``layout_data_parallel`` (zero1 for the default, Megatron-Core)."""
    if job.parallelism in (ZERO1, DDP, FSDP, HSDP):
        return job.parallelism
    if job.stack is None:
        return ZERO1
    return load_stacks()[job.stack].layout_data_parallel.value.value


def ddp_bucket_cap_mb(job: Job) -> float:
    """Plain DDP's bucket cap under the job's stack: ``--bucket-cap-mb`` when given (not its
    default), else the stack's ``grad_bucket_mb``; a stack that does not overlap the reduction with
    backward reduces once after it (a cap above every model's gradients)."""
    if job.bucket_cap_mb != Job.bucket_cap_mb:
        return job.bucket_cap_mb
    spec = job_stack(job).spec
    if not spec.grad_reduce_overlap.value:
        return float(MAX_BUCKET_CAP_MB)
    return spec.grad_bucket_mb.value or job.bucket_cap_mb


def _shown(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return "default" if value is None else f"{value:g} MiB"


@functools.lru_cache(maxsize=64)
def stack_note(stack: ResolvedStack, layout: bool, parallelism: str = DDP) -> str:
    """The prediction's note on its stack: its name (and that it is the default), the behaviours
    priced, and those not modelled, with their values."""
    spec = stack.spec
    priced: tuple[str, ...] = LAYOUT_PRICED if layout else (DATA_PARALLEL_PRICED if parallelism in (DDP,) else ())
    if not layout and parallelism in (ZERO2, FSDP, HSDP):
        priced = ("fused_kernels",)  # sharded: no DDP buckets; the eager-kernel transform still applies
    b = spec.behaviours()
    head = f"stack {spec.name}" + (" (the default: --stack NAME names yours; srift profile detects it)" if stack.defaulted
                                   else "")
    done = ", ".join(f"{k.replace('_', ' ')} {_shown(b[k].value)}" for k in priced) or "none of its behaviours"
    rest = ", ".join(f"{k.replace('_', ' ')} {_shown(v.value)}" for k, v in b.items() if k not in priced)
    return f"{head}: priced: {done}; not modelled: {rest} (configs/stacks.yaml)"


@dataclass(frozen=True)
class DetectedStack:
    """The stack ``srift profile`` saw in the profiled script (a profile's ``stack`` mapping).

    Attributes:
        name: One of STACKS.
        version: The package's version (``deepspeed 0.17.5``'s ``0.17.5``), or None when unknown.
        evidence: What showed it (``deepspeed.DeepSpeedEngine``, the module imported).
    """

    name: StackName
    version: str | None = None
    evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "evidence": self.evidence}

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "DetectedStack":
        """The mapping of a profile file, checked.

        Raises:
            SriftError: for a name outside STACKS or fields that are not short strings.
        """
        fix = f"correct or delete the profile's 'stack' mapping (name: one of {', '.join(STACKS)})."
        if not isinstance(data, dict) or set(data) - {"name", "version", "evidence"}:
            raise SriftError(f"{source}: 'stack' must be a mapping of name, version and evidence.", fix)
        name, version, evidence = data.get("name"), data.get("version"), data.get("evidence") or ""
        if name not in STACKS:
            raise SriftError(f"{source}: 'stack.name' is not a training stack srift knows.", fix)
        for key, v in (("version", version), ("evidence", evidence)):
            if v is not None and (not isinstance(v, str) or len(v) > 200):
                raise SriftError(f"{source}: 'stack.{key}' must be a string of at most 200 characters.", fix)
        return cls(name, version, evidence)


STACK_ACCURACY_FILE = "stack_accuracy.json"


@functools.lru_cache(maxsize=2)
def stack_accuracy() -> dict[str, dict[str, Any]]:
    """configs/perf/stack_accuracy.json's stacks (scripts/validate.py --only stacks --write-stacks):
    name -> rows, loso_mape_pct, lostack_mape_pct, groups; empty when the file is missing."""
    path = configs_dir() / "perf" / STACK_ACCURACY_FILE
    if not path.is_file():
        return {}
    data = read_json(path, "per-stack accuracy", "regenerate it: python scripts/validate.py --only stacks --write-stacks")
    stacks = data.get("stacks") if isinstance(data, dict) else None
    return stacks if isinstance(stacks, dict) else {}


def _quoted(fig: dict[str, Any]) -> float:
    held = fig.get("lostack_mape_pct")
    return float(held if isinstance(held, (int, float)) else fig["loso_mape_pct"])


@functools.lru_cache(maxsize=256)
def stack_typical_error(stack: str, pct: float | None, basis: str, group: str | None = None) -> tuple[float | None, str]:
    """The figure a prediction of ``stack`` quotes: its group's (``pct``, ``basis``) or its stack's
    held-out figure (over the stack's rows of validation ``group`` where it has some, else all its
    rows), whichever is wider; a stack without step-time measurements quotes the widest stack
    figure and says so."""
    figures = stack_accuracy()
    if not figures:
        return pct, basis
    own = figures.get(stack)
    if own is not None and group is not None and isinstance(own.get("by_group"), dict) and group in own["by_group"]:
        own = own["by_group"][group]
    if own is not None:
        held = _quoted(own)
        how = "leave-one-stack-out" if isinstance(own.get("lostack_mape_pct"), (int, float)) else "leave-one-source-out"
        note = f"stack {stack}: {held:g} % {how} over {own['rows']} runs ({', '.join(own.get('groups', []))})"
    else:
        widest = max(figures, key=lambda k: _quoted(figures[k]))
        held = _quoted(figures[widest])
        note = (f"stack {stack}: no step-time measurements, so the widest stack figure ({widest}, {held:g} %) "
                "is quoted")
    if own is not None and not isinstance(own.get("lostack_mape_pct"), (int, float)):
        return pct, basis  # every row of the group is this stack: its figure is the group's own
    if pct is None or held > pct:
        return held, f"{note}; the group's own: {basis}" if pct is not None else note
    return pct, f"{basis}; {note}"
