"""The catalog, example, profiling and completion commands' functions (``srift.api`` re-exports
them): names and paths in, typed results out, nothing printed. ``profile_*`` and
``calibrate_comm`` import torch when called (``require_torch``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srift import DISTRIBUTION
from srift.bounds import DEFAULT_PROFILE_TIMEOUT_S
from srift.catalog import Instance, get_instance, load_catalog, parse_infra, supported
from srift.errors import SriftError
from srift.examples import CopiedExamples
from srift.examples import copy_examples as copy_example_files
from srift.files import check_name, file_in, output_file
from srift.hardware import GpuSpec, matching_gpus
from srift.hardware import gpu as gpu_spec
from srift.job import DEFAULT_INFRA, Job, require_precision
from srift.profile import Profile
from srift.results import (
    GpuOffers,
    PriceAge,
)
from srift.zoo import MODELS, canonical_name, load_builtin_profile

if TYPE_CHECKING:
    from srift.profiling.runner import ProfileResult

from srift.resolve import price_ages


# ---- catalog ------------------------------------------------------------------------------------
def catalog_list(gpus: Sequence[str] = (), infra: str = DEFAULT_INFRA) -> list[Instance]:
    """The GPU instance types of the selection, only those of the named GPUs (names or aliases) if any."""
    wanted = set().union(*(matching_gpus(g) for g in gpus)) if gpus else set()
    return [i for i in load_catalog(infra) if not wanted or i.gpu_name in wanted]


GPU_SORTS = ("name", "price", "memory")


def catalog_gpus(infra: str = "aws,gcp,lambda,azure", gpus: Sequence[str] = (), sort: str = "name") -> list[GpuOffers]:
    """One entry per GPU type of the selection, as SkyPilot's ``sky gpus list``: memory, the
    instance types that have it, and per cloud the cheapest on-demand and spot $ per GPU-hour
    (and where).

    Raises:
        SriftError: for an unknown sort key.
    """
    if sort not in GPU_SORTS:
        raise SriftError(f"unknown sort '{sort}'.", f"use --sort {' or --sort '.join(GPU_SORTS)}.")
    by_gpu: dict[str, list[Instance]] = {}
    for inst in catalog_list(gpus, infra):
        by_gpu.setdefault(inst.gpu_name, []).append(inst)
    out = []
    for name, rows in by_gpu.items():
        clouds: dict[str, dict[str, tuple[float, str] | None]] = {}
        for cloud in dict.fromkeys(r.cloud for r in rows):
            mine = [r for r in rows if r.cloud == cloud]
            clouds[cloud] = {market: _cheapest_per_gpu(mine, market == "spot") for market in ("on_demand", "spot")}
        out.append(GpuOffers(name, max(r.gpu_memory_gib for r in rows), tuple(sorted({r.instance_type for r in rows})),
                             tuple(sorted({r.gpu_count for r in rows})), clouds, all(supported(r)[0] for r in rows)))
    if sort == "price":
        out.sort(key=lambda g: (g.cheapest_usd_per_gpu_hour is None, g.cheapest_usd_per_gpu_hour or 0.0, g.gpu))
    elif sort == "memory":
        out.sort(key=lambda g: (-g.memory_gib, g.gpu))
    else:
        out.sort(key=lambda g: g.gpu.lower())
    return out


def _cheapest_per_gpu(rows: Sequence[Instance], spot: bool) -> tuple[float, str] | None:
    """(cheapest $ per GPU-hour, where: ``instance_type in region``) on a market, or None."""
    priced = [(p / r.gpu_count, f"{r.instance_type} in {r.region}") for r in rows if (p := r.usd_per_hour(spot)) is not None]
    return min(priced) if priced else None


def catalog_show(instance_type: str, region: str = DEFAULT_INFRA) -> tuple[Instance, GpuSpec]:
    """One instance type and its GPU's datasheet."""
    inst = get_instance(instance_type, region)
    return inst, gpu_spec(inst.gpu_name)


def catalog_ages(infra: str) -> dict[str, PriceAge]:
    """How old the prices of an ``--infra`` selection are, per target."""
    return price_ages([(t.cloud, t.region) for t in parse_infra(infra)])


