"""What the user names, resolved: a model or profile, an ``--infra`` selection, an instance spec
or cluster file, the precision a job trains at, the notes a price or instance carries.

``srift.api``'s commands call these first; scripts can call them alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from srift.catalog import Instance, catalog_as_of, get_instance, parse_infra, supported
from srift.catalog.provenance import PriceProvenance
from srift.catalog.spec import cluster_from_spec, parse_spec
from srift.catalog.spot import capacity_warning
from srift.cluster import Cluster, load_cluster
from srift.errors import SriftError
from srift.examples import bundled
from srift.hardware import gpus
from srift.job import DEFAULT_INFRA, Precision
from srift.profile import Profile
from srift.results import PriceAge
from srift.zoo import MODELS, canonical_name, llm_arch, load_builtin_profile
from srift.zoo.hf_config import arch_from_hf_config, hf_config_profile
from srift.zoo.llm import DecoderArch, model_flops_per_token

def require_one_source(model: str | None, profiles: Sequence[str] | None, model_config: str | None) -> None:
    """Refuse a job that names its model twice or not at all, before either source is read.

    Raises:
        SriftError: unless exactly one of a model, a model config and profiles is given.
    """
    if sum((model is not None, model_config is not None, bool(profiles))) != 1:
        raise SriftError(
            "give exactly one of --model and --profile, or --model-config alone.",
            "use --model NAME for a built-in model (e.g. resnet50), --profile FILE for a profile from `srift profile`, "
            "or --model-config config.json for a Hugging Face decoder LLM.",
        )


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
    require_one_source(model, files, model_config)
    at = precision or default_precision(model, model_config)
    if model_config is not None:
        return hf_config_profile(model_config, precision=at), []
    if model is not None:
        return load_builtin_profile(model, precision=at), []
    return Profile.load(files[0]), [Profile.load(f) for f in files[1:]]


def is_decoder_llm(model: str | None, model_config: str | None) -> bool:
    """True for a zoo decoder LLM or a Hugging Face decoder config."""
    return model_config is not None or (model is not None and canonical_name(model) in MODELS and MODELS[canonical_name(model)].llm)


def default_precision(model: str | None, model_config: str | None, gpu_names: Sequence[str] = ()) -> Precision:
    """What a job trains at when ``--precision`` is not given: decoder LLMs in bf16 (how they are
    trained) where every GPU named has bf16 tensor cores, else fp16 AMP (``amp``); other models at
    PyTorch's default, fp32."""
    if not is_decoder_llm(model, model_config):
        return "fp32"
    return "bf16" if all(bf16_capable(g) for g in gpu_names) else "amp"


def bf16_capable(gpu_name: str) -> bool:
    """True when the GPU has bf16 tensor cores (a GPU srift has no spec for is not ruled out)."""
    spec = gpus().get(gpu_name)
    return spec is None or spec.has_bf16


def require_bf16(gpu_names: Sequence[str]) -> None:
    """Refuse bf16 on GPUs without bf16 tensor cores (PyTorch would run it at the fp32 rate).

    Raises:
        SriftError: naming the GPUs and the fix, fp16 AMP.
    """
    lacking = sorted({g for g in gpu_names if not bf16_capable(g)})
    if lacking:
        raise SriftError(f"{', '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} no bf16 tensor cores: PyTorch "
                         "runs bf16 there without them, at the fp32 rate.",
                         "use --precision amp (fp16 autocast, which uses their tensor cores), or GPUs with bf16 "
                         "(Ampere and newer: A10G, L4, A100, H100).")


def resolve_infra(infra: str | None, region: str | None, default: str) -> str:
    """The ``--infra`` selection: ``--infra`` as given, ``--region R`` as ``aws/R``, else ``default``.

    Raises:
        SriftError: when both are given.
    """
    if infra is not None and region is not None:
        raise SriftError("give --infra or --region, not both.", f"--region {region} means --infra aws/{region}.")
    if infra is not None:
        parse_infra(infra)  # syntax errors name the flag
        return infra
    if region is not None and "/" in region:  # --region gcp/us-central1: already CLOUD/REGION
        parse_infra(region)
        return region
    return f"aws/{region}" if region is not None else default


