"""Assemble the profile of a measured script run: the model's structure (one untimed analysed
step, srift/profiling/flops.py) merged with the timings the hooks recorded, the batch, sequence
length and precision detected, the phase totals, and optionally K-FAC's kernel times.

Gradient accumulation: every forward/backward of the model between two steps belongs to the
iteration; per-layer times are summed over those micro-batches, and ``batch_size`` is the number
of samples per optimizer step (micro-batch x accumulation steps) with FLOPs and moved bytes
scaled to match; ``activation_bytes`` stays per micro-batch (what is live at once).

FSDP jobs (srift/profiling/fsdp.py): the structure is analysed by the runner on every rank before
it stops the script (the analysed step runs FSDP's collectives) and handed in as
``Measurement.layers``; the layers then get their units, unsharded parameter counts and clean
names, and the profile its parallelism, checkpointing and measured collectives.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import srift
from srift.hardware import find_gpu
from srift.perf.compute import precision_label
from srift.profile import AllReduceBucket, LayerProfile, PhaseTimes, Profile
from srift.profiling import fsdp as fsdp_profile
from srift.profiling.flops import analyze_layers
from srift.profiling.hooks import IterationTimes, LayerTimer, mean_std
from srift.profiling.kfac_timing import measure_kfac


@dataclass
class Measurement:
    """What one profiled script run measured (rank 0)."""

    name: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    timer: LayerTimer
    clock_kind: str  # "cpu" or "cuda"
    records: list[IterationTimes]
    warmup: int
    world_size: int
    buckets: list[AllReduceBucket]
    layers: list[LayerProfile] | None = None  # the structure, when analysed already (FSDP)
    fsdp: fsdp_profile.FsdpMeasurement | None = None


def assemble_profile(m: Measurement, notes: list[str], warnings: list[str], batch_override: int | None,
                     kfac: bool = False) -> Profile:
    """The profile of a measured run (``notes`` so far, then what assembling finds, then the
    run's ``warnings``)."""
    notes = list(notes)
    layers = m.layers if m.layers is not None else analyze_structure(m.model, m.timer, notes)
    micro = max(1, round(sum(r.micro_batches for r in m.records) / len(m.records)))
    _merge_timings(layers, m, micro)
    micro_batch, seq_len = _input_shape(m.timer)
    if micro > 1:
        notes.append(f"gradient accumulation: {micro} micro-batches of {micro_batch} per optimizer step; "
                     "batch_size, FLOPs and times are per step, activation_bytes per micro-batch")
    if batch_override:
        notes.append(f"batch size {batch_override} given with --batch-size (detected {micro_batch * micro})")
    precision = _precision(m, notes)
    if kfac and m.fsdp is not None:  # its extra step would run FSDP's collectives on rank 0 alone
        notes.append("--kfac: K-FAC is modelled with DDP only; its kernels were not timed on this FSDP job")
    elif kfac:
        _kfac_times(m, layers, micro, notes)
    sharding: dict[str, Any] = {}
    phases = _phases(m.records)
    if m.fsdp is not None:
        layers, precision, sharding = _fsdp_fields(m.fsdp, layers, precision, m.records, notes)
        phases.collectives_s = m.fsdp.blocking_s
    return Profile(
        name=m.name,
        batch_size=int(batch_override or micro_batch * micro),
        precision=precision,
        layers=layers,
        seq_len=seq_len,
        device=_device(m.clock_kind),
        framework=_versions(),
        optimizer=_optimizer_info(m.optimizer),
        phases=phases,
        iterations=len(m.records),
        world_size=m.world_size,
        allreduce=m.buckets,
        input_bytes_per_sample=m.timer.input_bytes / max(micro_batch, 1),
        notes=[f"measured with `srift profile` ({m.warmup} warm-up + {len(m.records)} measured optimizer steps)"]
        + notes + warnings,
        **sharding,
    )


def _fsdp_fields(fm: fsdp_profile.FsdpMeasurement, layers: list[LayerProfile], precision: str,
                 records: list[IterationTimes], notes: list[str]) -> tuple[list[LayerProfile], str, dict[str, Any]]:
    """An FSDP job's layers (units, unsharded parameters, clean names), precision and profile fields."""
    setup = fm.setup
    layers = fsdp_profile.apply_to_layers(layers, fm)
    ckpt, ckpt_note = fsdp_profile.checkpointing(layers, fm.recomputed)
    notes.append(f"{setup.api} ({setup.strategy}) detected: {setup.describe()['units']} units besides the root, "
                 f"parallelism {setup.parallelism}, activation checkpointing {ckpt}")
    notes += setup.notes + ([ckpt_note] if ckpt_note else [])
    if ckpt != "none":
        rec_s = sum(r.recompute_s for r in records) / len(records)
        notes.append(f"recomputation measured: {rec_s:.6f} s per iteration (not in the layers' forward or backward times)")
    mp_precision = fsdp_profile.profile_precision(setup)
    if mp_precision is not None and precision in ("fp32", "tf32"):
        notes.append(f"FSDP MixedPrecision param_dtype {setup.param_dtype}: precision {mp_precision}")
        precision = mp_precision
    return layers, precision, {"parallelism": setup.parallelism, "activation_checkpointing": ckpt,
                               "fsdp": setup.describe(), "collectives": fm.collectives}


def _merge_timings(layers: list[LayerProfile], m: Measurement, micro: int) -> None:
    """Each layer's mean and spread of forward and backward seconds, matched by module name; with
    ``micro`` micro-batches per step, the one analysed micro-batch's FLOPs and bytes times ``micro``."""
    by_name = {n: i for i, (n, _) in enumerate(m.timer.leaves)}
    for layer in layers:
        i = by_name.get(layer.name)
        if i is None:
            continue
        layer.fwd_s, layer.fwd_s_std = mean_std([r.layer_fwd_s.get(i, 0.0) for r in m.records])
        layer.bwd_s, layer.bwd_s_std = mean_std([r.layer_bwd_s.get(i, 0.0) for r in m.records])
        if micro > 1:
            layer.fwd_flops *= micro
            layer.bwd_flops *= micro
            layer.fwd_flops_seq2 *= micro
            layer.bwd_flops_seq2 *= micro
            layer.fwd_bytes *= micro
            layer.bwd_bytes *= micro


def _input_shape(timer: LayerTimer) -> tuple[int, int | None]:
    """(micro-batch, sequence length) of the model's first input: its first dimension, and its
    second when it holds integers (token ids)."""
    x = timer.first_input
    micro_batch = int(x.shape[0]) if x is not None and x.dim() > 0 else 1
    seq_len = int(x.shape[1]) if x is not None and x.dim() >= 2 and not x.is_floating_point() else None
    return micro_batch, seq_len


def tf32_flags() -> dict[str, str]:
    """PyTorch's two TF32 switches as the script left them (recorded in the profile's ``framework``):
    cuDNN's (convolutions; True by default) and cuBLAS's (matmuls; False by default since 1.12, set
    by ``torch.backends.cuda.matmul.allow_tf32`` or ``torch.set_float32_matmul_precision``)."""
    return {"cudnn.allow_tf32": str(bool(torch.backends.cudnn.allow_tf32)),
            "cuda.matmul.allow_tf32": str(bool(torch.backends.cuda.matmul.allow_tf32)),
            "float32_matmul_precision": str(torch.get_float32_matmul_precision())}


def _precision(m: Measurement, notes: list[str]) -> str:
    """``amp`` when the script ran the model under autocast; on CUDA the label of PyTorch's two
    TF32 flags (``srift.perf.compute.precision_label``: both -> ``tf32``, convolutions only, the
    default -> ``fp32``, neither -> ``fp32-strict``); ``fp32`` on a CPU."""
    if m.timer.autocast is not None:
        notes.append(f"autocast {m.timer.autocast[0]} {str(m.timer.autocast[1]).replace('torch.', '')} detected")
        return "amp"
    if m.clock_kind != "cuda":
        return "fp32"
    cudnn, matmul = bool(torch.backends.cudnn.allow_tf32), bool(torch.backends.cuda.matmul.allow_tf32)
    if matmul and not cudnn:
        notes.append("TF32 allowed for matmuls but not for convolutions: recorded as tf32 (srift has no name for it)")
    return precision_label(cudnn, matmul)


def _phases(records: list[IterationTimes]) -> PhaseTimes:
    total, total_std = mean_std([r.total_s for r in records])
    return PhaseTimes(
        data_s=mean_std([r.data_s for r in records])[0],
        forward_s=mean_std([r.forward_s for r in records])[0],
        backward_s=mean_std([r.backward_s for r in records])[0],
        optimizer_s=mean_std([r.optimizer_s for r in records])[0],
        total_s=total,
        total_s_std=total_std,
    )


def _analysis_step(model: torch.nn.Module, timer: LayerTimer) -> Callable[[], Any] | None:
    """One forward pass of the model on the batch captured in warm-up, returning a scalar to
    backpropagate, under the script's autocast; None when no batch was captured."""
    if timer.capture is None:
        return None
    args, kwargs = timer.capture

    def step() -> Any:
        if timer.autocast is not None:
            with torch.autocast(timer.autocast[0], dtype=timer.autocast[1]):
                out = model(*args, **kwargs)
        else:
            out = model(*args, **kwargs)
        t = _loss_tensor(out)
        return t.float().sum() if t is not None else out

    return step


def _kfac_times(m: Measurement, layers: list[LayerProfile], micro: int, notes: list[str]) -> None:
    """Time K-FAC's kernels on the captured batch and write them into ``layers``."""
    step = _analysis_step(m.model, m.timer)
    if step is None:
        notes.append("--kfac: no training forward pass was captured; K-FAC kernels were not timed")
        return
    try:
        times = measure_kfac(m.model, step)
    except Exception as exc:  # keep the profile; say why the K-FAC times are missing
        notes.append(f"--kfac: timing K-FAC kernels failed ({type(exc).__name__}: {exc})")
        return
    for layer in layers:
        t = times.get(layer.name)
        if t is None:
            continue
        # Factors are built per micro-batch: a step of `micro` micro-batches builds them `micro` times.
        layer.kfac_factor_a_s, layer.kfac_factor_g_s = t.factor_a_s * micro, t.factor_g_s * micro
        layer.kfac_inverse_a_s, layer.kfac_inverse_g_s = t.inverse_a_s, t.inverse_g_s
        layer.kfac_precondition_s = t.precondition_s
    notes.append(f"--kfac: K-FAC kernels timed on {len(times)} layers (factors, Cholesky inverses, preconditioning; fp32)")


def analyze_structure(model: torch.nn.Module, timer: LayerTimer, notes: list[str]) -> list[LayerProfile]:
    """Per-layer FLOPs/bytes/params from one untimed analysed step on the captured batch (a note
    says so when it cannot run; the layers then carry names and parameters only)."""
    step = _analysis_step(model, timer)
    if step is not None:
        try:
            with torch.enable_grad():
                return analyze_layers(model, step)
        except Exception as exc:  # a model FlopCounterMode cannot trace: keep the timings
            notes.append(f"structural analysis failed ({type(exc).__name__}: {exc}); FLOPs and bytes are missing")
    else:
        notes.append("no training forward pass was captured; FLOPs and bytes are missing")
    return leaf_layers(timer)


def leaf_layers(timer: LayerTimer) -> list[LayerProfile]:
    """The timed leaves with their names and parameters only (no FLOPs or bytes)."""
    layers = []
    for name, mod in timer.leaves:
        ps = [p for p in mod.parameters(recurse=False) if p.requires_grad]
        frozen = [p for p in mod.parameters(recurse=False) if not p.requires_grad]
        layers.append(LayerProfile(name=name, type=type(mod).__name__, params=sum(p.numel() for p in ps),
                                   grad_bytes=sum(p.numel() * p.element_size() for p in ps),
                                   frozen_bytes=float(sum(p.numel() * p.element_size() for p in frozen))))
    return layers


def _loss_tensor(out: Any) -> torch.Tensor | None:
    """The first floating tensor output that autograd can differentiate (loss or logits)."""
    if isinstance(out, torch.Tensor):
        return out if out.requires_grad else None
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        values = out.to_tuple() if hasattr(out, "to_tuple") else tuple(out.values())
        return _loss_tensor(values)
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _loss_tensor(o)
            if t is not None:
                return t
    return None


def _device(kind: str) -> dict[str, Any]:
    if kind == "cuda":
        dev_name = torch.cuda.get_device_name()
        return {"name": dev_name, "kind": "cuda", "gpu": find_gpu(dev_name)}
    return {"name": platform.processor() or platform.machine() or "cpu", "kind": "cpu", "gpu": None}


def _versions() -> dict[str, str]:
    out = {"torch": str(torch.__version__), "python": platform.python_version(), "srift": srift.__version__, **tf32_flags()}
    for mod in ("transformers", "torchvision", "timm"):
        if mod in sys.modules:
            out[mod] = str(getattr(sys.modules[mod], "__version__", "unknown"))
    return out


def _optimizer_info(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Optimizer type and its measured state bytes per trainable parameter."""
    n_params = sum(p.numel() for g in opt.param_groups for p in g["params"]) or 1
    state_bytes = 0
    for st in opt.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:  # skip scalar step counters
                state_bytes += v.numel() * v.element_size()
    return {"type": type(opt).__name__, "state_bytes_per_param": round(state_bytes / n_params, 3)}