def catalog_refresh(infra: str = "aws", progress: Callable[[str], None] | None = None) -> list[Instance]:
    """Re-price the clouds of ``infra`` into the user cache: AWS from its public price list and Spot
    Advisor (spot history with credentials), GCP, Lambda and Azure from SkyPilot's published
    catalogs. A cloud that cannot be reached keeps the catalog in use."""
    from srift.catalog.aws import refresh as refresh_aws  # boto3: only for this command
    from srift.catalog.skypilot_prices import refresh as refresh_skypilot

    targets = parse_infra(infra)
    rows: list[Instance] = []
    for cloud in dict.fromkeys(t.cloud for t in targets):
        mine = [t for t in targets if t.cloud == cloud]
        regions = None if any(t.region is None for t in mine) else [str(t.region) for t in mine]
        if cloud == "aws":
            rows += refresh_aws(",".join(f"aws/{r}" for r in regions) if regions else "aws", progress=progress)
        else:
            rows += refresh_skypilot(cloud, regions, progress=progress)
    return rows


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
                  name: str | None = None, output: str | None = None, overwrite: bool = False) -> tuple[Profile, Path]:
    """Write the structural profile of a zoo model (default ``profiles/<name>.yaml``, never over an
    existing file unless ``overwrite``); a decoder LLM's is made by arithmetic, without torch."""
    key = canonical_name(model)
    if name is not None:
        check_name(name)
    Job(batch_size=batch_size, seq_len=seq_len, precision=require_precision(precision))  # the bounds, before any work
    out = output_file(output or file_in("profiles", name or key, ".yaml"), "profile", overwrite,
                      "pass --force to replace it, or choose another --name or -o.")
    if MODELS[key].llm:
        prof = load_builtin_profile(key, batch_size=batch_size, seq_len=seq_len, precision=precision)
    else:
        require_torch("srift profile")
        from srift.zoo.models import structural_profile  # torch

        prof = structural_profile(key, batch_size=batch_size, seq_len=seq_len, precision=precision)
    if name:
        prof.name = name
    try:
        return prof, prof.save(out, overwrite=overwrite)
    except FileExistsError:
        raise SriftError(f"profile '{out}' already exists; srift does not replace it unasked.",
                         "pass --force to replace it, or choose another --name or -o.") from None


def profile_script(script: str, args: Sequence[str], warmup: int = 5, iters: int = 20, output: str | None = None,
                   name: str | None = None, batch_size: int | None = None, kfac: bool = False,
                   timeout_s: float = DEFAULT_PROFILE_TIMEOUT_S, overwrite: bool = False) -> "ProfileResult":
    """Run a training script under the profiler and write its profile (srift/profiling/runner.py):
    bounded by ``timeout_s`` per optimizer step, never over an existing file unless ``overwrite``."""
    require_torch("srift profile")
    from srift.profiling.runner import profile_script as run  # torch

    return run(script, list(args), warmup=warmup, iters=iters, output=output, name=name, batch_size=batch_size, kfac=kfac,
               timeout_s=timeout_s, overwrite=overwrite)


def calibrate_comm(backend: str, nproc: int, output: str, sizes: list[int] | None = None, reps: int = 10,
                   network: str = "ethernet") -> dict[str, Any] | None:
    """Measure all-reduce, broadcast, all-gather and reduce-scatter times and write a cluster file (None on torchrun ranks
    other than 0, which write nothing)."""
    require_torch("srift calibrate comm")
    from srift.profiling.calibrate import calibrate  # torch

    return calibrate(backend, nproc, output, sizes, reps, network)


# ---- shell completion ---------------------------------------------------------------------------
def completion_names(kind: str) -> list[str]:
    """What shell completion offers: ``models`` (built-in), ``instances`` (every cloud's instance
    types) or ``targets`` (clouds, and cloud/region for every region with prices)."""
    from srift.catalog.instances import CLOUDS
    from srift.catalog.load import regions
    from srift.zoo import MODEL_NAMES

    if kind == "models":
        return list(MODEL_NAMES)
    if kind == "instances":
        return sorted({r.instance_type for r in load_catalog(",".join(CLOUDS))})
    return list(CLOUDS) + [f"{c}/{r}" for c in CLOUDS for r in regions(c)]
