"""What each command computes: names and paths in, typed results out, nothing printed.

The commands (srift/commands/) parse their flags, call one function here and hand its result to
one renderer (srift/report/). Scripts and notebooks can call these functions the same way.

Nothing here imports torch at import time: ``profile_*`` and ``calibrate_comm`` import it when
called (``require_torch`` says clearly when it is missing).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srift import DISTRIBUTION
from srift.catalog import Instance, get_instance, load_catalog
from srift.catalog.spec import cluster_from_spec
from srift.cluster import Cluster, load_cluster
from srift.errors import SriftError
from srift.examples import CopiedExamples, bundled
from srift.examples import copy_examples as copy_example_files
from srift.files import read_json
from srift.hardware import GpuSpec, matching_gpus
from srift.hardware import gpu as gpu_spec
from srift.job import Job
from srift.jobfile import JobFile
from srift.profile import Profile
from srift.report.format import usd
from srift.report.handoff import LaunchGroup, LaunchPlan
from srift.results import (
    CHECK_SCHEMA,
    CheckedConfiguration,
    CheckResult,
    MetricChange,
    PredictResult,
    RecommendResult,
)
from srift.search import search
from srift.search.limits import Constraints, check_limits
from srift.search.rank import SearchResult
from srift.simulate import Predictor
from srift.simulate.prediction import Prediction
from srift.simulate.memory import fits
from srift.zoo import MODELS, canonical_name, llm_arch, load_builtin_profile
from srift.zoo.hf_config import arch_from_hf_config, hf_config_profile
from srift.zoo.llm import model_flops_per_token

if TYPE_CHECKING:
    from srift.profiling.runner import ProfileResult

# ---- what the user names ------------------------------------------------------------------------
def resolve_profiles(model: str | None, profiles: Sequence[str] | None,
                     model_config: str | None = None, precision: str | None = None) -> tuple[Profile, list[Profile]]:
    """``--model NAME`` (a shipped profile, torch-free), ``--model-config config.json`` (a Hugging
    Face decoder LLM, an analytic profile), or ``--profile FILE`` given once or more (the same job
    measured on different GPUs; the Predictor checks that they fit together): the first profile
    and the rest. Profiles come at their own batch and sequence length; a decoder LLM's analytic
    profile is made at ``precision`` (its element sizes follow it; None: fp32).

    Raises:
        SriftError: unless exactly one of a model, a model config and profiles is given.
    """
    files = list(profiles or [])
    if sum((model is not None, model_config is not None, bool(files))) != 1:
        raise SriftError(
            "give exactly one of --model and --profile, or --model-config alone.",
            "use --model NAME for a built-in model (e.g. resnet50), --profile FILE for a profile from `srift profile`, "
            "or --model-config config.json for a Hugging Face decoder LLM.",
        )
    at = precision or "fp32"
    if model_config is not None:
        return hf_config_profile(model_config, precision=at), []
    if model is not None:
        return load_builtin_profile(model, precision=at), []
    return Profile.load(files[0]), [Profile.load(f) for f in files[1:]]


def resolve_cluster(instance: str | None, cluster_file: str | None, region: str = "us-east-1", spot: bool = False) -> Cluster:
    """The cluster of ``--instance SPEC`` (catalog) or ``--cluster FILE``; exactly one.

    Raises:
        SriftError: unless exactly one is given.
    """
    if (instance is None) == (cluster_file is None):
        raise SriftError(
            "give exactly one of --instance and --cluster.",
            "use --instance TYPE[:COUNT][+TYPE[:COUNT]] (e.g. p3.16xlarge:2) or --cluster FILE (a cluster YAML).",
        )
    if instance is not None:
        return cluster_from_spec(instance, region=region, spot=spot)
    # The README's `--cluster configs/clusters/ib-64.yaml` also works outside a checkout: a relative
    # path that is not here but names a shipped example reads the shipped file.
    cluster = load_cluster(bundled(cluster_file) or cluster_file)  # type: ignore[arg-type]
    return cluster.on_spot() if spot else cluster


def model_flops_fn(model: str | None, model_config: str | None = None) -> Callable[[int], float] | None:
    """Training FLOPs per token at a sequence length for MFU, for a decoder LLM of the zoo or a
    Hugging Face config (srift.zoo.llm.model_flops_per_token); None for other models."""
    if model_config is not None:
        return functools.partial(model_flops_per_token, arch_from_hf_config(model_config))
    if model is not None and MODELS[canonical_name(model)].llm:
        return functools.partial(model_flops_per_token, llm_arch(model))
    return None


# ---- predict ------------------------------------------------------------------------------------
def predict(job: Job, model: str | None = None, profiles: Sequence[str] | None = None, instance: str | None = None,
            cluster_file: str | None = None, region: str = "us-east-1", spot: bool = False,
            model_config: str | None = None) -> PredictResult:
    """Predict ``job`` of a model, a Hugging Face config or profile(s) on an instance spec or a cluster file."""
    prof, more = resolve_profiles(model, profiles, model_config, job.precision)
    cluster = resolve_cluster(instance, cluster_file, region=region, spot=spot)
    pred = Predictor(prof, job, more, model_flops_fn(model, model_config)).predict(cluster)
    return PredictResult(pred, prof.name, job.precision or prof.precision, job.optimizer, job.kfac_strategy, spot)


# ---- hand-off -----------------------------------------------------------------------------------
def launch_plan(model: str, prediction: Prediction, instance: str | None = None, cluster_file: str | None = None,
                region: str = "us-east-1", spot: bool = False) -> LaunchPlan:
    """What to start for a predicted configuration (``--instance SPEC`` or ``--cluster FILE``, as
    predicted): its node groups with their catalog rows and per-GPU batches, for a SkyPilot task
    or torchrun lines (srift/report/handoff.py)."""
    cluster = resolve_cluster(instance, cluster_file, region=region, spot=spot)
    shares = prediction.batch_split if len(prediction.batch_split) == len(cluster.node_groups) else None
    groups = tuple(
        LaunchGroup(g.count, g.gpus_per_node, g.gpu, g.spot, shares[i].per_gpu_batch if shares else None,
                    get_instance(g.instance_type, region) if g.instance_type else None)
        for i, g in enumerate(cluster.node_groups))
    return LaunchPlan(model, prediction.cluster, groups, prediction)


def recommended_plan(result: RecommendResult) -> LaunchPlan:
    """The launch plan of the chosen configuration (call only when there is one)."""
    top = result.search.recommendations[0]
    return launch_plan(result.model, top.prediction, top.instance, region=result.region, spot=top.spot)


# ---- recommend ----------------------------------------------------------------------------------
def recommend(job: Job, constraints: Constraints, model: str | None = None, profiles: Sequence[str] | None = None,
              region: str = "us-east-1", model_config: str | None = None) -> RecommendResult:
    """Search the region's catalog for the best configurations of a model, a Hugging Face config or profile(s)."""
    constraints.require_length(job.length)
    prof, more = resolve_profiles(model, profiles, model_config, job.precision)
    predictor = Predictor(prof, job, more, model_flops_fn(model, model_config))
    return RecommendResult(_search(predictor, constraints, region), constraints, job, prof.name, predictor.precision,
                           predictor.ref_batch, (job.seq_len or prof.seq_len) if prof.seq_len else None, region)


