"""The pure part of `srift check`: validate a job file, predict, compare with limits and a baseline.

Job file (YAML, default ``srift.yaml``)::

    model: resnet50            # or profile: path/to/profile.yaml (relative to the job file), or a list, one per GPU
    batch_size: 64             # per GPU
    seq_len: 128               # sequence models only
    precision: amp             # fp32 | tf32 | amp
    steps: 50000               # or epochs: 90 with dataset_size: 1281167
    optimizer: sgd             # sgd | kfac
    instance: p3.16xlarge:2    # optional; without it: what `srift recommend` would choose
    spot: false
    region: us-east-1
    limits: {max_cost_usd: 500, max_hours: 24, max_usd_per_hour: 30}

Settings resolve as: command-line flag > environment variable (``SRIFT_MODEL``, ``SRIFT_PROFILE``,
``SRIFT_BATCH_SIZE``, ``SRIFT_SEQ_LEN``, ``SRIFT_PRECISION``, ``SRIFT_STEPS``, ``SRIFT_EPOCHS``,
``SRIFT_DATASET_SIZE``, ``SRIFT_OPTIMIZER``, ``SRIFT_INSTANCE``, ``SRIFT_SPOT``, ``SRIFT_REGION``,
``SRIFT_MAX_COST_USD``, ``SRIFT_MAX_HOURS``, ``SRIFT_MAX_USD_PER_HOUR``) > job file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srift.errors import SriftError

CHECK_SCHEMA = "srift.check/v1"

# field -> (type, description for messages)
FIELDS: dict[str, tuple[type, str]] = {
    "model": (str, "a built-in model name"),
    "profile": (str, "a profile file path, or a list of them (the same job measured on several GPUs)"),
    "batch_size": (int, "a positive integer (per-GPU batch)"),
    "seq_len": (int, "a positive integer"),
    "precision": (str, "fp32, tf32 or amp"),
    "steps": (int, "a positive integer"),
    "epochs": (float, "a positive number"),
    "dataset_size": (int, "a positive integer"),
    "optimizer": (str, "sgd or kfac"),
    "instance": (str, "an instance spec like p3.16xlarge:2"),
    "spot": (bool, "true or false"),
    "region": (str, "an AWS region like us-east-1"),
}
LIMITS = ("max_cost_usd", "max_hours", "max_usd_per_hour")


@dataclass
class JobSpec:
    """A validated job file (after environment and flag overrides)."""

    model: str | None = None
    profile: str | list[str] | None = None
    batch_size: int | None = None
    seq_len: int | None = None
    precision: str | None = None
    steps: int | None = None
    epochs: float | None = None
    dataset_size: int | None = None
    optimizer: str = "sgd"
    instance: str | None = None
    spot: bool = False
    region: str = "us-east-1"
    limits: dict[str, float] = field(default_factory=dict)


def _coerce(name: str, value: Any, source: str) -> Any:
    kind, desc = FIELDS[name] if name in FIELDS else (float, "a positive number")
    bad = SriftError(f"{source}: '{name}' must be {desc}, got {value!r}.", f"fix '{name}' in the job file (or its SRIFT_ variable).")
    if name == "profile" and isinstance(value, list):
        if not value or not all(isinstance(v, str) and v.strip() for v in value):
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
        try:
            value = int(text) if kind is int else float(text)
        except ValueError:
            raise bad from None
    if kind is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if kind is str:
        if not isinstance(value, str) or not value.strip():
            raise bad
        return value.strip()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad
    if kind is int and (not float(value).is_integer()):
        raise bad
    if value <= 0:
        raise bad
    return int(value) if kind is int else float(value)


def load_job(path: str | None, overrides: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> JobSpec:
    """Read, merge and validate a job file.

    Args:
        path: Job file (None: no file, everything from env and flags).
        overrides: Command-line values (None entries are ignored).
        env: Environment (default: os.environ).

    Raises:
        SriftError: naming the field that is missing, unknown or wrong.
    """
    env = dict(os.environ) if env is None else env
    data: dict[str, Any] = {}
    source = "job file"
    base = Path(".")
    if path is not None:
        from srift.files import read_yaml

        source = str(path)
        raw = read_yaml(path, "job file")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise SriftError(f"{source}: the job file must be a mapping of fields.", "see `srift check --help` for the format.")
        unknown = sorted(set(raw) - set(FIELDS) - {"limits"})
        if unknown:
            raise SriftError(f"{source}: unknown key(s) {', '.join(unknown)}.",
                             f"use only {', '.join(list(FIELDS) + ['limits'])}.")
        data.update(raw)
        base = Path(path).parent
    limits_raw = data.pop("limits", None) or {}
    if not isinstance(limits_raw, dict):
        raise SriftError(f"{source}: 'limits' must be a mapping.", f"write limits: {{{', '.join(f'{k}: ...' for k in LIMITS)}}}.")
    unknown = sorted(set(limits_raw) - set(LIMITS))
    if unknown:
        raise SriftError(f"{source}: unknown limit(s) {', '.join(unknown)}.", f"use only {', '.join(LIMITS)}.")
    limits = dict(limits_raw)
    if any((overrides or {}).get(k) is not None or env.get(f"SRIFT_{k.upper()}") for k in ("model", "profile")):
        data.pop("model", None)  # a flag or variable naming the model or profile replaces the file's
        data.pop("profile", None)
    for name in list(FIELDS) + list(LIMITS):
        var = f"SRIFT_{name.upper()}"
        target = limits if name in LIMITS else data
        if env.get(var) not in (None, ""):
            target[name] = env[var]
        if overrides and overrides.get(name) is not None:
            target[name] = overrides[name]
    values = {k: _coerce(k, v, source) for k, v in data.items() if v is not None}
    limits = {k: _coerce(k, v, source) for k, v in limits.items() if v is not None}
    job = JobSpec(**values, limits=limits)
    if (job.model is None) == (job.profile is None):
        raise SriftError(f"{source}: give exactly one of 'model' and 'profile'.", "add model: resnet50 (for example) or profile: FILE.")
    if job.profile is not None and path is not None:
        def rooted(f: str) -> str:
            return f if Path(f).is_absolute() else str(base / f)
        job.profile = [rooted(f) for f in job.profile] if isinstance(job.profile, list) else rooted(job.profile)
    if job.steps is not None and job.epochs is not None:
        raise SriftError(f"{source}: give 'steps' or 'epochs', not both.", "drop one of them.")
    if job.steps is None and job.epochs is None:
        raise SriftError(f"{source}: the job's length is missing.", "add steps: N, or epochs: E with dataset_size: N.")
    if (job.epochs is None) != (job.dataset_size is None):
        raise SriftError(f"{source}: 'epochs' needs 'dataset_size' (and the reverse).", "add the missing one.")
    if job.precision is not None and job.precision not in ("fp32", "tf32", "amp"):
        raise SriftError(f"{source}: 'precision' must be fp32, tf32 or amp, got {job.precision!r}.", "fix 'precision'.")
    if job.optimizer not in ("sgd", "kfac"):
        raise SriftError(f"{source}: 'optimizer' must be sgd or kfac, got {job.optimizer!r}.", "fix 'optimizer'.")
    if not job.limits:
        raise SriftError(f"{source}: no limits to check.", f"add limits with one or more of {', '.join(LIMITS)}.")
    return job


def run_check(job: JobSpec, catalog_as_of: str | None = None) -> dict[str, Any]:
    """Predict the job and compare it with its limits. Returns the JSON-ready result."""
    import math

    from srift.job import Job
    from srift.sources import resolve_cluster, resolve_profiles

    files = None if job.profile is None else ([job.profile] if isinstance(job.profile, str) else job.profile)
    profile, more = resolve_profiles(job.model, files)
    train = Job(batch_size=job.batch_size, seq_len=job.seq_len, precision=job.precision, optimizer=job.optimizer)
    lim = job.limits
    if job.instance is not None:
        from srift.simulate import predict

        cluster = resolve_cluster(job.instance, None, region=job.region, spot=job.spot)
        pred = predict(profile, cluster, train, more)
        instance, cost_h = job.instance, pred.cost_per_hour_usd
        exp_tp = pred.spot["expected_throughput_samples_per_s"] if pred.spot else pred.throughput_samples_per_s
        chosen_by = "job file"
    else:
        from srift.recommend import recommend
        from srift.search import Constraints

        cons = Constraints(budget_usd_per_hour=lim.get("max_usd_per_hour"), deadline_hours=lim.get("max_hours"),
                           max_cost_usd=lim.get("max_cost_usd"), steps=job.steps, epochs=job.epochs,
                           dataset_size=job.dataset_size, objective="cost", spot=job.spot, top=1)
        result = recommend(profile, train, cons, job.region, more)
        best = result.recommendations[0] if result.recommendations else result.closest
        if best is None:
            raise SriftError("no configuration could be predicted for this job (it fits no GPU at this batch size).",
                             "lower batch_size, or give an instance.", exit_code=1)
        pred, instance, cost_h = best.prediction, best.instance, best.cost_per_hour_usd
        exp_tp = best.expected_throughput_samples_per_s
        chosen_by = "srift recommend (cheapest under the limits)" if result.recommendations else "closest to the limits"
    if cost_h is None:
        raise SriftError(f"'{instance}' has no price in the catalog, so its cost cannot be checked.", "choose a priced instance type.")
    gb = pred.global_batch_size
    steps = float(job.steps) if job.steps is not None else job.epochs * math.ceil(job.dataset_size / gb)  # type: ignore[operator]
    hours = steps * gb / exp_tp / 3600.0
    cost = hours * cost_h
    actual = {"max_cost_usd": cost, "max_hours": hours, "max_usd_per_hour": cost_h}
    checks = []
    for name in LIMITS:
        if name in lim:
            checks.append({"limit": name, "value": lim[name], "predicted": actual[name],
                           "margin": lim[name] - actual[name], "margin_pct": (lim[name] - actual[name]) / lim[name] * 100.0,
                           "passed": actual[name] <= lim[name] + 1e-12})
    if not pred.fits_in_memory:
        checks.append({"limit": "fits_in_memory", "value": True, "predicted": False, "margin": None, "margin_pct": None,
                       "passed": False})
    return {
        "schema": CHECK_SCHEMA,
        "passed": all(c["passed"] for c in checks),
        "predicted_cost_usd": cost,
        "predicted_hours": hours,
        "cost_per_hour_usd": cost_h,
        "configuration": {"instance": instance, "spot": job.spot, "gpus": pred.gpus, "chosen_by": chosen_by,
                          "global_batch_size": gb, "iteration_time_s": pred.iteration_time_s,
                          "throughput_samples_per_s": exp_tp, "bottleneck": pred.bottleneck, "region": job.region,
                          "typical_error_pct": pred.typical_error_pct, "typical_error_basis": pred.typical_error_basis},
        "job": {"model": profile.name, "precision": job.precision or profile.precision, "steps": steps,
                "optimizer": job.optimizer},
        "limits": checks,
        "catalog_as_of": catalog_as_of,
    }


def compare(result: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Change of cost, hours and $/h against an earlier result (absolute and %)."""
    out = {}
    for key in ("predicted_cost_usd", "predicted_hours", "cost_per_hour_usd"):
        new, old = result.get(key), base.get(key)
        if not isinstance(old, (int, float)) or isinstance(old, bool):
            raise SriftError(f"the baseline has no numeric '{key}'.", "pass a JSON file written by `srift check --out-file`.")
        out[key] = {"base": old, "new": new, "change": new - old, "change_pct": ((new - old) / old * 100.0) if old else None}
    return out


def load_baseline(path: str) -> dict[str, Any]:
    """Read a JSON result written by `srift check --out-file`."""
    from srift.files import read_json

    p = Path(path)
    data = read_json(p, "baseline", "pass a JSON file written by `srift check --out-file` on the base branch.")
    if not isinstance(data, dict) or data.get("schema") != CHECK_SCHEMA:
        raise SriftError(f"baseline '{p}' is not a srift check result.", "pass a file written by `srift check --out-file`.")
    return data
