"""Resolve what a user names on the command line or in a job file: a profile and a cluster."""

from __future__ import annotations

from typing import Sequence

from srift.catalog.spec import cluster_from_spec
from srift.cluster import Cluster, load_cluster
from srift.errors import SriftError
from srift.profile import Profile


def resolve_profile(model: str | None, profile: str | None) -> Profile:
    """The profile of ``--model NAME`` (shipped, torch-free) or ``--profile FILE``; exactly one.

    The profile comes at its own batch and sequence length; the Predictor rescales it.
    """
    if (model is None) == (profile is None):
        raise SriftError(
            "give exactly one of --model and --profile.",
            "use --model NAME for a built-in model (e.g. resnet50) or --profile FILE for a profile from `srift profile`.",
        )
    if model is not None:
        from srift.zoo import load_builtin_profile

        return load_builtin_profile(model)
    return Profile.load(profile)  # type: ignore[arg-type]


def resolve_profiles(model: str | None, profiles: Sequence[str] | None) -> tuple[Profile, list[Profile]]:
    """``--model NAME``, or ``--profile FILE`` given once or more (the same job measured on
    different GPUs; the Predictor checks that they fit together): the first profile and the rest."""
    files = list(profiles or [])
    first = resolve_profile(model, files[0] if files else None)
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
