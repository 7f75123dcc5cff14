"""The profile file's format (``schema: srift.profile/v1``, docs/profile-schema.md): a layer to a
plain dict, and every section of a parsed file back to srift's records, each field checked against
what srift models (srift/bounds.py). srift/profile.py's ``Profile.from_dict`` reads a file section
by section through these, in the order the file's fields are checked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from srift.bounds import (
    MAX_BATCH_SIZE, MAX_GPUS, MAX_ITERS, MAX_KFAC_DIM, MAX_KFAC_SPATIAL, MAX_LAYER_BYTES, MAX_LAYER_FLOPS, MAX_LAYER_PARAMS,
    MAX_LAYER_S, MAX_LAYERS, MAX_NAME_CHARS, MAX_NOTE_CHARS, MAX_NOTES, MAX_SEQ_LEN, MAX_STATE_BYTES_PER_PARAM, shown,
)
from srift.errors import SriftError
from srift.job import CHECKPOINTING, PARALLELISMS, PRECISIONS, Checkpointing, Parallelism
from srift.profile_records import (
    AGGREGATES, CLOCKS, COLLECTIVE_KINDS, COLLECTIVE_PHASES, KFAC_TIME_FIELDS, MAX_THREADS, MEASUREMENT_METHODS,
    SAVED_SCHEMAS, TIMING_MODES, AllReduceBucket, DeviceInfo, LayerProfile, MeasurementInfo, OptimizerInfo, PhaseTimes,
    RankMemory, UnitCollective,
)
from srift.text import inert

SCHEMA = "srift.profile/v1"
MIN_MEASURED_S = 1e-6  # a measured iteration's layer times add up to at least this


# ---- the sections of a file, in the order Profile.from_dict checks them ----------------------------
def check_document(data: Any, source: str) -> dict[str, Any]:
    """The parsed file, once it is a mapping with this schema and the required fields."""
    if not isinstance(data, dict):
        raise bad(source, "the file is not a mapping of fields")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise bad(source, f"'schema' is {shown(schema)}, expected '{SCHEMA}'")
    for key in ("name", "batch_size", "precision", "layers"):
        if key not in data:
            raise bad(source, f"required field '{key}' is missing")
    return data


@dataclass(frozen=True)
class Header:
    """What a profile is of: its name, batch size, sequence length and precision."""

    name: str
    batch_size: int
    seq_len: int | None
    precision: str


def header(data: dict[str, Any], source: str) -> Header:
    name = text(data["name"], "name", source)
    batch = integer(data["batch_size"], "batch_size", source, MAX_BATCH_SIZE, low=1)
    seq = data.get("seq_len")
    if seq is not None:
        seq = integer(seq, "seq_len", source, MAX_SEQ_LEN, low=1)
    precision = data["precision"]
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise bad(source, f"'precision' must be one of {', '.join(PRECISIONS)}, got {shown(precision)}")
    return Header(name, batch, seq, precision)


def layers_from(raw_layers: Any, source: str) -> list[LayerProfile]:
    if not isinstance(raw_layers, list) or not raw_layers:
        raise bad(source, "'layers' must be a non-empty list")
    if len(raw_layers) > MAX_LAYERS:
        raise bad(source, f"'layers' has {len(raw_layers):,} entries; srift models at most {MAX_LAYERS:,}")
    return [_layer_from_dict(item, i, source) for i, item in enumerate(raw_layers)]


def phases_from(value: Any, source: str) -> PhaseTimes:
    phases_raw = _mapping(value, "phases", source)
    phase_fields = {f.name for f in dataclasses.fields(PhaseTimes)}
    return PhaseTimes(**{k: _opt_float(v, f"phases.{k}", source) for k, v in phases_raw.items() if k in phase_fields})


def buckets_from(value: Any, source: str) -> list[AllReduceBucket]:
    raw_buckets = value or []
    if not isinstance(raw_buckets, list):
        raise bad(source, "'allreduce' must be a list of buckets")
    return [_bucket(b, i, source) for i, b in enumerate(raw_buckets)]


def parallelism_from(parallelism: Any, source: str) -> Parallelism | None:
    if parallelism is not None and parallelism not in PARALLELISMS:
        raise bad(source, f"'parallelism' must be one of {', '.join(PARALLELISMS)} or null, got {shown(parallelism)}")
    return parallelism


def checkpointing_from(checkpointing: Any, source: str) -> Checkpointing | None:
    if checkpointing is not None and checkpointing not in CHECKPOINTING:
        raise bad(source, f"'activation_checkpointing' must be one of {', '.join(CHECKPOINTING)} or null, "
                          f"got {shown(checkpointing)}")
    return checkpointing


def text_map(value: Any, where: str, source: str) -> dict[str, str]:
    """A mapping of plain values (``fsdp``, ``framework``), each as its text."""
    return {str(k): str(v) for k, v in _scalars(value, where, source).items()}


def collectives_from(value: Any, source: str) -> list[UnitCollective]:
    raw_collectives = value or []
    if not isinstance(raw_collectives, list):
        raise bad(source, "'collectives' must be a list")
    if len(raw_collectives) > MAX_LAYERS:
        raise bad(source, f"'collectives' has {len(raw_collectives):,} entries; srift reads at most {MAX_LAYERS:,}")
    return [_collective_from_dict(c, i, source) for i, c in enumerate(raw_collectives)]


def timing_from(timing: Any, source: str) -> str | None:
    if timing is not None and timing not in TIMING_MODES:
        raise bad(source, f"'timing' must be one of {', '.join(TIMING_MODES)} or null, got {shown(timing)}")
    return timing


def peak_memory_from(value: Any, source: str) -> list[RankMemory]:
    raw_memory = value or []
    if not isinstance(raw_memory, list) or len(raw_memory) > MAX_GPUS:
        raise bad(source, f"'peak_memory' must be a list of at most {MAX_GPUS:,} ranks")
    return [_rank_memory(m, i, source) for i, m in enumerate(raw_memory)]


def device_from(value: Any, source: str) -> DeviceInfo:
    device = _scalars(value or {}, "device", source)
    for key in ("name", "kind", "gpu"):
        if device.get(key) is not None and not isinstance(device[key], str):
            raise bad(source, f"'device.{key}' must be a string, got {shown(device[key])}")
    return DeviceInfo(name=device.get("name") or "none", kind=device.get("kind") or "none", gpu=device.get("gpu"))


def optimizer_from(value: Any, source: str) -> OptimizerInfo:
    optimizer = _scalars(value or {}, "optimizer", source)
    if "state_bytes_per_param" in optimizer:
        number(optimizer["state_bytes_per_param"], "optimizer.state_bytes_per_param", source, MAX_STATE_BYTES_PER_PARAM)
    if optimizer.get("type") is not None and not isinstance(optimizer["type"], str):
        raise bad(source, f"'optimizer.type' must be a string, got {shown(optimizer['type'])}")
    return OptimizerInfo(type=optimizer.get("type") or "SGD", state_bytes_per_param=optimizer.get("state_bytes_per_param", 4))


def notes_from(value: Any, source: str) -> list[str]:
    notes = value or []
    if not isinstance(notes, list) or any(isinstance(n, (list, dict)) for n in notes):
        raise bad(source, "'notes' must be a list of strings")
    return [inert(n, MAX_NOTE_CHARS) for n in notes[:MAX_NOTES]]  # shown to people: one bounded line each


def check_work(measured: bool, layers: list[LayerProfile], phases: PhaseTimes, source: str) -> None:
    """An iteration of no work takes no time: every throughput would divide by zero."""
    if measured:
        measured_s = sum((l.fwd_s or 0.0) + (l.bwd_s or 0.0) for l in layers) + (phases.total_s or 0.0)
        if measured_s < MIN_MEASURED_S:
            raise bad(source, f"its measured times add up to {measured_s:g} s, less than the {MIN_MEASURED_S:g} s "
                              "of any real iteration")
    elif not any(l.fwd_flops or l.bwd_flops or l.fwd_bytes or l.bwd_bytes for l in layers):
        raise bad(source, "its layers do no work (every FLOP and byte count is zero)")


# ---- one layer, one record -------------------------------------------------------------------------
_LAYER_BOUNDS: dict[str, float] = {
    "params": MAX_LAYER_PARAMS, "param_tensors": MAX_LAYER_PARAMS, "grad_bytes": MAX_LAYER_BYTES, "grad_ready_order": MAX_LAYERS,
    "kfac_a_dim": MAX_KFAC_DIM, "kfac_g_dim": MAX_KFAC_DIM, "kfac_spatial": MAX_KFAC_SPATIAL,
    "fwd_flops": MAX_LAYER_FLOPS, "bwd_flops": MAX_LAYER_FLOPS, "fwd_flops_seq2": MAX_LAYER_FLOPS,
    "bwd_flops_seq2": MAX_LAYER_FLOPS, "fwd_bytes": MAX_LAYER_BYTES, "bwd_bytes": MAX_LAYER_BYTES,
    "activation_bytes": MAX_LAYER_BYTES, "activation_bytes_seq2": MAX_LAYER_BYTES, "frozen_bytes": MAX_LAYER_BYTES,
    "saved_bytes": MAX_LAYER_BYTES, "saved_bytes_seq2": MAX_LAYER_BYTES,
    "saved_half_bytes": MAX_LAYER_BYTES, "saved_half_bytes_seq2": MAX_LAYER_BYTES,
}
_INT_FIELDS = {"params", "param_tensors", "grad_bytes", "grad_ready_order", "kfac_a_dim", "kfac_g_dim", "kfac_spatial"}
_OPTIONAL = {"param_tensors", "fwd_s", "fwd_s_std", "bwd_s", "bwd_s_std", "grad_ready_order", "kfac_a_dim", "kfac_g_dim", "kfac_spatial",
             "unit", "saved_bytes", "saved_half_bytes", *KFAC_TIME_FIELDS}
# A part that grows with seq_len squared is part of its total: rescaling relies on total >= part.
_SEQ2_OF = {"fwd_flops_seq2": "fwd_flops", "bwd_flops_seq2": "bwd_flops", "activation_bytes_seq2": "activation_bytes",
            "saved_bytes_seq2": "saved_bytes", "saved_half_bytes_seq2": "saved_half_bytes"}


def layer_to_dict(layer: LayerProfile) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(LayerProfile):
        value = getattr(layer, f.name)
        # Keep files small: omit optional fields that are unset and seq2 parts that are zero.
        if value is None and f.name in _OPTIONAL:
            continue
        if (f.name.endswith("_seq2") or f.name == "frozen_bytes") and not value:
            continue
        out[f.name] = value
    return out


def _layer_from_dict(item: Any, index: int, source: str) -> LayerProfile:
    if not isinstance(item, dict):
        raise bad(source, f"layers[{index}] must be a mapping")
    known = {f.name for f in dataclasses.fields(LayerProfile)}
    for key in ("name", "type"):
        if key not in item:
            raise bad(source, f"layers[{index}] is missing '{key}'")
    kwargs: dict[str, Any] = {"name": text(item["name"], f"layers[{index}].name", source),
                              "type": text(item["type"], f"layers[{index}].type", source)}
    for key, value in item.items():
        if key in ("name", "type") or key not in known:
            continue  # unknown per-layer keys are tolerated: newer profilers may add fields
        where = f"layers[{index}].{key}"
        if key == "unit":
            if value is not None and not isinstance(value, str):
                raise bad(source, f"{where} must be a module name or null, got {shown(value)}")
            kwargs[key] = None if value is None else text(value, where, source)
        elif value is None and key in _OPTIONAL:
            kwargs[key] = None
        elif key in _INT_FIELDS:
            kwargs[key] = integer(value, where, source, _LAYER_BOUNDS[key], integral_float=True)
        else:
            kwargs[key] = number(value, where, source, _LAYER_BOUNDS.get(key, MAX_LAYER_S))
    layer = LayerProfile(**kwargs)
    for part, total in _SEQ2_OF.items():
        if getattr(layer, part) > (getattr(layer, total) or 0.0):
            raise bad(source, f"layers[{index}].{part} ({getattr(layer, part):g}) is more than its total {total} "
                               f"({getattr(layer, total) or 0.0:g})")
    return layer


def saved_schema(value: Any, source: str) -> str | None:
    if value is not None and value not in SAVED_SCHEMAS:
        raise bad(source, f"'saved_tensors' must be one of {', '.join(SAVED_SCHEMAS)} or null, got {shown(value)}")
    return value


def _bucket(item: Any, index: int, source: str) -> AllReduceBucket:
    if not isinstance(item, dict) or not all(k in item for k in ("rank", "index", "size_bytes", "time_s")):
        raise bad(source, f"allreduce[{index}] needs rank, index, size_bytes and time_s")
    where = f"allreduce[{index}]"
    return AllReduceBucket(integer(item["rank"], f"{where}.rank", source, MAX_GPUS),
                           integer(item["index"], f"{where}.index", source, MAX_LAYERS),
                           integer(item["size_bytes"], f"{where}.size_bytes", source, MAX_LAYER_BYTES),
                           number(item["time_s"], f"{where}.time_s", source, MAX_LAYER_S),
                           None if item.get("ready_to_done_s") is None
                           else number(item["ready_to_done_s"], f"{where}.ready_to_done_s", source, MAX_LAYER_S))


def _rank_memory(item: Any, index: int, source: str) -> RankMemory:
    where = f"peak_memory[{index}]"
    keys = ("rank", "max_allocated_bytes", "max_reserved_bytes")
    if not isinstance(item, dict) or not all(k in item for k in keys):
        raise bad(source, f"{where} needs {', '.join(keys)}")
    return RankMemory(integer(item["rank"], f"{where}.rank", source, MAX_GPUS),
                      integer(item["max_allocated_bytes"], f"{where}.max_allocated_bytes", source, MAX_LAYER_BYTES),
                      integer(item["max_reserved_bytes"], f"{where}.max_reserved_bytes", source, MAX_LAYER_BYTES))


def measurement_from(item: Any, source: str) -> MeasurementInfo | None:
    """The ``measurement`` mapping (None when absent: a v1 profile, or not measured)."""
    if item is None:
        return None
    raw = _scalars(item, "measurement", source)
    for key, allowed in (("method", MEASUREMENT_METHODS), ("clock", CLOCKS), ("aggregate", AGGREGATES)):
        if raw.get(key) not in allowed:
            raise bad(source, f"'measurement.{key}' must be one of {', '.join(allowed)}, got {shown(raw.get(key))}")
    threads, wait = raw.get("threads"), raw.get("run_queue_s")
    hooked, cost, steps = raw.get("hooked_step_s"), raw.get("hook_overhead_s"), raw.get("unhooked_steps")
    return MeasurementInfo(raw["method"], raw["clock"], raw["aggregate"],
                           None if threads is None else integer(threads, "measurement.threads", source, MAX_THREADS, low=1),
                           None if wait is None else number(wait, "measurement.run_queue_s", source, MAX_LAYER_S),
                           None if hooked is None else number(hooked, "measurement.hooked_step_s", source, MAX_LAYER_S),
                           None if cost is None else number(cost, "measurement.hook_overhead_s", source, MAX_LAYER_S),
                           None if steps is None else integer(steps, "measurement.unhooked_steps", source, MAX_ITERS))


def _collective_from_dict(item: Any, index: int, source: str) -> UnitCollective:
    where = f"collectives[{index}]"
    keys = ("rank", "kind", "phase", "size_bytes", "calls", "time_s")
    if not isinstance(item, dict) or not all(k in item for k in keys):
        raise bad(source, f"{where} needs rank, unit, kind, phase, size_bytes, calls and time_s")
    kind, phase, unit = item["kind"], item["phase"], item.get("unit")
    if kind not in COLLECTIVE_KINDS:
        raise bad(source, f"{where}.kind must be one of {', '.join(COLLECTIVE_KINDS)}, got {shown(kind)}")
    if phase not in COLLECTIVE_PHASES:
        raise bad(source, f"{where}.phase must be one of {', '.join(COLLECTIVE_PHASES)}, got {shown(phase)}")
    if unit is not None and not isinstance(unit, str):
        raise bad(source, f"{where}.unit must be a module name or null, got {shown(unit)}")
    return UnitCollective(integer(item["rank"], f"{where}.rank", source, MAX_GPUS),
                          None if unit is None else text(unit, f"{where}.unit", source), kind, phase,
                          integer(item["size_bytes"], f"{where}.size_bytes", source, MAX_LAYER_BYTES),
                          number(item["calls"], f"{where}.calls", source, MAX_ITERS * MAX_LAYERS),
                          number(item["time_s"], f"{where}.time_s", source, MAX_LAYER_S * MAX_ITERS))


def number(value: Any, where: str, source: str, high: float) -> float:
    """A finite number in ``[0, high]``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= high:
        # (NaN fails the comparison; an int too large for a float compares exactly)
        raise bad(source, f"{where} must be a number from 0 to {high:g}, got {shown(value)}")
    return float(value)


