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

import dataclasses
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import srift
from srift.stacks import DetectedStack
from srift.hardware import find_gpu
from srift.job import FP32, HALF_PRECISIONS, NO_CHECKPOINTING, TF32
from srift.perf.compute import precision_label
from srift.profile import (
    INTERQUARTILE_MEAN, WALL, AllReduceBucket, Clock, DeviceInfo, LayerProfile, MeasurementInfo, OptimizerInfo, PhaseTimes,
    Profile, RankMemory,
)
from srift.profiling import fsdp as fsdp_profile
from srift.profiling.batch_timing import sub_batch, time_full_and_half
from srift.profiling.flops import analyze_layers
from srift.profiling.load import under_load
from srift.profiling.hooks import IterationTimes, LayerTimer, WallClock, interquartile_mean, steady_steps
from srift.profiling.kfac_timing import measure_kfac
from srift.profiling.saved import SAVED_SCHEMA, record_saved_bytes


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
    device: torch.device = torch.device("cpu")  # the model's (the clock's) device
    # srift's pairs after the measured steps: the total of the step without leaf hooks, of the one with
    unhooked_s: list[float] = field(default_factory=list)
    paired_s: list[float] = field(default_factory=list)
    pairs_planned: int = 0  # how many srift meant to run (fewer: the script ended first)
    peak_memory: list[RankMemory] = field(default_factory=list)
    other_optimizers: list[torch.optim.Optimizer] = field(default_factory=list)  # timed with the first (M10)
    clock: Clock = WALL  # how the marks were taken
    run_queue_s: list[float] = field(default_factory=list)  # per measured step, left out of the times (CPU)
    stack: DetectedStack | None = None  # the training stack that drove the step (stack_detect.py)


def assemble_profile(m: Measurement, notes: list[str], warnings: list[str], batch_override: int | None,
                     kfac: bool = False) -> Profile:
    """The profile of a measured run (``notes`` so far, then what assembling finds, then the
    run's ``warnings``)."""
    notes = list(notes)
    layers = m.layers if m.layers is not None else analyze_structure(m.model, m.timer, notes)
    m, micro = _typical_iterations(m, notes)
    timing = "layers" if any(r.hooked for r in m.records) else "step"
    if timing == "step":
        notes.append("no leaf module ran its hooks in the measured steps (a compiled model): whole steps were timed "
                     "(forward, backward, optimizer); layer times are left to the compute model")
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
    saved = m.layers is None and m.fsdp is None and _saved_bytes(m, layers, precision, notes)
    sharding: dict[str, Any] = {}
    phases = _phases(m.records)
    hook_cost = None
    done = min(len(m.unhooked_s), len(m.paired_s))
    if timing == "layers" and done:
        phases.total_s_unhooked = interquartile_mean(m.unhooked_s)
        hooked_s = phases.total_s or 0.0
        raw = hook_cost_s(m.unhooked_s, m.paired_s)
        cost = subtract_hook_cost(layers, phases, m.records, raw, m.timer.leaves)
        hook_cost = hooked_s, cost
        notes.append(f"srift's per-layer hooks cost {cost * 1e3:.3f} ms per step ({done} pairs of steps without "
                     f"and with them); taken out of the layers and the step ({hooked_s * 1e3:.3f} ms with them)"
                     if cost > 0 else f"srift's {done} pairs of steps without and with its per-layer hooks show no "
                     f"cost (their difference {raw * 1e3:+.3f} ms per step: noise): nothing taken out")
        if done < m.pairs_planned:
            notes.append(f"the script ended after {done} of srift's {m.pairs_planned} pairs of steps")
    elif timing == "layers" and m.pairs_planned:
        notes.append("the script ended before srift's pairs of steps without and with its hooks: the layer times "
                     "include what the hooks cost")
    if m.layers is None and m.fsdp is None and m.world_size == 1:  # one process: no collectives to match
        _time_half_batch(m, phases, notes)
    if m.world_size > 1 and m.fsdp is None:  # DDP: the exposed tail of its all-reduces
        phases.comm_wait_s = _mean_std([r.after_backward_s for r in m.records], steady_steps(m.records))[0]
        notes.append("measured in a multi-process run: backward carries the all-reduces' contention for the GPU; "
                     "a one-process profile is the better compute source")
    device = _device(m.clock_kind, m.device)
    if device.kind == "cuda" and device.gpu is None:  # C1: say it, not silently structural
        notes.append(f"GPU '{device.name}' is not in srift's catalog (configs/gpus.yaml; a variant such as the "
                     "H100 NVL, or a MIG slice): predictions use this profile's FLOPs and bytes, not its times")
    if m.fsdp is not None:
        layers, precision, sharding = _fsdp_fields(m.fsdp, layers, precision, m.records, notes)
        phases.collectives_s = m.fsdp.blocking_s
    loaded = under_load(m.run_queue_s, phases.total_s)
    if loaded:
        warnings.append(loaded)
    return Profile(
        name=m.name,
        batch_size=int(batch_override or micro_batch * micro),
        precision=precision,
        layers=layers,
        seq_len=seq_len,
        device=device,
        framework=_versions(),
        optimizer=_optimizer_info([m.optimizer, *m.other_optimizers], m.model),
        phases=phases,
        iterations=len(m.records),
        world_size=m.world_size,
        allreduce=m.buckets,
        input_bytes_per_sample=m.timer.input_bytes / max(micro_batch, 1),
        notes=[f"measured with `srift profile` ({m.warmup} warm-up + {len(m.records)} measured optimizer steps)"]
        + notes + warnings,
        saved_tensors=SAVED_SCHEMA if saved else None,
        timing=timing,
        peak_memory=list(m.peak_memory),
        stack=m.stack,
        measurement=MeasurementInfo(clock=m.clock, aggregate=INTERQUARTILE_MEAN, threads=torch.get_num_threads(),
                                    run_queue_s=statistics.fmean(m.run_queue_s) if m.run_queue_s else None,
                                    hooked_step_s=None if hook_cost is None else hook_cost[0],
                                    hook_overhead_s=None if hook_cost is None else hook_cost[1],
                                    unhooked_steps=done if hook_cost is not None else None),
        **sharding,
    )


