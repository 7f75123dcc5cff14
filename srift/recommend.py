"""The pure part of `srift recommend`: from names and limits to a SearchResult."""

from __future__ import annotations

from typing import Sequence

from srift.job import Job
from srift.profile import Profile
from srift.search import Constraints, SearchResult, search


def recommend(profile: Profile, job: Job, constraints: Constraints, region: str = "us-east-1",
              more_profiles: Sequence[Profile] = ()) -> SearchResult:
    """Search the region's catalog for the best configurations of ``profile`` trained as ``job``
    (``more_profiles``: the same job measured on other GPUs; see ``srift.simulate.Predictor``)."""
    from srift.catalog import load_catalog
    from srift.simulate import Predictor
    from srift.simulate.memory import fits

    predictor = Predictor(profile, job, more_profiles)
    per_gpu = sum(predictor.memory(predictor.ref_batch).values())

    def memory_ok(inst) -> bool:  # with a fixed global batch the per-GPU batch varies: let the simulator judge
        return job.global_batch_size is not None or fits(per_gpu, inst.gpu_memory_gib)

    return search(load_catalog(region), predictor.predict, constraints, per_gpu_memory_ok=memory_ok)