def integer(value: Any, where: str, source: str, high: float, low: int = 0, integral_float: bool = False) -> int:
    """An integer in ``[low, high]`` (with ``integral_float``, a float with no fraction counts)."""
    if integral_float and isinstance(value, float) and value.is_integer():
        value = int(value) if low <= value <= high else value
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise bad(source, f"{where} must be an integer from {low} to {high:,.0f}, got {shown(value)}")
    return value


def _opt_float(value: Any, where: str, source: str) -> float | None:
    return None if value is None else number(value, where, source, MAX_LAYER_S)


def text(value: Any, where: str, source: str) -> str:
    """A one-line printable name (numbers are taken as their text)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS or not value.isprintable():
        raise bad(source, f"{where} must be a one-line name of at most {MAX_NAME_CHARS} characters, got {shown(value)}")
    return value


def _mapping(value: Any, where: str, source: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad(source, f"'{where}' must be a mapping")
    return value


def _scalars(value: Any, where: str, source: str) -> dict[str, Any]:
    """A mapping of plain values (text, numbers, booleans, null): nothing nested."""
    out = _mapping(value, where, source)
    for key, v in out.items():
        if not isinstance(key, str) or not (v is None or isinstance(v, (str, int, float, bool))):
            raise bad(source, f"'{where}' must map names to plain values, got {shown(key)}: {shown(v)}")
    return dict(out)


def bad(source: str, what: str) -> SriftError:
    return SriftError(
        f"{source} is not a valid srift profile: {what}.",
        "re-create it with `srift profile`, or fix the field (schema in docs/profile-schema.md).",
    )