def _saved_bytes(m: Measurement, layers: list[LayerProfile], precision: str, notes: list[str]) -> bool:
    """Count what autograd saves per layer on the captured batch (srift/profiling/saved.py): True
    when counted (a note says why not, otherwise; memory then falls back to the layer outputs)."""
    step = _analysis_step(m.model, m.timer)
    if step is None:
        return False
    try:
        with torch.enable_grad():
            record_saved_bytes(m.model, step, layers, precision in HALF_PRECISIONS)
    except Exception as exc:  # keep the profile; memory falls back to layer outputs
        notes.append(f"counting saved tensors failed ({type(exc).__name__}: {exc}); memory uses layer outputs")
        return False
    return True
def _typical_iterations(m: Measurement, notes: list[str]) -> tuple[Measurement, int]:
    """The measurement without iterations of an unusual number of forward passes, and that number.
    A GradScaler skips ``optimizer.step()`` on an overflow, so no step hook fires and two forward/
    backward passes land in one "iteration": those records are dropped, not averaged in."""
    counts = Counter(r.micro_batches for r in m.records)
    micro = max(counts, key=lambda k: (counts[k], -k))  # the commonest; the smaller on a tie
    kept = [r for r in m.records if r.micro_batches == micro]
    if len(kept) < len(m.records):
        notes.append(f"{len(m.records) - len(kept)} measured iteration(s) with another number of forward passes than "
                     f"the usual {micro} (an optimizer step skipped, e.g. a GradScaler overflow) were left out")
    return dataclasses.replace(m, records=kept), max(micro, 1)


def _fsdp_fields(fm: fsdp_profile.FsdpMeasurement, layers: list[LayerProfile], precision: str,
                 records: list[IterationTimes], notes: list[str]) -> tuple[list[LayerProfile], str, dict[str, Any]]:
    """An FSDP job's layers (units, unsharded parameters, clean names), precision and profile fields."""
    setup = fm.setup
    layers = fsdp_profile.apply_to_layers(layers, fm)
    ckpt, ckpt_note = fsdp_profile.checkpointing(layers, fm.recomputed)
    notes.append(f"{setup.api} ({setup.strategy}) detected: {setup.describe()['units']} units besides the root, "
                 f"parallelism {setup.parallelism}, activation checkpointing {ckpt}")
    notes += setup.notes + ([ckpt_note] if ckpt_note else [])
    if ckpt != NO_CHECKPOINTING:
        rec_s = sum(r.recompute_s for r in records) / len(records)
        notes.append(f"recomputation measured: {rec_s:.6f} s per iteration (not in the layers' forward or backward times)")
    mp_precision = fsdp_profile.profile_precision(setup)
    if mp_precision is not None and precision in (FP32, TF32):
        notes.append(f"FSDP MixedPrecision param_dtype {setup.param_dtype}: precision {mp_precision}")
        precision = mp_precision
    return layers, precision, {"parallelism": setup.parallelism, "activation_checkpointing": ckpt,
                               "fsdp": setup.describe(), "collectives": fm.collectives}


