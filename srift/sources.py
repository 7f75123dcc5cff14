"""Resolve what a user names on the command line or in a job file: a profile and a cluster."""

from __future__ import annotations

from typing import Sequence

from srift.cluster import Cluster, cluster_from_spec, load_cluster
from srift.errors import SriftError
from srift.profile import Profile


def resolve_profile(model: str | None, profile: str | None, model_config: str | None = None) -> Profile:
    """The profile of ``--model NAME`` (shipped, torch-free), ``--profile FILE`` or
    ``--model-config config.json`` (a Hugging Face decoder, analytic); exactly one.

    The profile comes at its own batch and sequence length; the Predictor rescales it.
    """
    if sum(x is not None for x in (model, profile, model_config)) != 1:
        raise SriftError(
            "give exactly one of --model and --profile, or --model-config alone.",
            "use --model NAME for a built-in model (e.g. resnet50), --profile FILE for a profile from `srift profile`, "
            "or --model-config config.json for a Hugging Face decoder LLM.",
        )
    if model_config is not None:
        from srift.zoo.hf_config import hf_config_profile

        return hf_config_profile(model_config)
    if model is not None:
        from srift.zoo import load_builtin_profile

        return load_builtin_profile(model)
    return Profile.load(profile)  # type: ignore[arg-type]


def resolve_profiles(model: str | None, profiles: Sequence[str] | None,
                     model_config: str | None = None) -> tuple[Profile, list[Profile]]:
    """``--model NAME``, ``--model-config config.json``, or ``--profile FILE`` given once or more (the
    same job measured on different GPUs; the Predictor checks that they fit together): the first
    profile and the rest."""
    files = list(profiles or [])
    first = resolve_profile(model, files[0] if files else None, model_config)
    return first, [Profile.load(f) for f in files[1:]]


def resolve_cluster(instance: str | None, cluster_file: str | None, region: str = "us-east-1", spot: bool = False) -> Cluster:
    """The cluster of ``--instance SPEC`` (catalog) or ``--cluster FILE``; exactly one."""
    if (instance is None) == (cluster_file is None):
        raise SriftError(
            "give exactly one of --instance and --cluster.",
            "use --instance TYPE[:COUNT][+TYPE[:COUNT]] (e.g. p3.16xlarge:2) or --cluster FILE (a cluster YAML).",
        )
    if instance is not None:
        return cluster_from_spec(instance, region=region, spot=spot)
    cluster = load_cluster(cluster_file)  # type: ignore[arg-type]
    if spot:
        import dataclasses

        cluster = dataclasses.replace(cluster, node_groups=tuple(dataclasses.replace(g, spot=True) for g in cluster.node_groups))
    return cluster