def _search(predictor: Predictor, constraints: Constraints, region: str) -> SearchResult:
    job = predictor.job

    def memory_ok(inst: Instance) -> bool:  # with a fixed global batch the per-GPU batch varies: let the simulator judge
        return job.global_batch_size is not None or predictor.could_fit(inst.gpu_memory_gib, constraints.max_gpus)

    return search(load_catalog(region), predictor.predict, constraints, job.length, per_gpu_memory_ok=memory_ok)


def no_fit_error(result: RecommendResult) -> SriftError | None:
    """None when some configuration meets the limits; else the error naming the limit that removed
    the last configurations and the one that came closest."""
    found, c = result.search, result.constraints
    if found.recommendations:
        return None
    near = ""
    closest = found.closest
    if closest is not None:
        near = f" Closest: {closest.label} at {usd(closest.cost_per_hour_usd)}/h"
        if closest.job_hours is not None:
            near += f", {closest.job_hours:,.1f} h, {usd(closest.job_cost_usd)}"
        near += "."
    what = {
        "budget": f"the budget of {usd(c.budget_usd_per_hour)}/h",
        "deadline": f"the deadline of {c.deadline_hours:g} h" if c.deadline_hours else "the deadline",
        "max-cost": f"the maximum cost of {usd(c.max_cost_usd)}" if c.max_cost_usd else "the maximum cost",
        "memory": "GPU memory (the job fits on no GPU at this batch size)",
    }[found.cut_by or "budget"]
    hint = "lower --batch-size, use --precision amp, or allow larger GPUs." if found.cut_by == "memory" else "relax that limit."
    return SriftError(f"no configuration meets {what}.{near}", hint, exit_code=1)


