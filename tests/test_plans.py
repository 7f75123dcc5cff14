"""The plans room on its own: which plans a cluster allows, and the choice among them, on a
hand-made cluster view (memory caps set by hand), with llama2-7b's memory computed by hand in
tests/test_sharded.py (fsdp on 8 GPUs: 36.34 GiB; DDP: 22 bytes a parameter)."""

import dataclasses

import pytest

from srift.cache import BoundedCache
from srift.cluster import Cluster, NodeGroup
from srift.job import Job
from srift.simulate.memory import USABLE_FRACTION
from srift.simulate.plans import Candidate, ClusterView, Plans, candidates, plan_choices
from srift.simulate.workload import Workload
from srift.zoo import load_builtin_profile

PARAMS = 6_738_415_616  # llama2-7b (tests/test_sharded.py counts them by hand)
GIB = 2**30
ALL = ("ddp", "zero2", "fsdp", "hsdp")


def _view(nodes: int = 1, gpus: int = 8, gpu: str = "A100-80GB", **changes: object) -> ClusterView:
    group = (NodeGroup(nodes, gpus, gpu, "nvswitch", 400.0, "efa") if gpu != "cpu"
             else NodeGroup(nodes, gpus, gpu, "shared-memory", 0.0, "ethernet"))
    return dataclasses.replace(ClusterView.of(Cluster("test", (group,))), **changes)


def _pars(view: ClusterView, auto: bool = True) -> list[str]:
    return sorted({c.parallelism for c in candidates(ALL, ("none",), view, auto)})


def test_the_cluster_decides_which_parallelisms_auto_may_try():
    assert _pars(_view(nodes=1)) == ["ddp", "fsdp", "zero2"]  # hsdp is fsdp on one node
    assert _pars(_view(nodes=2)) == ["ddp", "fsdp", "hsdp", "zero2"]
    assert _pars(_view(nodes=2, gpus=1)) == ["ddp", "fsdp", "zero2"]  # one GPU a node: nothing to shard within
    assert _pars(_view(nodes=1, gpus=1)) == ["ddp"]  # one GPU: nothing to shard over
    assert _pars(_view(nodes=1, gpus=4, gpu="cpu")) == ["ddp"]  # CPU workers: DDP
    assert _pars(_view(nodes=1), auto=False) == ["ddp", "fsdp", "hsdp", "zero2"]  # asked for: kept


def test_the_shard_width_and_the_memory_caps_of_a_view():
    view = _view(nodes=2, gpus=8)
    assert (view.shard_gpus("ddp"), view.shard_gpus("hsdp"), view.shard_gpus("fsdp"), view.shard_gpus("zero2")) == (1, 8, 16, 16)
    assert view.memory_caps_gib == (80.0,) and not view.cpu_workers
    assert _view(gpu="cpu", gpus=2).memory_caps_gib == (None,)  # CPU workers: no cap


@pytest.fixture(scope="module")
def llama() -> tuple[Workload, Plans]:
    prof = load_builtin_profile("llama2-7b", batch_size=1, seq_len=4096, precision="bf16")
    job = Job(precision="bf16", batch_size=1, seq_len=4096)
    w = Workload(prof, job)
    return w, Plans(w, *plan_choices(job, w.units.blocks, w.base.name))


def _choose(w: Workload, plans: Plans, view: ClusterView, rows: list[Candidate]):
    comps = [w.compute(g, 1) for g in view.gpus_per_group]
    return plans.choose(view, [1] * len(comps), comps, rows)


def test_auto_takes_fsdp_when_ddp_does_not_fit(llama):
    w, plans = llama
    rows = [Candidate("ddp", "none"), Candidate("fsdp", "none")]
    # DDP holds 22 bytes a parameter: 148.2 GB, far above 48 GiB x 0.95 = 45.6 GiB usable; fsdp
    # on 8 GPUs needs 36.34 GiB (by hand, docs/sharded.md), which fits for sure.
    ddp_bytes = sum(w.plan_memory(1, "ddp", "none", 1).values())
    assert ddp_bytes > 22 * PARAMS > 48 * GIB * USABLE_FRACTION
    plan = _choose(w, plans, _view(memory_caps_gib=(48.0,)), rows)
    assert (plan.parallelism, plan.checkpointing) == ("fsdp", "none") and plan.memory.fits
    assert plan.memory.per_gpu_bytes / GIB == pytest.approx(36.34, abs=0.01) and plan.memory.state == "fits"
    # With room for both (200 GiB), the faster of the two, each simulated alone, wins.
    roomy = _view(memory_caps_gib=(200.0,))
    comps = [w.compute("A100-80GB", 1)]
    alone = {r: plans.evaluate(roomy, [1], comps, r, p90=False).iteration_s for r in rows}
    best = _choose(w, plans, roomy, rows)
    assert alone[Candidate(best.parallelism, best.checkpointing)] == pytest.approx(min(alone.values()))


def test_nothing_fits_shows_the_least_memory_plan_marked_not_fitting(llama):
    w, plans = llama
    rows = [Candidate("ddp", "none"), Candidate("fsdp", "none"), Candidate("fsdp", "full")]
    plan = _choose(w, plans, _view(memory_caps_gib=(10.0,)), rows)
    # Full checkpointing keeps one block input per block instead of all activations: least memory.
    assert (plan.parallelism, plan.checkpointing) == ("fsdp", "full") and not plan.memory.fits
    assert plan.memory.per_gpu_bytes == pytest.approx(sum(w.plan_memory(1, "fsdp", "full", 8).values()))
    assert plan.memory.per_gpu_bytes < sum(w.plan_memory(1, "fsdp", "none", 8).values())


def test_one_candidate_is_simulated_as_asked_even_when_it_does_not_fit(llama):
    w, plans = llama
    plan = _choose(w, plans, _view(memory_caps_gib=(48.0,)), [Candidate("ddp", "none")])
    assert plan.parallelism == "ddp" and not plan.memory.fits and plan.p90_s >= plan.iteration_s


def test_the_bounded_cache_starts_over_when_full():
    made = []
    cache: BoundedCache[int, int] = BoundedCache(size=2)
    for k in (1, 2, 1, 3, 1):
        cache.get(k, lambda k=k: made.append(k) or k * 10)
    # 1 and 2 made; 1 a hit; 3 finds the cache full (2 entries) and starts over; 1 is made again.
    assert made == [1, 2, 3, 1] and len(cache) == 2
    with pytest.raises(ValueError):
        BoundedCache(size=0)