def resolve_cluster(instance: str | None, cluster_file: str | None, region: str = DEFAULT_INFRA, spot: bool = False,
                    placement_group: bool | None = None) -> Cluster:
    """The cluster of ``--instance SPEC`` (catalog, in the ``region`` selection: ``--infra``
    spelling; several regions: where each type is cheapest) or ``--cluster FILE``; exactly one
    (``placement_group``: the catalog instances share an EC2 cluster placement group).

    Raises:
        SriftError: unless exactly one is given.
    """
    if (instance is None) == (cluster_file is None):
        raise SriftError(
            "give exactly one of --instance and --cluster.",
            "use --instance TYPE[:COUNT][+TYPE[:COUNT]] (e.g. p3.16xlarge:2) or --cluster FILE (a cluster YAML).",
        )
    if instance is not None:
        return cluster_from_spec(instance, region=region, spot=spot, placement_group=placement_group)
    # The README's `--cluster configs/clusters/ib-64.yaml` also works outside a checkout: a relative
    # path that is not here but names a shipped example reads the shipped file.
    cluster = load_cluster(bundled(cluster_file) or cluster_file)  # type: ignore[arg-type]
    return cluster.on_spot() if spot else cluster


def spec_instances(spec: str, infra: str) -> list[Instance]:
    """The catalog rows an instance spec names (as ``cluster_from_spec`` picks them)."""
    out = []
    for raw in spec.split("+"):
        ((itype, _),) = parse_spec(raw.strip().partition("@")[0])
        out.append(get_instance(itype, infra))
    return out


def price_ages(targets: Sequence[tuple[str, str | None]]) -> dict[str, PriceAge]:
    """How old the prices in use are, per ``--infra`` target (a cloud, or cloud/region)."""
    out: dict[str, PriceAge] = {}
    for cloud, region in targets:
        key = cloud if region is None else f"{cloud}/{region}"
        if key not in out:
            a = catalog_as_of(cloud, region)
            out[key] = PriceAge(key, a.as_of, a.age_days(), a.source, a.undated_rows, a.rows, a.refreshed_regions)
    return out


def hardware_notes(instances: Sequence[Instance]) -> list[str]:
    """What a user must know about the instances' hardware: GPUs the current PyTorch wheels do not
    run on, and arm64 hosts."""
    notes = []
    for inst in {i.instance_type: i for i in instances}.values():
        ok, why = supported(inst)
        if not ok:
            notes.append(f"{inst.instance_type}: {why} srift predicts it anyway; recommend leaves it out unless --include-unsupported")
        if inst.host_arch == "arm64":
            notes.append(f"{inst.instance_type} has an arm64 host (Graviton or Grace): it needs an aarch64 build of PyTorch "
                         "and of every native package the job uses")
    return notes


def price_notes(price: PriceProvenance, cluster: Cluster) -> list[str]:
    """Why a price is estimated or suspect, and the spot capacity warning of large spot groups."""
    notes = [f"~ marks an estimated or suspect price: {'; '.join(price.reasons)}"] if price.marked else []
    notes += [w for g in cluster.node_groups if g.spot and g.instance_type
              for w in [capacity_warning(g.instance_type, g.count)] if w]
    return notes


def model_flops_fn(model: str | None, model_config: str | None = None) -> Callable[[int], float] | None:
    """Training FLOPs per token at a sequence length for MFU, for a decoder LLM of the zoo or a
    Hugging Face config (srift.zoo.llm.model_flops_per_token); None for other models."""
    if model_config is not None:
        return functools.partial(model_flops_per_token, arch_from_hf_config(model_config))
    if model is not None and MODELS[canonical_name(model)].llm:
        return functools.partial(model_flops_per_token, llm_arch(model))
    return None


def model_arch(model: str | None, model_config: str | None = None) -> DecoderArch | None:
    """The architecture of a decoder LLM of the zoo or a Hugging Face config (a ``--layout`` job
    is predicted from it); None for other models."""
    if model_config is not None:
        return arch_from_hf_config(model_config)
    if model is not None and MODELS[canonical_name(model)].llm:
        return llm_arch(model)
    return None
