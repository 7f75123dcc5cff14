"""The job file of `srift check` (YAML, default ``srift.yaml``) and where each setting comes from.

::

    model: resnet50            # or profile: path/to/profile.yaml (relative to the job file), or a list, one per GPU
    batch_size: 64             # per GPU
    seq_len: 128               # sequence models only
    precision: amp             # fp32 | fp32-strict | tf32 | amp | bf16
    data_loading: images       # synthetic | images | tokens (default: by model kind)
    epochs: 90                 # with dataset_size: 1281167; or samples: N, tokens: N (sequence models),
                               # or steps: N (with global_batch_size: B when no instance is given)
    global_batch_size: 1024    # optional: fix the global batch instead of batch_size per GPU
    optimizer: sgd             # sgd | kfac
    kfac_strategy: spd         # naive | mpd | spd (with optimizer: kfac)
    kfac_inverse_method: inverse  # inverse | eigen
    kfac_factor_steps: 1       # factor update interval, iterations
    kfac_inv_steps: 1          # inverse update interval (a multiple of the factor interval)
    parallelism: auto          # ddp | zero2 | fsdp | hsdp | auto
    activation_checkpointing: auto  # none | selective | full | auto
    grad_accum: 1              # micro-batches per optimizer step
    reduce_dtype: fp32         # fp32 | bf16 | fp16: the dtype FSDP (or a layout) reduces gradients in
    grad_compression: none     # DDP's communication hook: none | fp16 | bf16 | powersgd[:RANK]
    bucket_cap_mb: 25          # DDP's gradient bucket cap, MiB
    fused_loss: false          # a fused cross-entropy kernel (no fp32 copy of the logits)
    instance: p3.16xlarge:2    # optional; without it: what `srift recommend` would choose
    spot: false
    infra: aws/us-east-1       # where to price it (--infra spelling: aws, aws/us-west-2, gcp,lambda); or region: us-east-1
    confidence: 0.9            # hours and cost limits are met at this quantile of the prediction
    limits: {max_cost_usd: 500, max_hours: 24, max_usd_per_hour: 30}

Settings resolve as: command-line flag > environment variable (``SRIFT_`` + the field name in
capitals: ``SRIFT_MODEL``, ``SRIFT_BATCH_SIZE``, ``SRIFT_MAX_COST_USD``, ...) > job file.

The job's keys are its options (srift/job_options.py): each is also a flag of `srift check`
(``batch_size``: ``--batch-size``).

This module parses and merges (types, unknown keys, which source wins); what the settings mean is
validated where they are defined: the training settings by ``srift.job.Job``.
"""

from __future__ import annotations

import difflib

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srift.bounds import (
    MAX_BUDGET_USD_PER_HOUR, MAX_COST_USD, MAX_DEADLINE_HOURS, MAX_JOB_FILE_BYTES, MAX_STEPS, MIN_HOURS, MIN_USD, key_text, parse_number, require, shown,
)
from srift.errors import SriftError
from srift.files import read_yaml
from srift.job import DEFAULT_CONFIDENCE, DEFAULT_INFRA, Job, require_confidence
from srift.job_options import JOB_OPTIONS, LENGTH, build_job

# The limits a job file may set, in the order `srift check` reports them.
LIMITS = ("max_cost_usd", "max_hours", "max_usd_per_hour")

# field -> (type, description for messages): the job's options (srift/job_options.py), then where
# and how to run it.
FIELDS: dict[str, tuple[type, str]] = {
    "model": (str, "a built-in model name"),
    "profile": (str, "a profile file path, or a list of them (the same job measured on several GPUs)"),
    **{o.name: (o.type, o.file_description) for o in JOB_OPTIONS},
    "instance": (str, "an instance spec like p3.16xlarge:2"),
    "spot": (bool, "true or false"),
    "region": (str, "an AWS region like us-east-1"),
    "infra": (str, "clouds and regions like aws, aws/us-west-2 or gcp,lambda"),
    "confidence": (float, "a number from 0.5 to below 1, like 0.9"),
}
# Upper bound of each numeric field and limit (srift/bounds.py); all must be above 0, the limits
# at least LOW_BOUNDS.
BOUNDS: dict[str, float] = {
    **{o.name: o.high for o in JOB_OPTIONS if o.high is not None}, "confidence": 1.0,
    "max_cost_usd": MAX_COST_USD, "max_hours": MAX_DEADLINE_HOURS, "max_usd_per_hour": MAX_BUDGET_USD_PER_HOUR,
}
LOW_BOUNDS: dict[str, float] = {"max_cost_usd": MIN_USD, "max_hours": MIN_HOURS, "max_usd_per_hour": MIN_USD}


