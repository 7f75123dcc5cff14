"""Profile and LayerProfile: what srift knows about one training job, and its YAML format.

A profile is written by ``srift profile`` (measured, from a user's script) or made from a zoo model
(structural: FLOPs, bytes, parameters, order; no timings). Every prediction starts from one.
The file format is ``schema: srift.profile/v1`` (see docs/profile-schema.md).

FLOPs and bytes are per iteration at the profile's ``batch_size`` (per GPU) and ``seq_len``.
``rescale`` changes both: every term scales linearly with the batch, ``*_seq2`` terms scale with
the square of the sequence length (attention scores), the rest linearly with it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srift.errors import SriftError
from srift.files import read_yaml, write_yaml
from srift.job import PRECISIONS

SCHEMA = "srift.profile/v1"


@dataclass
class LayerProfile:
    """One leaf module, in execution (forward) order.

    Attributes:
        name: Qualified module name (``layer1.0.conv1``).
        type: Module class name (``Conv2d``, ``Linear``, ``LayerNorm``...).
        params: Trainable parameter count.
        grad_bytes: Bytes of the gradients this layer produces (what DDP all-reduces).
        fwd_flops: Forward FLOPs per iteration (FlopCounterMode's count: 2 per multiply-add).
        bwd_flops: Backward FLOPs per iteration.
        fwd_bytes: Bytes the forward pass moves through memory (inputs + outputs + weights).
        bwd_bytes: Bytes the backward pass moves.
        activation_bytes: Bytes of the output activation kept for backward.
        fwd_flops_seq2: Part of ``fwd_flops`` that grows with seq_len squared (attention).
        bwd_flops_seq2: Part of ``bwd_flops`` that grows with seq_len squared.
        activation_bytes_seq2: Part of ``activation_bytes`` that grows with seq_len squared.
        fwd_s: Measured mean forward seconds (None in a structural profile).
        fwd_s_std: Standard deviation of the forward seconds over measured iterations.
        bwd_s: Measured mean backward seconds.
        bwd_s_std: Standard deviation of the backward seconds.
        grad_ready_order: Position in which this layer's gradients became ready in backward
            (0 = first ready); None for layers without trainable parameters.
        kfac_a_dim: K-FAC factor A dimension (d_in [+1 for bias]) for Linear/Conv2d, else None;
            of one group for a grouped Conv2d (``C_in/groups * k_h * k_w`` [+1]).
        kfac_g_dim: K-FAC factor G dimension (d_out; ``C_out/groups`` for a grouped Conv2d,
            which has ``groups`` K-FAC blocks) for Linear/Conv2d, else None.
        kfac_spatial: Rows per sample in the factor computation (H_out*W_out for Conv2d, tokens
            for a Linear applied to a sequence, 1 otherwise).
        kfac_factor_a_s: Measured seconds to compute factor A at this batch (``srift profile
            --kfac``; None otherwise). ``kfac_factor_g_s`` likewise for factor G.
        kfac_inverse_a_s: Measured seconds of the damped Cholesky inverse of a factor of A's
            dimension; ``kfac_inverse_g_s`` likewise for G.
        kfac_precondition_s: Measured seconds of ``G^-1 grad A^-1`` for this layer.
        unit: The FSDP wrapping unit the layer belongs to (a transformer block's module name,
            ``model.layers.3``): its parameters are all-gathered and its gradients reduce-scattered
            together. None: the root unit (embeddings, final norm, head) or not known.
    """

    name: str
    type: str
    params: int = 0
    grad_bytes: int = 0
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    activation_bytes: float = 0.0
    fwd_flops_seq2: float = 0.0
    bwd_flops_seq2: float = 0.0
    activation_bytes_seq2: float = 0.0
    fwd_s: float | None = None
    fwd_s_std: float | None = None
    bwd_s: float | None = None
    bwd_s_std: float | None = None
    grad_ready_order: int | None = None
    kfac_a_dim: int | None = None
    kfac_g_dim: int | None = None
    kfac_spatial: int | None = None
    kfac_factor_a_s: float | None = None
    kfac_factor_g_s: float | None = None
    kfac_inverse_a_s: float | None = None
    kfac_inverse_g_s: float | None = None
    kfac_precondition_s: float | None = None
    unit: str | None = None


@dataclass
class PhaseTimes:
    """Measured mean seconds per iteration of each phase (None in a structural profile)."""

    data_s: float | None = None
    forward_s: float | None = None
    backward_s: float | None = None
    optimizer_s: float | None = None
    total_s: float | None = None
    total_s_std: float | None = None


@dataclass
class AllReduceBucket:
    """One DDP all-reduce bucket measured through a communication hook."""

    rank: int
    index: int
    size_bytes: int
    time_s: float


@dataclass
class Profile:
    """A training job's profile (see module docstring).

    Attributes:
        name: Model or job name.
        batch_size: Per-GPU (per-process) batch size the numbers refer to.
        precision: ``fp32``, ``tf32`` or ``amp``.
        layers: Leaf modules in execution order.
        seq_len: Sequence length for sequence models, else None.
        device: ``{"name": ..., "kind": "cuda"|"cpu"|"none", "gpu": key in gpus.yaml or None}``.
        framework: Versions (``torch``, ``python``, ``srift``...).
        optimizer: ``{"type": "SGD", "state_bytes_per_param": 4}`` (state kept per parameter).
        phases: Measured phase totals per iteration.
        iterations: Number of measured iterations (0 for a structural profile).
        world_size: Processes in the measured run (1 unless run under torchrun).
        allreduce: Measured DDP buckets (distributed runs only).
        input_bytes_per_sample: Bytes of one input sample (for data-loading estimates).
        notes: Free-form remarks the profiler recorded (warnings, what was detected).
    """

    name: str
    batch_size: int
    precision: str
    layers: list[LayerProfile]
    seq_len: int | None = None
    device: dict[str, Any] = field(default_factory=lambda: {"name": "none", "kind": "none", "gpu": None})
    framework: dict[str, str] = field(default_factory=dict)
    optimizer: dict[str, Any] = field(default_factory=lambda: {"type": "SGD", "state_bytes_per_param": 4})
    phases: PhaseTimes = field(default_factory=PhaseTimes)
    iterations: int = 0
    world_size: int = 1
    allreduce: list[AllReduceBucket] = field(default_factory=list)
    input_bytes_per_sample: float = 0.0
    notes: list[str] = field(default_factory=list)

    # ---- derived totals -------------------------------------------------------------------
    @property
    def measured(self) -> bool:
        """True when the layers carry measured forward/backward times."""
        return any(layer.fwd_s is not None for layer in self.layers)

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
        and twice that), which does not scale. Measured times scale like the layer's FLOPs (a
        first-order estimate; the compute model refines it).

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

        def scale(total: float, quad: float) -> float:
            return (total - quad) * rb * rs + quad * rb * rs * rs

        def scale_bytes(total: float, weights: float) -> float:
            fixed = min(total, weights)
            return (total - fixed) * rb * rs + fixed

        layers = []
        for layer in self.layers:
            fwd = scale(layer.fwd_flops, layer.fwd_flops_seq2)
            bwd = scale(layer.bwd_flops, layer.bwd_flops_seq2)
            fr = fwd / layer.fwd_flops if layer.fwd_flops else rb * rs
            br = bwd / layer.bwd_flops if layer.bwd_flops else rb * rs
            layers.append(
                dataclasses.replace(
                    layer,
                    fwd_flops=fwd,
                    bwd_flops=bwd,
                    fwd_flops_seq2=layer.fwd_flops_seq2 * rb * rs * rs,
                    bwd_flops_seq2=layer.bwd_flops_seq2 * rb * rs * rs,
                    fwd_bytes=scale_bytes(layer.fwd_bytes, layer.grad_bytes),
                    bwd_bytes=scale_bytes(layer.bwd_bytes, 2.0 * layer.grad_bytes),
                    activation_bytes=scale(layer.activation_bytes, layer.activation_bytes_seq2),
                    activation_bytes_seq2=layer.activation_bytes_seq2 * rb * rs * rs,
                    fwd_s=None if layer.fwd_s is None else layer.fwd_s * fr,
                    fwd_s_std=None if layer.fwd_s_std is None else layer.fwd_s_std * fr,
                    bwd_s=None if layer.bwd_s is None else layer.bwd_s * br,
                    bwd_s_std=None if layer.bwd_s_std is None else layer.bwd_s_std * br,
                    # Factor rows grow with the batch and the sequence; inverses and
                    # preconditioning depend on the factor dimensions only.
                    kfac_factor_a_s=None if layer.kfac_factor_a_s is None else layer.kfac_factor_a_s * rb * rs,
                    kfac_factor_g_s=None if layer.kfac_factor_g_s is None else layer.kfac_factor_g_s * rb * rs,
                    # A Linear applied to every token has the sequence as its factor rows per sample.
                    kfac_spatial=s_new if (layer.kfac_spatial is not None and layer.kfac_spatial == s_old)
                    else layer.kfac_spatial,
                )
            )
        ratio_flops = (sum(l.fwd_flops + l.bwd_flops for l in layers) / max(self.fwd_flops + self.bwd_flops, 1e-30))
        ph = self.phases
        phases = PhaseTimes(
            data_s=None if ph.data_s is None else ph.data_s * rb,
            forward_s=None if ph.forward_s is None else ph.forward_s * ratio_flops,
            backward_s=None if ph.backward_s is None else ph.backward_s * ratio_flops,
            optimizer_s=ph.optimizer_s,
            total_s=None,
            total_s_std=None,
        )
        return dataclasses.replace(
            self,
            batch_size=b_new,
            seq_len=s_new,
            layers=layers,
            phases=phases,
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
            "device": dict(self.device),
            "framework": dict(self.framework),
            "optimizer": dict(self.optimizer),
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
            "notes": list(self.notes),
            "layers": [_layer_to_dict(layer) for layer in self.layers],
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "profile") -> "Profile":
        """Build and validate a Profile from a parsed YAML/JSON document.

        Raises:
            SriftError: naming the first field that is missing or wrong.
        """
        if not isinstance(data, dict):
            raise _bad(source, "the file is not a mapping of fields")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise _bad(source, f"'schema' is {schema!r}, expected '{SCHEMA}'")
        for key in ("name", "batch_size", "precision", "layers"):
            if key not in data:
                raise _bad(source, f"required field '{key}' is missing")
        batch = data["batch_size"]
        if not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0:
            raise _bad(source, f"'batch_size' must be a positive integer, got {batch!r}")
        seq = data.get("seq_len")
        if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0):
            raise _bad(source, f"'seq_len' must be a positive integer or null, got {seq!r}")
        precision = data["precision"]
        if precision not in PRECISIONS:
            raise _bad(source, f"'precision' must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        raw_layers = data["layers"]
        if not isinstance(raw_layers, list) or not raw_layers:
            raise _bad(source, "'layers' must be a non-empty list")
        layers = [_layer_from_dict(item, i, source) for i, item in enumerate(raw_layers)]
        phases_raw = data.get("phases") or {}
        if not isinstance(phases_raw, dict):
            raise _bad(source, "'phases' must be a mapping")
        phase_fields = {f.name for f in dataclasses.fields(PhaseTimes)}
        phases = PhaseTimes(**{k: _opt_float(v, f"phases.{k}", source) for k, v in phases_raw.items() if k in phase_fields})
        buckets = []
        for i, b in enumerate(data.get("allreduce") or []):
            try:
                buckets.append(AllReduceBucket(int(b["rank"]), int(b["index"]), int(b["size_bytes"]), float(b["time_s"])))
            except (KeyError, TypeError, ValueError):
                raise _bad(source, f"allreduce[{i}] needs rank, index, size_bytes and time_s") from None
        device = data.get("device") or {"name": "none", "kind": "none", "gpu": None}
        if not isinstance(device, dict):
            raise _bad(source, "'device' must be a mapping")
        optimizer = data.get("optimizer") or {"type": "SGD", "state_bytes_per_param": 4}
        if not isinstance(optimizer, dict):
            raise _bad(source, "'optimizer' must be a mapping")
        return cls(
            name=str(data["name"]),
            batch_size=batch,
            precision=precision,
            layers=layers,
            seq_len=seq,
            device=device,
            framework={str(k): str(v) for k, v in (data.get("framework") or {}).items()},
            optimizer=optimizer,
            phases=phases,
            iterations=int(data.get("iterations") or 0),
            world_size=int(data.get("world_size") or 1),
            allreduce=buckets,
            input_bytes_per_sample=float(data.get("input_bytes_per_sample") or 0.0),
            notes=[str(n) for n in (data.get("notes") or [])],
        )

    def save(self, path: str | Path) -> Path:
        """Write the profile as YAML, atomically."""
        return write_yaml(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """Read and validate a profile file (YAML or JSON)."""
        return cls.from_dict(read_yaml(path, "profile"), source=str(path))


_INT_FIELDS = {"params", "grad_bytes", "grad_ready_order", "kfac_a_dim", "kfac_g_dim", "kfac_spatial"}
KFAC_TIME_FIELDS = ("kfac_factor_a_s", "kfac_factor_g_s", "kfac_inverse_a_s", "kfac_inverse_g_s", "kfac_precondition_s")
_OPTIONAL = {"fwd_s", "fwd_s_std", "bwd_s", "bwd_s_std", "grad_ready_order", "kfac_a_dim", "kfac_g_dim", "kfac_spatial",
             "unit", *KFAC_TIME_FIELDS}


def _layer_to_dict(layer: LayerProfile) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(LayerProfile):
        value = getattr(layer, f.name)
        # Keep files small: omit optional fields that are unset and seq2 parts that are zero.
        if value is None and f.name in _OPTIONAL:
            continue
        if f.name.endswith("_seq2") and not value:
            continue
        out[f.name] = value
    return out


def _layer_from_dict(item: Any, index: int, source: str) -> LayerProfile:
    if not isinstance(item, dict):
        raise _bad(source, f"layers[{index}] must be a mapping")
    known = {f.name for f in dataclasses.fields(LayerProfile)}
    for key in ("name", "type"):
        if key not in item:
            raise _bad(source, f"layers[{index}] is missing '{key}'")
    kwargs: dict[str, Any] = {"name": str(item["name"]), "type": str(item["type"])}
    for key, value in item.items():
        if key in ("name", "type") or key not in known:
            continue  # unknown per-layer keys are tolerated: newer profilers may add fields
        where = f"layers[{index}].{key}"
        if key == "unit":
            if value is not None and not isinstance(value, str):
                raise _bad(source, f"{where} must be a module name or null, got {value!r}")
            kwargs[key] = value
            continue
        if key in _INT_FIELDS:
            if value is None and key in _OPTIONAL:
                kwargs[key] = None
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise _bad(source, f"{where} must be a non-negative integer, got {value!r}")
            kwargs[key] = int(value)
        else:
            kwargs[key] = _opt_float(value, where, source) if key in _OPTIONAL else _req_float(value, where, source)
    return LayerProfile(**kwargs)


def _req_float(value: Any, where: str, source: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise _bad(source, f"{where} must be a non-negative number, got {value!r}")
    return float(value)


def _opt_float(value: Any, where: str, source: str) -> float | None:
    return None if value is None else _req_float(value, where, source)


def _bad(source: str, what: str) -> SriftError:
    return SriftError(
        f"{source} is not a valid srift profile: {what}.",
        "re-create it with `srift profile`, or fix the field (schema in docs/profile-schema.md).",
    )