# ---- check --------------------------------------------------------------------------------------
_COMPARED = ("predicted_cost_usd", "predicted_hours", "cost_per_hour_usd")


def check(jobfile: JobFile, compare_to: str | None = None) -> CheckResult:
    """Predict the job of a job file (on its instance, or on what `srift recommend` would choose
    within its limits) and compare it with its limits, and with a baseline result if given.

    Raises:
        SriftError: for a bad baseline, an unpriced instance, or a job that fits no GPU (exit 1).
    """
    base = load_baseline(compare_to) if compare_to else None
    as_of = load_catalog(jobfile.region)[0].as_of
    job = jobfile.job
    profile, more = resolve_profiles(jobfile.model, jobfile.profiles, precision=job.precision)
    assert job.length is not None  # a job file always has one
    predictor = Predictor(profile, job, more, model_flops_fn(jobfile.model))
    if jobfile.instance is not None:
        cluster = resolve_cluster(jobfile.instance, None, region=jobfile.region, spot=jobfile.spot)
        pred, instance, chosen_by = predictor.predict(cluster), jobfile.instance, "job file"
    else:
        found = _search(predictor, Constraints.of_check(jobfile.limits, jobfile.spot), jobfile.region)
        best = found.recommendations[0] if found.recommendations else found.closest
        if best is None:
            raise SriftError("no configuration could be predicted for this job (it fits no GPU at this batch size).",
                             "lower batch_size, or give an instance.", exit_code=1)
        pred, instance = best.prediction, best.instance
        chosen_by = "srift recommend (cheapest under the limits)" if found.recommendations else "closest to the limits"
    cost_h = pred.cost_per_hour_usd
    if cost_h is None:
        raise SriftError(f"'{instance}' has no price in the catalog, so its cost cannot be checked.", "choose a priced instance type.")
    run = pred.job_run(job.length)
    assert run.cost_usd is not None
    limits = check_limits(jobfile.limits, run, cost_h, pred.fits_in_memory)
    config = CheckedConfiguration(instance, jobfile.spot, pred.gpus, chosen_by, pred.global_batch_size, pred.iteration_time_s,
                                  pred.expected_throughput_samples_per_s, pred.bottleneck, jobfile.region,
                                  pred.typical_error_pct, pred.typical_error_basis, plan=pred.plan_label)
    result = CheckResult(all(c.passed for c in limits), run.cost_usd, run.hours, cost_h, config, profile.name,
                         job.precision or profile.precision, run.steps, job.optimizer, limits, as_of)
    return dataclasses.replace(result, change=compare(result, base)) if base is not None else result


def compare(result: CheckResult, base: Mapping[str, Any]) -> dict[str, MetricChange]:
    """Cost, hours and $/h against an earlier result (absolute and %).

    Raises:
        SriftError: when the baseline lacks one of those figures.
    """
    out = {}
    for key in _COMPARED:
        new, old = getattr(result, key), base.get(key)
        if not isinstance(old, (int, float)) or isinstance(old, bool):
            raise SriftError(f"the baseline has no numeric '{key}'.", "pass a JSON file written by `srift check --out-file`.")
        out[key] = MetricChange(old, new, new - old, ((new - old) / old * 100.0) if old else None)
    return out


def load_baseline(path: str) -> dict[str, Any]:
    """Read a JSON result written by `srift check --out-file`.

    Raises:
        SriftError: for a missing file, bad JSON or another document.
    """
    p = Path(path)
    data = read_json(p, "baseline", "pass a JSON file written by `srift check --out-file` on the base branch.")
    if not isinstance(data, dict) or data.get("schema") != CHECK_SCHEMA:
        raise SriftError(f"baseline '{p}' is not a srift check result.", "pass a file written by `srift check --out-file`.")
    return data