@dataclass(frozen=True)
class JobLimits:
    """The limits a job file sets (None: not set).

    Attributes:
        max_cost_usd: The most the job may cost, USD.
        max_hours: The most hours the job may take.
        max_usd_per_hour: The most the cluster may cost per hour, USD.
    """

    max_cost_usd: float | None = None
    max_hours: float | None = None
    max_usd_per_hour: float | None = None

    def items(self) -> list[tuple[str, float]]:
        """(LIMITS name, allowed value) of each limit set, in LIMITS order."""
        return [(name, value) for name in LIMITS if (value := getattr(self, name)) is not None]


@dataclass(frozen=True)
class JobFile:
    """A job file after environment and flag overrides.

    Attributes:
        model: A built-in model name, or None when ``profiles`` are given.
        profiles: Profile files (paths resolved against the job file's folder), or None.
        job: The training settings, with their length.
        instance: An instance spec to check, or None for what `srift recommend` would choose.
        spot: Price the instances on spot.
        infra: Where to price it (``--infra`` spelling; ``region: R`` means ``aws/R``).
        limits: The limits to check the job against.
        confidence: Hours and cost limits are met at this quantile.
    """

    model: str | None
    profiles: list[str] | None
    job: Job
    instance: str | None = None
    spot: bool = False
    infra: str = DEFAULT_INFRA
    limits: JobLimits = field(default_factory=JobLimits)
    confidence: float = DEFAULT_CONFIDENCE


def _coerce(name: str, value: Any, source: str) -> Any:
    """``value`` of field ``name`` as its type (strings from environment variables are parsed)."""
    kind, desc = FIELDS[name] if name in FIELDS else (float, "a positive number")
    bad = SriftError(f"{source}: '{name}' must be {desc}, got {shown(value)}.", f"fix '{name}' in the job file (or its SRIFT_ variable).")
    if name == "profile" and isinstance(value, list):
        if not value or len(value) > 64 or not all(isinstance(v, str) and v.strip() and v.strip().isprintable() for v in value):
            raise bad
        return [v.strip() for v in value]
    if isinstance(value, str) and kind is not str:  # from an environment variable
        text = value.strip().lower()
        if kind is bool:
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise bad
        value = parse_number(text, f"{source}: '{name}'", hint=bad.hint)  # "1e9" tokens: a number; whole-ness below
    if kind is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if kind is str:
        if not isinstance(value, str) or not value.strip() or len(value) > 4096 or not value.strip().isprintable():
            raise bad
        return value.strip()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad
    if kind is int and isinstance(value, float):
        if not value.is_integer():  # NaN and infinities included
            raise bad
        value = int(value)
    if value <= 0:
        raise bad
    require(value, f"{source}: '{name}'", LOW_BOUNDS.get(name, 0), BOUNDS.get(name, MAX_STEPS), integer=kind is int,
            low_open=name not in LOW_BOUNDS, hint=f"fix '{name}' in the job file (or its SRIFT_ variable).")
    return value if kind is int else float(value)


def _read(path: str, source: str) -> dict[str, Any]:
    """The file's fields (unknown keys refused)."""
    raw = read_yaml(path, "job file", MAX_JOB_FILE_BYTES)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SriftError(f"{source}: the job file must be a mapping of fields.", "see `srift check --help` for the format.")
    unknown = sorted(key_text(k) for k in set(raw) - set(FIELDS) - {"limits"})
    if unknown:
        keys = list(FIELDS) + ["limits"]
        shown_keys = unknown[:5]  # a file of 100,000 unknown keys: five named, and no 100,000 look-ups
        near = [f"{m[0]} for {k}" for k in shown_keys for m in [difflib.get_close_matches(k.replace("-", "_"), keys, n=1, cutoff=0.6)]
                if m]
        more = f" and {len(unknown) - len(shown_keys):,} more" if len(unknown) > len(shown_keys) else ""
        raise SriftError(f"{source}: unknown key(s) {', '.join(shown_keys)}{more}.",
                         (f"did you mean {', '.join(near)}? Use" if near else "use") + f" only {', '.join(keys)}.")
    return dict(raw)