def _merge_timings(layers: list[LayerProfile], m: Measurement, micro: int) -> None:
    """Each layer's mean and spread of forward and backward seconds, matched by module name; with
    ``micro`` micro-batches per step, the one analysed micro-batch's FLOPs and bytes times ``micro``."""
    by_name = {n: i for i, (n, _) in enumerate(m.timer.leaves)}
    steady = steady_steps(m.records)
    for layer in layers:
        i = by_name.get(layer.name)
        # A leaf whose hooks never ran in a measured step (compiled, used under no_grad only, skipped
        # by control flow) has no time: None, not a measured 0 s.
        if i is not None and any(i in r.layer_fwd_s for r in m.records):
            layer.fwd_s, layer.fwd_s_std = _mean_std([r.layer_fwd_s.get(i, 0.0) for r in m.records], steady)
            layer.bwd_s, layer.bwd_s_std = _mean_std([r.layer_bwd_s.get(i, 0.0) for r in m.records], steady)
        if i is None:
            continue
        if micro > 1:
            layer.fwd_flops *= micro
            layer.bwd_flops *= micro
            layer.fwd_flops_seq2 *= micro
            layer.bwd_flops_seq2 *= micro
            layer.fwd_bytes *= micro
            layer.bwd_bytes *= micro


# The most of a layer's measured time that srift's hooks' cost may take (subtract_hook_cost).
MAX_HOOK_SHARE = 0.5


def hook_cost_s(unhooked_s: list[float], paired_s: list[float]) -> float:
    """What srift's per-leaf hooks cost a step: the interquartile mean of the differences within
    srift's pairs (a step with the leaf hooks less the step without them just before it); noise
    can make it negative (``subtract_hook_cost`` then takes nothing out). Pairs of adjacent steps
    see the same machine: a slower or faster stretch of the run (other work, the host's clock
    speed) moves both steps of a pair, not their difference."""
    return interquartile_mean([h - u for u, h in zip(unhooked_s, paired_s)])


def subtract_hook_cost(layers: list[LayerProfile], phases: PhaseTimes, records: list[IterationTimes],
                       cost_s: float, leaves: list[tuple[str, torch.nn.Module]]) -> float:
    """Take ``cost_s`` per step (``hook_cost_s``) out of the measured times, so that the profile
    describes the script's own step (docs/profiling.md).

    The cost is paid per hook call, whatever the batch, so each timed interval (a leaf's forward
    call, or its backward stretch, per step on the steady steps) carries an equal share, taken out
    of that layer, but never more than ``MAX_HOOK_SHARE`` of the layer's measured time: an interval
    holds only part of its hooks' code (the pre-hook after its mark, the post-hook before its own;
    the rest runs between leaves), and a measured layer must stay measured (0 s reads as never
    timed). What the layers cannot give up comes out of the time between them in their passes
    (forward or backward, split by their intervals), never below the layers' sum. ``forward_s`` and
    ``backward_s`` lose what was taken in them and ``total_s`` the same, so the layers still add up
    within their phase and the phases within the step.

    Returns:
        The seconds taken out of the step: ``cost_s``, less what the passes could not give up; 0
        when it is not positive or no layer was timed.
    """
    steady = steady_steps(records)
    by_name = {n: i for i, (n, _) in enumerate(leaves)}

    def calls(key: str, i: int) -> float:
        return statistics.fmean(getattr(records[k], key).get(i, 0) for k in steady) if steady else 0.0

    counts = {}
    for layer in layers:
        i = by_name.get(layer.name)
        if i is not None and layer.fwd_s is not None:
            counts[layer.name] = (calls("layer_fwd_calls", i), calls("layer_bwd_calls", i))
    intervals = sum(f + b for f, b in counts.values())
    if cost_s <= 0.0 or intervals <= 0:
        return 0.0
    share = cost_s / intervals
    fwd_out = bwd_out = 0.0
    for layer in layers:
        if layer.name not in counts:
            continue
        f_calls, b_calls = counts[layer.name]
        cut_f = min(share * f_calls, MAX_HOOK_SHARE * (layer.fwd_s or 0.0))
        cut_b = min(share * b_calls, MAX_HOOK_SHARE * (layer.bwd_s or 0.0))
        layer.fwd_s = (layer.fwd_s or 0.0) - cut_f
        layer.bwd_s = None if layer.bwd_s is None else layer.bwd_s - cut_b
        fwd_out, bwd_out = fwd_out + cut_f, bwd_out + cut_b
    rest = cost_s - fwd_out - bwd_out  # paid between the leaves, in their passes
    f_all = sum(f for f, _ in counts.values())
    taken = 0.0
    for phase, out, part, kept in (("forward_s", fwd_out, f_all / intervals, sum(l.fwd_s or 0.0 for l in layers)),
                                   ("backward_s", bwd_out, 1.0 - f_all / intervals, sum(l.bwd_s or 0.0 for l in layers))):
        before = getattr(phases, phase)
        if before is None:
            continue
        after = max(before - out - rest * part, min(kept, before - out), 0.0)
        setattr(phases, phase, after)
        taken += before - after
    phases.total_s = max((phases.total_s or 0.0) - taken, 0.0)
    return taken