# ---- catalog ------------------------------------------------------------------------------------
def catalog_list(gpus: Sequence[str] = (), region: str = "us-east-1") -> list[Instance]:
    """The region's GPU instance types, only those of the named GPUs (names or aliases) if any."""
    wanted = set().union(*(matching_gpus(g) for g in gpus)) if gpus else set()
    return [i for i in load_catalog(region) if not wanted or i.gpu_name in wanted]


def catalog_show(instance_type: str, region: str = "us-east-1") -> tuple[Instance, GpuSpec]:
    """One instance type and its GPU's datasheet."""
    inst = get_instance(instance_type, region)
    return inst, gpu_spec(inst.gpu_name)


def catalog_refresh(region: str = "us-east-1", progress: Callable[[str], None] | None = None) -> list[Instance]:
    """Re-price the region's catalog from AWS (boto3) into the user cache."""
    from srift.catalog.aws import refresh  # boto3: only for this command

    return refresh(region, progress=progress)


# ---- examples -----------------------------------------------------------------------------------
def copy_examples(dest: str = ".", force: bool = False, repo: str | None = None, ref: str | None = None) -> CopiedExamples:
    """Copy the shipped example files (cluster files, CI workflow and job file, training scripts)
    into ``dest``; the workflow is pinned to ``repo`` at ``ref`` when both are given, else to the
    commit srift was installed from when it came from git (srift/examples.py).

    Raises:
        SriftError: for only one of ``repo`` and ``ref``, or ``dest`` a file.
    """
    if (repo is None) != (ref is None):
        raise SriftError("--repo and --ref go together.", "pass both (e.g. --repo https://github.com/you/srift --ref v0.1.0), or neither.")
    return copy_example_files(dest, force, (repo, ref) if repo is not None and ref is not None else None)


# ---- profile and calibrate (torch) --------------------------------------------------------------
def require_torch(command: str) -> None:
    """Raise a clear error when torch, which ``command`` needs, is not installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SriftError(f"`{command}` needs PyTorch, which is not installed.",
                         f"install PyTorch in this environment: pip install torch (the torch extra of {DISTRIBUTION}; "
                         "in a srift checkout: pip install -e '.[torch]').") from None


def profile_model(model: str, batch_size: int | None = None, seq_len: int | None = None, precision: str = "fp32",
                  name: str | None = None, output: str | None = None) -> tuple[Profile, Path]:
    """Write the structural profile of a zoo model (default ``profiles/<name>.yaml``); a decoder LLM's
    is made by arithmetic, without torch."""
    key = canonical_name(model)
    if MODELS[key].llm:
        prof = load_builtin_profile(key, batch_size=batch_size, seq_len=seq_len, precision=precision)
    else:
        require_torch("srift profile")
        from srift.zoo.models import structural_profile  # torch

        prof = structural_profile(key, batch_size=batch_size, seq_len=seq_len, precision=precision)
    if name:
        prof.name = name
    return prof, prof.save(output or f"profiles/{name or key}.yaml")


def profile_script(script: str, args: Sequence[str], warmup: int = 5, iters: int = 20, output: str | None = None,
                   name: str | None = None, batch_size: int | None = None, kfac: bool = False) -> "ProfileResult":
    """Run a training script under the profiler and write its profile (srift/profiling/runner.py)."""
    require_torch("srift profile")
    from srift.profiling.runner import profile_script as run  # torch

    return run(script, list(args), warmup=warmup, iters=iters, output=output, name=name, batch_size=batch_size, kfac=kfac)


def calibrate_comm(backend: str, nproc: int, output: str, sizes: list[int] | None = None, reps: int = 10,
                   network: str = "ethernet") -> dict[str, Any] | None:
    """Measure all-reduce, broadcast, all-gather and reduce-scatter times and write a cluster file (None on torchrun ranks
    other than 0, which write nothing)."""
    require_torch("srift calibrate comm")
    from srift.profiling.calibrate import calibrate  # torch

    return calibrate(backend, nproc, output, sizes, reps, network)