def _limits_of(data: dict[str, Any], source: str) -> dict[str, Any]:
    limits_raw = data.pop("limits", None) or {}
    if not isinstance(limits_raw, dict):
        raise SriftError(f"{source}: 'limits' must be a mapping.", f"write limits: {{{', '.join(f'{k}: ...' for k in LIMITS)}}}.")
    unknown = sorted(key_text(k) for k in set(limits_raw) - set(LIMITS))
    if unknown:
        near = [f"{m[0]} for {k}" for k in unknown for m in [difflib.get_close_matches(k.replace("-", "_"), list(LIMITS), n=1, cutoff=0.6)] if m]
        raise SriftError(f"{source}: unknown limit(s) {', '.join(unknown)}.",
                         (f"did you mean {', '.join(near)}? Use" if near else "use") + f" only {', '.join(LIMITS)}.")
    return dict(limits_raw)


def _merge(data: dict[str, Any], limits: dict[str, Any], overrides: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Apply environment variables, then flags, over the file's values (in place)."""
    if any(overrides.get(k) is not None or env.get(f"SRIFT_{k.upper()}") for k in ("model", "profile")):
        data.pop("model", None)  # a flag or variable naming the model or profile replaces the file's
        data.pop("profile", None)
    for name in list(FIELDS) + list(LIMITS):
        target = limits if name in LIMITS else data
        var = f"SRIFT_{name.upper()}"
        if env.get(var) not in (None, ""):
            target[name] = env[var]
        if overrides.get(name) is not None:
            target[name] = overrides[name]


def load_jobfile(path: str | None, overrides: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None) -> JobFile:
    """Read, merge and validate a job file.

    Args:
        path: Job file (None: no file, everything from env and flags).
        overrides: Command-line values by field or limit name (None entries are ignored).
        env: Environment (default: os.environ).

    Raises:
        SriftError: naming the field that is missing, unknown or wrong.
    """
    env = os.environ if env is None else env
    source = "job file" if path is None else str(path)
    data = _read(path, source) if path is not None else {}
    limits = _limits_of(data, source)
    _merge(data, limits, overrides or {}, env)
    values = {k: _coerce(k, v, source) for k, v in data.items() if v is not None}
    allowed = {k: _coerce(k, v, source) for k, v in limits.items() if v is not None}

    if ("model" in values) == ("profile" in values):
        raise SriftError(f"{source}: give exactly one of 'model' and 'profile'.", "add model: resnet50 (for example) or profile: FILE.")
    profiles = None
    if "profile" in values:
        files = values["profile"] if isinstance(values["profile"], list) else [values["profile"]]
        base = Path(path).parent if path is not None else Path(".")
        profiles = [f if Path(f).is_absolute() or path is None else str(base / f) for f in files]
    if not any(k in values for k in LENGTH):
        raise SriftError(f"{source}: the job's length is missing.",
                         "add epochs: E with dataset_size: N, samples: N, tokens: N, or steps: N.")
    try:
        job = build_job({o.name: values[o.name] for o in JOB_OPTIONS if o.name in values})
    except SriftError as exc:  # say which file the setting came from
        raise SriftError(f"{source}: {exc.message}", exc.hint) from None
    if not allowed:
        raise SriftError(f"{source}: no limits to check.", f"add limits with one or more of {', '.join(LIMITS)}.")
    if "region" in values and "infra" in values:
        raise SriftError(f"{source}: give 'infra' or 'region', not both.", f"region: {values['region']} means infra: aws/{values['region']}.")
    infra = values.get("infra") or (f"aws/{values['region']}" if "region" in values else DEFAULT_INFRA)
    try:
        confidence = require_confidence(values.get("confidence", DEFAULT_CONFIDENCE))
    except SriftError as exc:
        raise SriftError(f"{source}: {exc.message}", "set confidence: 0.9 (or anything from 0.5 to below 1).") from None
    return JobFile(model=values.get("model"), profiles=profiles, job=job, instance=values.get("instance"),
                   spot=values.get("spot", False), infra=infra, limits=JobLimits(**allowed), confidence=confidence)
