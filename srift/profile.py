"""Profile: what srift knows about one training job (its records: srift/profile_records.py; its
file format: srift/profile_format.py; rescaling: srift/profile_rescale.py).

A profile is written by ``srift profile`` (measured, from a user's script) or made from a zoo model
(structural: FLOPs, bytes, parameters, order; no timings). Every prediction starts from one.
The file format is ``schema: srift.profile/v1`` (see docs/profile-schema.md).

FLOPs and bytes are per iteration at the profile's ``batch_size`` (per GPU) and ``seq_len``.
``rescale`` changes both: every term scales linearly with the batch, ``*_seq2`` terms scale with
the square of the sequence length (attention scores), the rest linearly with it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srift import profile_format as fmt
from srift.bounds import MAX_GPUS, MAX_ITERS, MAX_PROFILE_BYTES, MAX_SAMPLE_BYTES
from srift.errors import SriftError
from srift.files import read_yaml, write_yaml
from srift.job import Checkpointing, Parallelism
from srift.profile_format import MIN_MEASURED_S, SCHEMA
from srift.profile_ratio import check_backward_ratio
from srift.profile_records import (
    AGGREGATES, CAUSAL_FRACTION, CLOCKS, COLLECTIVE_KINDS, COLLECTIVE_PHASES, CUDA_EVENTS, INTERQUARTILE_MEAN,
    KFAC_TIME_FIELDS, MAX_THREADS, MEAN, MEASUREMENT_METHOD, MEASUREMENT_METHODS, SAVED_SCHEMAS, TIMING_MODES, WALL,
    WALL_LESS_RUN_QUEUE, Aggregate, AllReduceBucket, Clock, DeviceInfo, LayerProfile, MeasurementInfo, MeasurementMethod,
    OptimizerInfo, PhaseTimes, RankMemory, UnitCollective,
)
from srift.profile_rescale import Scaling, batch_fixed_fraction, rescaled_layer, rescaled_phases
from srift.stacks import DetectedStack

# The records a profile is made of live in srift/profile_records.py, the file format in
# srift/profile_format.py; their names stay importable from here.
__all__ = [
    "AGGREGATES", "CAUSAL_FRACTION", "CLOCKS", "COLLECTIVE_KINDS", "COLLECTIVE_PHASES", "CUDA_EVENTS", "INTERQUARTILE_MEAN",
    "KFAC_TIME_FIELDS", "MAX_THREADS", "MEAN", "MEASUREMENT_METHOD", "MEASUREMENT_METHODS", "MIN_MEASURED_S",
    "SAVED_SCHEMAS", "SCHEMA", "TIMING_MODES", "WALL", "WALL_LESS_RUN_QUEUE", "Aggregate", "AllReduceBucket", "Clock",
    "DeviceInfo", "LayerProfile", "MeasurementInfo", "MeasurementMethod", "OptimizerInfo", "PhaseTimes", "Profile",
    "RankMemory", "UnitCollective",
]


@dataclass
class Profile:
    """A training job's profile (see module docstring).

    Attributes:
        name: Model or job name.
        batch_size: Per-GPU (per-process) batch size the numbers refer to.
        precision: ``fp32``, ``tf32`` or ``amp``.
        layers: Leaf modules in execution order.
        seq_len: Sequence length for sequence models, else None.
        device: Where it was measured.
        framework: Versions (``torch``, ``python``, ``srift``...).
        optimizer: The optimizer and the state it keeps per parameter.
        phases: Measured phase totals per iteration.
        iterations: Number of measured iterations (0 for a structural profile).
        world_size: Processes in the measured run (1 unless run under torchrun).
        allreduce: Measured DDP buckets (distributed runs only).
        input_bytes_per_sample: Bytes of one input sample (for data-loading estimates).
        notes: Free-form remarks the profiler recorded (warnings, what was detected).
        parallelism: How the profiled script spread the model (one of PARALLELISMS: ``fsdp``,
            ``zero2``, ``hsdp`` for an FSDP script); None when not known (DDP and single-process
            scripts, structural profiles). The predictor takes it as the job's default.
        activation_checkpointing: What the profiled script recomputed (one of CHECKPOINTING), when
            known; the predictor's default checkpointing.
        fsdp: How FSDP was set up, as detected (``api``, ``sharding_strategy``, ``param_dtype``,
            ``reduce_dtype``...): a record for readers; empty for other jobs.
        collectives: Measured FSDP collectives per unit (distributed or not; see UnitCollective).
        saved_tensors: The method (a schema name, ``srift.saved-tensors/v1``) the layers'
            ``saved_bytes`` were counted with; None when they were not.
        timing: How ``srift profile`` timed the run (one of TIMING_MODES): ``layers`` (per leaf) or
            ``step`` (whole steps: a compiled model, whose leaves are left untimed); None when not
            measured.
        peak_memory: Measured peak CUDA memory per rank (see RankMemory); empty off CUDA.
        measurement: How the times were taken and aggregated (MeasurementInfo); None when not
            measured or measured before srift recorded it (``srift.measurement/v1``).
        stack: The training stack ``srift profile`` saw in the script (srift/stacks.py
            ``DetectedStack``: name, version, evidence); None when not profiled or none seen.
            Predictions from the profile are priced under it unless ``--stack`` says otherwise.
    """

    name: str
    batch_size: int
    precision: str
    layers: list[LayerProfile]
    seq_len: int | None = None
    device: DeviceInfo = field(default_factory=DeviceInfo)
    framework: dict[str, str] = field(default_factory=dict)
    optimizer: OptimizerInfo = field(default_factory=OptimizerInfo)
    phases: PhaseTimes = field(default_factory=PhaseTimes)
    iterations: int = 0
    world_size: int = 1
    allreduce: list[AllReduceBucket] = field(default_factory=list)
    input_bytes_per_sample: float = 0.0
    notes: list[str] = field(default_factory=list)
    parallelism: Parallelism | None = None
    activation_checkpointing: Checkpointing | None = None
    fsdp: dict[str, str] = field(default_factory=dict)
    collectives: list[UnitCollective] = field(default_factory=list)
    saved_tensors: str | None = None
    timing: str | None = None
    peak_memory: list[RankMemory] = field(default_factory=list)
    measurement: MeasurementInfo | None = None
    stack: DetectedStack | None = None

    # ---- derived totals -------------------------------------------------------------------
    @property
    def batch_fixed_fraction(self) -> float:
        """Share of a measured time that does not grow with the batch (per-call costs: launches,
        dispatch, weight reads), from ``phases.analysed_s`` and ``analysed_half_s`` under
        ``t(b) = a + c * b``: ``2 * t(B/2) / t(B) - 1``, clipped to [0, 1]; 0 (time proportional
        to the work) when they were not measured."""
        return batch_fixed_fraction(self.phases)

    @property
    def measured(self) -> bool:
        """True when the layers carry measured forward/backward times, or the whole step was timed."""
        return any(layer.fwd_s is not None for layer in self.layers) or (self.timing == "step" and bool(self.phases.total_s))

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def grad_bytes(self) -> int:
        return sum(layer.grad_bytes for layer in self.layers)

    @property
    def fwd_flops(self) -> float:
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def bwd_flops(self) -> float:
        return sum(layer.bwd_flops for layer in self.layers)

    @property
    def activation_bytes(self) -> float:
        return sum(layer.activation_bytes for layer in self.layers)

    def gradient_order(self) -> list[LayerProfile]:
        """Layers with gradients in the order their gradients become ready during backward.

        Uses the recorded ``grad_ready_order`` where present; otherwise reverse execution order
        (what DDP assumes).
        """
        with_grads = [layer for layer in self.layers if layer.grad_bytes > 0]
        if with_grads and all(layer.grad_ready_order is not None for layer in with_grads):
            return sorted(with_grads, key=lambda layer: layer.grad_ready_order)  # type: ignore[arg-type,return-value]
        return list(reversed(with_grads))

    # ---- rescaling ------------------------------------------------------------------------
    def rescale(self, batch_size: int | None = None, seq_len: int | None = None) -> "Profile":
        """Return a copy for another per-GPU batch size and/or sequence length.

        FLOPs, bytes and activations scale linearly with the batch; with the sequence length
        linearly, except the ``*_seq2`` parts, which scale with its square, and the weights' share
        of the bytes (read once in forward, read and gradient-written in backward: ``grad_bytes``
        and twice that), which does not scale. A measured time keeps its fixed share
        (``batch_fixed_fraction``: per-call costs) and scales the rest like the layer's FLOPs:
        ``t' = t * (f + (1 - f) * FLOP ratio)``; the optimizer and collectives do not scale.

        Raises:
            SriftError: for a non-positive size, or a seq_len on a profile without one.
        """
        b_new = self.batch_size if batch_size is None else int(batch_size)
        if b_new <= 0:
            raise SriftError(f"batch size must be positive, got {batch_size}.", "pass --batch-size 1 or more.")
        s_old = self.seq_len
        s_new = s_old if seq_len is None else int(seq_len)
        if seq_len is not None:
            if s_old is None:
                raise SriftError(
                    f"profile '{self.name}' has no sequence length, so --seq-len {seq_len} cannot apply.",
                    "drop --seq-len for this model.",
                )
            if seq_len <= 0:
                raise SriftError(f"sequence length must be positive, got {seq_len}.", "pass --seq-len 1 or more.")
        if b_new == self.batch_size and s_new == s_old:
            return self
        rb = b_new / self.batch_size
        rs = (s_new / s_old) if (s_old and s_new) else 1.0
        sc = Scaling(rb, rs, s_old, s_new, self.batch_fixed_fraction)
        layers = [rescaled_layer(layer, sc) for layer in self.layers]
        ratio_flops = (sum(l.fwd_flops + l.bwd_flops for l in layers) / max(self.fwd_flops + self.bwd_flops, 1e-30))
        return dataclasses.replace(
            self,
            batch_size=b_new,
            seq_len=s_new,
            layers=layers,
            phases=rescaled_phases(self.phases, self.layers, layers, sc, ratio_flops),
            input_bytes_per_sample=self.input_bytes_per_sample * rs,
            notes=self.notes + [f"rescaled from batch {self.batch_size}, seq_len {s_old}"],
        )

    # ---- serialization --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict in file order (``schema`` first), ready for YAML or JSON."""
        return {
            "schema": SCHEMA,
            "name": self.name,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "precision": self.precision,
            "device": self.device.to_dict(),
            "framework": dict(self.framework),
            "optimizer": self.optimizer.to_dict(),
            "iterations": self.iterations,
            "world_size": self.world_size,
            "input_bytes_per_sample": self.input_bytes_per_sample,
            "totals": {
                "params": self.params,
                "grad_bytes": self.grad_bytes,
                "fwd_flops": self.fwd_flops,
                "bwd_flops": self.bwd_flops,
                "flops_unit": "FLOP (2 per multiply-add, torch FlopCounterMode)",
            },
            "phases": dataclasses.asdict(self.phases),
            "allreduce": [dataclasses.asdict(b) for b in self.allreduce],
            **self._sharding_dict(),
            **self._measured_dict(),
            "notes": list(self.notes),
            "layers": [fmt.layer_to_dict(layer) for layer in self.layers],
        }

    def _sharding_dict(self) -> dict[str, Any]:
        """The FSDP fields, only when set (profiles of other jobs stay as they were)."""
        out: dict[str, Any] = {}
        if self.parallelism is not None:
            out["parallelism"] = self.parallelism
        if self.activation_checkpointing is not None:
            out["activation_checkpointing"] = self.activation_checkpointing
        if self.fsdp:
            out["fsdp"] = dict(self.fsdp)
        if self.collectives:
            out["collectives"] = [dataclasses.asdict(c) for c in self.collectives]
        if self.saved_tensors is not None:
            out["saved_tensors"] = self.saved_tensors
        return out

    def _measured_dict(self) -> dict[str, Any]:
        """How the run was timed and its peak memory, only when measured (structural profiles stay as
        they were; readers that predate these fields ignore them)."""
        out: dict[str, Any] = {}
        if self.timing is not None:
            out["timing"] = self.timing
        if self.peak_memory:
            out["peak_memory"] = [dataclasses.asdict(m) for m in self.peak_memory]
        if self.measurement is not None:
            out["measurement"] = dataclasses.asdict(self.measurement)
        if self.stack is not None:
            out["stack"] = self.stack.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "profile") -> "Profile":
        """Build and validate a Profile from a parsed YAML/JSON document.

        Every number is checked against what srift models (srift/bounds.py): finite, not
        negative, and within its bound, so that nothing a prediction derives from it can
        overflow or come out negative.

        Raises:
            SriftError: naming the first field that is missing or wrong.
        """
        doc = fmt.check_document(data, source)
        head = fmt.header(doc, source)
        layers = fmt.layers_from(doc["layers"], source)
        phases = fmt.phases_from(doc.get("phases"), source)
        buckets = fmt.buckets_from(doc.get("allreduce"), source)
        parallelism = fmt.parallelism_from(doc.get("parallelism"), source)
        checkpointing = fmt.checkpointing_from(doc.get("activation_checkpointing"), source)
        fsdp = fmt.text_map(doc.get("fsdp"), "fsdp", source)
        collectives = fmt.collectives_from(doc.get("collectives"), source)
        timing = fmt.timing_from(doc.get("timing"), source)
        peak_memory = fmt.peak_memory_from(doc.get("peak_memory"), source)
        measurement = fmt.measurement_from(doc.get("measurement"), source)
        device = fmt.device_from(doc.get("device"), source)
        optimizer = fmt.optimizer_from(doc.get("optimizer"), source)
        notes = fmt.notes_from(doc.get("notes"), source)
        profile = cls(
            name=head.name,
            batch_size=head.batch_size,
            precision=head.precision,
            layers=layers,
            seq_len=head.seq_len,
            device=device,
            framework=fmt.text_map(doc.get("framework"), "framework", source),
            optimizer=optimizer,
            phases=phases,
            iterations=fmt.integer(doc.get("iterations") or 0, "iterations", source, MAX_ITERS),
            world_size=fmt.integer(doc.get("world_size") or 1, "world_size", source, MAX_GPUS, low=1),
            allreduce=buckets,
            input_bytes_per_sample=fmt.number(doc.get("input_bytes_per_sample") or 0.0, "input_bytes_per_sample", source,
                                              MAX_SAMPLE_BYTES),
            notes=notes,
            parallelism=parallelism,
            activation_checkpointing=checkpointing,
            fsdp=fsdp,
            collectives=collectives,
            saved_tensors=fmt.saved_schema(doc.get("saved_tensors"), source),
            timing=timing,
            peak_memory=peak_memory,
            measurement=measurement,
            stack=None if doc.get("stack") is None else DetectedStack.from_dict(doc["stack"], source),
        )
        fmt.check_work(profile.measured, layers, phases, source)
        check_backward_ratio(layers, source)
        return profile

    def save(self, path: str | Path, overwrite: bool = True) -> Path:
        """Write the profile as YAML, atomically (``overwrite=False``: FileExistsError, and nothing
        written, when the file exists)."""
        return write_yaml(path, self.to_dict(), overwrite)

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """Read and validate a profile file (YAML or JSON)."""
        return cls.from_dict(read_yaml(path, "profile", MAX_PROFILE_BYTES), source=str(path))