def _input_shape(timer: LayerTimer) -> tuple[int, int | None]:
    """(micro-batch, sequence length) of the model's first input, read against the model's own
    ``batch_first`` flags (srift/profiling/layout.py)."""
    shape = timer.layout.input_shape(timer.first_input)
    return shape.micro_batch, shape.seq_len


# torch 2.9's ``fp32_precision`` words (its vocabulary, not srift's precisions).
_FP32_PRECISION_TF32, _FP32_PRECISION_INHERIT = "tf32", "none"


def tf32_flags() -> dict[str, str]:
    """PyTorch's TF32 switches as the script left them (recorded in the profile's ``framework``):
    cuDNN's (convolutions; on by default) and cuBLAS's (matmuls; off by default since 1.12). torch
    2.9 added ``fp32_precision`` settings (``"tf32"``/``"ieee"``, ``"none"``: inherit the parent's);
    once a script uses them, reading the legacy flags raises, so the new ones are read first and the
    legacy ones only where they can be read."""
    out: dict[str, str] = {}
    conv, matmul = _fp32_precision("cudnn", "conv"), _fp32_precision("cuda", "matmul")
    if conv is not None and matmul is not None:
        out["cudnn.conv.fp32_precision"], out["cuda.matmul.fp32_precision"] = conv, matmul
    for key, read in (("cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
                      ("cuda.matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
                      ("float32_matmul_precision", torch.get_float32_matmul_precision)):
        try:
            value = read()
        except RuntimeError:  # the legacy API after the new one was used
            continue
        out[key] = str(bool(value)) if key.endswith("allow_tf32") else str(value)
    return out


def _fp32_precision(backend: str, op: str) -> str | None:
    """The effective ``fp32_precision`` of ``torch.backends.<backend>.<op>`` (``"none"`` resolved
    through its backend, then the global setting); None before torch 2.9."""
    back = getattr(torch.backends, backend, None)
    node = getattr(back, op, None)
    for level in (node, back, torch.backends):
        try:
            value = getattr(level, "fp32_precision", None)
        except RuntimeError:  # not readable after the legacy API was used
            return None
        if value is None:
            return None
        if value != _FP32_PRECISION_INHERIT:
            return str(value)
    return "ieee"


def tf32_enabled() -> tuple[bool, bool]:
    """(convolutions, matmuls) in TF32 as the script set them, through either API."""
    flags = tf32_flags()
    conv = flags.get("cudnn.conv.fp32_precision")
    matmul = flags.get("cuda.matmul.fp32_precision")
    if conv is not None and matmul is not None and "cudnn.allow_tf32" not in flags:
        return conv == _FP32_PRECISION_TF32, matmul == _FP32_PRECISION_TF32
    return flags.get("cudnn.allow_tf32") == "True", flags.get("cuda.matmul.allow_tf32") == "True"


def _precision(m: Measurement, notes: list[str]) -> str:
    """What ran: ``bf16`` under bfloat16 autocast or with bfloat16 weights, ``amp`` under float16
    autocast or with float16 weights; else on CUDA the label of PyTorch's two TF32 switches
    (``srift.perf.compute.precision_label``: both -> ``tf32``, convolutions only, the default ->
    ``fp32``, neither -> ``fp32-strict``); ``fp32`` on a CPU."""
    if m.timer.autocast is not None:
        dtype = m.timer.autocast[1]
        notes.append(f"autocast {m.timer.autocast[0]} {str(dtype).replace('torch.', '')} detected")
        return "bf16" if dtype == torch.bfloat16 else "amp"
    half = _weight_dtype(m.model)
    if half is not None:
        notes.append(f"the model's weights are {str(half).replace('torch.', '')} (no autocast)")
        return "bf16" if half == torch.bfloat16 else "amp"
    if m.clock_kind != "cuda":
        return "fp32"
    cudnn, matmul = tf32_enabled()
    if matmul and not cudnn:
        notes.append("TF32 allowed for matmuls but not for convolutions: recorded as tf32 (srift has no name for it)")
    return precision_label(cudnn, matmul)


def _weight_dtype(model: torch.nn.Module) -> torch.dtype | None:
    """bfloat16 or float16 when most of the model's floating parameters are in it, else None."""
    count: dict[torch.dtype, int] = {}
    for p in model.parameters():
        if p.is_floating_point():
            count[p.dtype] = count.get(p.dtype, 0) + p.numel()
    if not count:
        return None
    top = max(count, key=lambda d: count[d])
    return top if top in (torch.bfloat16, torch.float16) else None


def _mean_std(values: list[float], steady: list[int]) -> tuple[float, float]:
    """The mean over the steady steps (``steady_steps``' indices into ``values``) and the sample
    standard deviation over every step."""
    if not values:
        return 0.0, 0.0
    return (statistics.fmean(values[k] for k in steady),
            statistics.stdev(values) if len(values) > 1 else 0.0)


def _phases(records: list[IterationTimes]) -> PhaseTimes:
    steady = steady_steps(records)
    total, total_std = _mean_std([r.total_s for r in records], steady)
    return PhaseTimes(
        data_s=_mean_std([r.data_s for r in records], steady)[0],
        zero_grad_s=_mean_std([r.zero_grad_s for r in records], steady)[0],
        host_s=_mean_std([r.host_s for r in records], steady)[0],
        forward_s=_mean_std([r.forward_s for r in records], steady)[0],
        backward_s=_mean_std([r.backward_s for r in records], steady)[0],
        optimizer_s=_mean_std([r.optimizer_s for r in records], steady)[0],
        total_s=total,
        total_s_std=total_std,
    )


def _analysis_step(model: torch.nn.Module, timer: LayerTimer,
                   capture: tuple[tuple[Any, ...], dict[str, Any]] | None = None) -> Callable[[], Any] | None:
    """One forward pass of the model on the batch captured in warm-up (or ``capture``), returning a
    scalar to backpropagate, under the script's autocast; None when no batch was captured."""
    capture = capture or timer.capture
    if capture is None:
        return None
    args, kwargs = capture

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
    says so when it cannot run; the layers then carry names and parameters only). Out of GPU
    memory (a job sized to the limit, the script's tensors still alive): again on one sample of
    the batch, FLOPs and bytes scaled to the batch as ``Profile.rescale`` scales them."""
    step = _analysis_step(model, timer)
    if step is None:
        notes.append("no training forward pass was captured; FLOPs and bytes are missing")
        return leaf_layers(timer)
    _free_gradients(model)
    try:
        with torch.enable_grad():
            return analyze_layers(model, step)
    except torch.OutOfMemoryError:
        _free_gradients(model)
        one = _one_sample(model, timer)
        if one is not None:
            try:
                with torch.enable_grad():
                    layers = analyze_layers(model, one[0])
                notes.append(f"the analysed step ran out of memory at micro-batch {one[1]}: analysed on one "
                             "sample, FLOPs and bytes scaled to the batch")
                return Profile("analysis", 1, "fp32", layers).rescale(batch_size=one[1]).layers
            except Exception as exc:  # keep the timings
                notes.append(f"structural analysis failed ({type(exc).__name__}: {exc}); FLOPs and bytes are missing")
                return leaf_layers(timer)
        notes.append("structural analysis ran out of memory; FLOPs and bytes are missing")
    except Exception as exc:  # a model FlopCounterMode cannot trace: keep the timings
        notes.append(f"structural analysis failed ({type(exc).__name__}: {exc}); FLOPs and bytes are missing")
    return leaf_layers(timer)


def _free_gradients(model: torch.nn.Module) -> None:
    """Drop the last step's gradients (the script is over) and, on CUDA, the allocator's cache, so
    the analysed step has the memory the script had."""
    for p in model.parameters():
        p.grad = None
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _one_sample(model: torch.nn.Module, timer: LayerTimer) -> tuple[Callable[[], Any], int] | None:
    """The analysed step on the first sample of the captured batch, and the micro-batch it came
    from (None when the batch has one sample or no batch dimension)."""
    return _first_rows(model, timer, lambda batch: 1)


def _first_rows(model: torch.nn.Module, timer: LayerTimer,
                rows: Callable[[int], int]) -> tuple[Callable[[], Any], int] | None:
    """The analysed step on the first ``rows(batch)`` samples of the captured batch, and the
    micro-batch it came from (None when the batch has one sample or no batch dimension)."""
    shape = timer.layout.input_shape(timer.first_input)
    if timer.capture is None or timer.first_input is None or shape.micro_batch < 2:
        return None
    batch, dim = shape.micro_batch, shape.batch_dim
    args, kwargs = timer.capture
    cut = (sub_batch(args, batch, rows(batch), dim), sub_batch(kwargs, batch, rows(batch), dim))
    step = _analysis_step(model, timer, cut)
    return (step, batch) if step is not None else None


def _time_half_batch(m: Measurement, phases: PhaseTimes, notes: list[str]) -> None:
    """Time the analysed step at the micro-batch and at half of it into ``phases`` (M6: how
    measured times scale to other batch sizes); a note says why not when it cannot."""
    full = _first_rows(m.model, m.timer, lambda batch: 2 * (batch // 2))  # an odd batch: its first even rows
    half = _first_rows(m.model, m.timer, lambda batch: batch // 2)
    if full is None or half is None:
        notes.append("the micro-batch could not be halved (one sample, or no batch dimension): measured times "
                     "scale with FLOPs to other batch sizes")
        return
    _free_gradients(m.model)
    try:
        phases.analysed_s, phases.analysed_half_s = time_full_and_half(
            m.model, full[0], half[0], m.device, now=WallClock().mark if m.device.type == "cpu" else time.perf_counter)
    except Exception as exc:  # keep the profile; rescaling falls back to FLOP-proportional times
        _free_gradients(m.model)
        notes.append(f"timing the analysed step at half the micro-batch failed ({type(exc).__name__}: {exc}); "
                     "measured times scale with FLOPs to other batch sizes")


def leaf_layers(timer: LayerTimer) -> list[LayerProfile]:
    """The timed leaves with their names and parameters only (no FLOPs or bytes)."""
    layers = []
    for name, mod in timer.leaves:
        ps = [p for p in mod.parameters(recurse=False) if p.requires_grad]
        frozen = [p for p in mod.parameters(recurse=False) if not p.requires_grad]
        layers.append(LayerProfile(name=name, type=type(mod).__name__, params=sum(p.numel() for p in ps),
                                   param_tensors=len(ps), grad_bytes=sum(p.numel() * p.element_size() for p in ps),
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


def _device(kind: str, device: torch.device | None = None) -> DeviceInfo:
    if kind == "cuda":
        dev_name = torch.cuda.get_device_name(device)
        return DeviceInfo(dev_name, "cuda", find_gpu(dev_name))
    return DeviceInfo(platform.processor() or platform.machine() or "cpu", "cpu")


def _versions() -> dict[str, str]:
    out = {"torch": str(torch.__version__), "python": platform.python_version(), "srift": srift.__version__, **tf32_flags()}
    for mod in ("transformers", "torchvision", "timm"):
        if mod in sys.modules:
            out[mod] = str(getattr(sys.modules[mod], "__version__", "unknown"))
    return out


def _optimizer_info(optimizers: list[torch.optim.Optimizer], model: torch.nn.Module) -> OptimizerInfo:
    """Optimizer type(s) and the measured state bytes per trainable parameter, over every optimizer
    of the script that updates the model's parameters (M10: Muon + AdamW, one per parameter group)."""
    mine = {id(p) for p in model.parameters()}
    used = [o for o in optimizers if any(id(p) in mine for g in o.param_groups for p in g["params"])] or optimizers[:1]
    n_params = sum(p.numel() for o in used for g in o.param_groups for p in g["params"]) or 1
    state_bytes = 0
    for opt in used:
        for st in opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor) and v.dim() > 0:  # skip scalar step counters
                    state_bytes += v.numel() * v.element_size()
    return OptimizerInfo("+".join(type(o).__name__ for o in used), round(state_bytes / n_params, 3))
