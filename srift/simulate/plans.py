"""The plans room: how the job runs on a cluster (DDP or sharded), which plan ``auto`` picks, and
whether it fits in memory.

A plan is a ``Candidate`` (parallelism, activation checkpointing). ``candidates`` lists those the
job may use on a cluster; ``Plans.choose`` simulates them and keeps the fastest that fits (cheapest
lower bound first: compute, recompute and optimizer, no communication; it stops once no remaining
candidate can win); when nothing fits it shows the plan that needs least memory, marked as not
fitting. Further layouts (tensor, pipeline, context, expert) are more candidates in the list.

Plans read a ``ClusterView``, what they need of a cluster computed once per prediction (the comm
model, CPU workers, each node group's memory cap, the shard width), and the cluster-independent
numbers of a ``Workload`` (srift/simulate/workload.py). The math is in ddp.py and sharded.py.

DDP: iteration = data + forward + backward + exposed communication + communication interference
+ optimizer + overhead (+ K-FAC phases); with gradient accumulation the first ``grad_accum - 1``
micro-batches run without the all-reduce (``no_sync``). Interference: on GPUs, each second of
all-reduce hidden behind backward still costs ``overlap_interference`` seconds
(configs/perf/comm.json), scaled across nodes by the share of the all-reduce the GPUs spend moving
data (the rest is network wait). Every bucket's all-reduce waits for the slowest worker. Spread:
the p90 uses the communication model's p90 and a compute spread (the measured coefficient of
variation, or 3 % for a structural profile) at z = Z90.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from srift.cluster import Cluster
from srift.errors import SriftError
from srift.hardware import CPU, gpu as gpu_spec
from srift.job import AUTO, CHECKPOINTING, DDP, HSDP, NO_CHECKPOINTING, PARALLELISMS, Job
from srift.perf.comm import CommModel
from srift.simulate.breakdown import (BACKWARD, COMM_INTERFERENCE, DATA, EXPOSED_COMM, FORWARD, HSDP_PHASES, OPTIMIZER,
                                     OVERHEAD, RECOMPUTE, SHARDED_EXPOSED, SHARDED_PHASES, Breakdown, Phase, ddp_phases)
from srift.simulate.ddp import comm_end_s
from srift.simulate.kfac import KfacPlan, plan_kfac
from srift.simulate.memory import FIT_STATES, fit_state, fits
from srift.simulate.sharded import StepTimes
from srift.simulate.workload import Workload, _Compute
from srift.perf.quantiles import Z90


@dataclass(frozen=True)
class ClusterView:
    """What the plans need of a cluster, computed once per prediction.

    Attributes:
        cluster: The cluster (K-FAC's plan reads it whole).
        comm: Its communication model.
        gpus_per_group: The GPU of each node group (``CPU`` for CPU workers).
        memory_caps_gib: Each node group's memory per GPU; None for CPU workers (no cap).
        cpu_workers: Some node group is CPU workers (gloo on the compute's cores).
        gpus: GPUs (workers) in all.
        nodes: Nodes in all.
        gpus_per_node: The most GPUs a node of the cluster has (hsdp's shard width).
        even_nodes: Every node has the same number of GPUs, more than one (hsdp can run).
    """

    cluster: Cluster
    comm: CommModel
    gpus_per_group: tuple[str, ...]
    memory_caps_gib: tuple[float | None, ...]
    cpu_workers: bool
    gpus: int
    nodes: int
    gpus_per_node: int
    even_nodes: bool

    @classmethod
    def of(cls, cluster: Cluster, comm: CommModel | None = None) -> ClusterView:
        """The view of ``cluster`` (its comm model: ``CommModel.for_cluster`` unless given)."""
        groups = cluster.node_groups
        per_node = {g.gpus_per_node for g in groups}
        return cls(
            cluster=cluster,
            comm=comm if comm is not None else CommModel.for_cluster(cluster),
            gpus_per_group=tuple(g.gpu for g in groups),
            memory_caps_gib=tuple(None if g.gpu == CPU else (g.gpu_memory_gib if g.gpu_memory_gib is not None
                                                             else gpu_spec(g.gpu).memory_gib) for g in groups),
            cpu_workers=cluster.cpu_workers,
            gpus=cluster.gpus,
            nodes=cluster.nodes,
            gpus_per_node=max(per_node),
            even_nodes=len(per_node) == 1 and min(per_node) > 1,
        )

    def shard_gpus(self, parallelism: str) -> int:
        """GPUs the states are sharded over: all of them, one node's under hsdp, 1 under ddp."""
        if parallelism == DDP:
            return 1
        if parallelism == HSDP:
            return self.gpus_per_node
        return self.gpus


class Candidate(NamedTuple):
    """One way of running the job: a row of the plan search (a tuple: cheap to make per cluster)."""

    parallelism: str
    checkpointing: str


@dataclass(frozen=True)
class AllReduce:
    """The gradient all-reduce of one iteration, in seconds."""

    exposed_s: float
    exposed_p90_s: float
    interference_s: float
    interference_p90_s: float
    total_s: float


@dataclass(frozen=True)
class MemoryFit:
    """Whether every GPU holds its share under a plan, and the most loaded GPU's memory."""

    fits: bool
    per_gpu_bytes: float
    breakdown_bytes: dict[str, float]
    state: str = "fits"  # srift.simulate.memory.fit_state of the most constrained GPU


@dataclass(frozen=True)
class PlanFigures:
    """What every simulated plan states, whichever simulator priced it (``Plan`` here, the
    ``PricedPlan`` that srift.simulate.assemble builds a Prediction from).

    Attributes:
        parallelism, checkpointing: The plan (Prediction's ``parallelism``,
            ``activation_checkpointing``).
        breakdown: Seconds per phase of one iteration (they add up to it), and the communication
            in all, exposed or not.
        p90_s: The iteration's p90 (0 when not asked for).
        comm_cost_s: Exposed communication and interference (the bottleneck test).
        memory: The most loaded GPU's memory and the fit.
    """

    parallelism: str
    checkpointing: str
    breakdown: Breakdown
    p90_s: float
    comm_cost_s: float
    memory: MemoryFit


@dataclass(frozen=True)
class Plan(PlanFigures):
    """One way of running the job on a cluster, simulated by the data-parallel step (the fields
    of ``PlanFigures``, then the K-FAC plan of a K-FAC job)."""

    kfac: KfacPlan | None

    @property
    def iteration_s(self) -> float:
        return self.breakdown.total_s


def plan_choices(job: Job, blocks: int, profile_name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The parallelisms and checkpointing policies a job may use (``auto`` widens them), for a
    profile of ``blocks`` FSDP units.

    Raises:
        SriftError: for activation checkpointing of a profile without FSDP units.
    """
    if job.activation_checkpointing not in (AUTO, NO_CHECKPOINTING) and blocks == 0:
        raise SriftError(
            f"profile '{profile_name}' has no FSDP units (transformer blocks), so there is nothing to checkpoint.",
            "drop --activation-checkpointing, or profile the job with its FSDP wrapping (the zoo's LLMs have units).")
    if job.kfac:
        return ("ddp",), ("none",) if job.activation_checkpointing == AUTO else (job.activation_checkpointing,)
    if job.parallelism != AUTO:
        pars: tuple[str, ...] = (job.parallelism,)
    else:
        pars = PARALLELISMS if blocks else ("ddp",)
    if job.activation_checkpointing != AUTO:
        ckpts: tuple[str, ...] = (job.activation_checkpointing,)
    else:
        ckpts = CHECKPOINTING if blocks else ("none",)
    return pars, ckpts


def candidates(parallelisms: Sequence[str], checkpointings: Sequence[str], view: ClusterView,
               parallelism_auto: bool) -> list[Candidate]:
    """The plans a job may run on a cluster, in search order. Under ``auto`` parallelism
    (``parallelism_auto``) with more than one plan: DDP alone on one GPU or CPU workers (nothing
    to shard over; DDP is what srift measures on CPUs), and no hsdp unless the cluster has several
    nodes of the same number (> 1) of GPUs (hsdp = fsdp on one node)."""
    pars = tuple(parallelisms)
    if len(pars) * len(checkpointings) > 1 and parallelism_auto:
        if view.gpus == 1 or view.cpu_workers:
            pars = ("ddp",)
        elif view.nodes == 1 or not view.even_nodes:
            pars = tuple(p for p in pars if p != HSDP)
    return [Candidate(p, c) for p in pars for c in checkpointings]


class Plans:
    """Plan evaluation and choice for one workload (see module docstring).

    Args:
        workload: The cluster-independent numbers of the profile and job.
        parallelisms, checkpointings: What the job may use (``plan_choices``).
    """

    def __init__(self, workload: Workload, parallelisms: tuple[str, ...], checkpointings: tuple[str, ...]) -> None:
        self.w = workload
        self.parallelisms, self.checkpointings = parallelisms, checkpointings

    def candidates(self, view: ClusterView) -> list[Candidate]:
        """The job's plans on ``view`` (``candidates``)."""
        return candidates(self.parallelisms, self.checkpointings, view, self.w.job.parallelism == AUTO)

    def could_fit(self, gpu_memory_gib: float, max_gpus: int) -> bool:
        """Whether the job fits on GPUs of ``gpu_memory_gib`` at some cluster size up to
        ``max_gpus`` (the search's pre-check per instance type): at the reference batch, with the
        plan that needs least memory, its states sharded over ``max_gpus``."""
        w = self.w
        if self.parallelisms == (DDP,) and w.units.blocks == 0 and w.frozen is None:
            return fits(sum(w.memory(w.ref_batch).values()), gpu_memory_gib)
        n = max(1, max_gpus)
        return any(fits(sum(w.plan_memory(w.ref_batch, p, c, n, n > 1).values()), gpu_memory_gib)
                   for p in self.parallelisms for c in self.checkpointings)

    # ---- plans -------------------------------------------------------------------------------
    def choose(self, view: ClusterView, batches: list[int], comps: list[_Compute],
               plans: Sequence[Candidate]) -> Plan:
        """The plan the job runs with: the only candidate, or the fastest that fits (see the
        module docstring)."""
        if len(plans) == 1:
            return self.evaluate(view, batches, comps, plans[0], p90=True)
        fitting: list[tuple[float, str, str]] = []
        unsure: list[tuple[float, str, str]] = []
        for cand in plans:
            mem = self.memory_fit(view, batches, cand)
            if mem.fits:  # plans that fit for sure first; those that may not fit when none does
                (fitting if mem.state == "fits" else unsure).append(
                    (self.lower_bound_s(view, comps, batches, cand), cand.parallelism, cand.checkpointing))
        fitting = fitting or unsure
        if not fitting:
            # Nothing fits: show the plan that needs least memory, marked as not fitting.
            least = min(plans, key=lambda c: self.memory_fit(view, batches, c).per_gpu_bytes)
            return self.evaluate(view, batches, comps, least, p90=True)
        fitting.sort()
        best: tuple[float, str, str] | None = None
        for bound, p, c in fitting:
            if best is not None and bound >= best[0]:
                break
            t = self.evaluate(view, batches, comps, Candidate(p, c), p90=False).iteration_s
            if best is None or t < best[0]:
                best = (t, p, c)
        assert best is not None
        return self.evaluate(view, batches, comps, Candidate(best[1], best[2]), p90=True)

    def lower_bound_s(self, view: ClusterView, comps: list[_Compute], batches: list[int], plan: Candidate) -> float:
        """No plan runs faster than its compute, recompute and optimizer step."""
        if plan.parallelism == DDP:
            c = max(comps, key=lambda c: c.compute_end_s)
            return self.w.job.grad_accum * c.compute_end_s + c.times.optimizer_s
        fwd, bwd, rec = self.w.unit_times(view.gpus_per_group, batches, plan.checkpointing)
        opt = max(c.times.optimizer_s for c in comps) / view.shard_gpus(plan.parallelism)
        return self.w.job.grad_accum * (sum(fwd) + sum(bwd)) + opt

    def evaluate(self, view: ClusterView, batches: list[int], comps: list[_Compute], plan: Candidate,
                 p90: bool) -> Plan:
        """Simulate one plan (its p90 too when ``p90``; DDP's always has it)."""
        if plan.parallelism == DDP:
            return self.ddp(view, batches, comps, plan.checkpointing)
        return self.sharded(view, batches, comps, plan.parallelism, plan.checkpointing, p90)

    def memory_fit(self, view: ClusterView, batches: list[int], plan: Candidate) -> MemoryFit:
        """Whether every GPU holds its share under a plan, and the most loaded GPU's memory."""
        shard = view.shard_gpus(plan.parallelism)
        most, most_breakdown, worst = 0.0, {}, 0
        for cap, b in zip(view.memory_caps_gib, batches):
            m = self.w.plan_memory(b, plan.parallelism, plan.checkpointing, shard, view.gpus > 1)
            total = sum(m.values())
            if cap is not None:
                worst = max(worst, FIT_STATES.index(fit_state(total, cap)))
            if total > most:
                most, most_breakdown = total, m
        return MemoryFit(FIT_STATES[worst] != "does not fit", most, most_breakdown, FIT_STATES[worst])

    def safe_batch(self, view: ClusterView, batches: list[int], plan: Candidate) -> int | None:
        """The largest per-GPU micro-batch (up to the plan's) that fits for sure on every GPU under
        the plan (memory grows with the batch: bisection), or None when even 1 does not."""
        shard = view.shard_gpus(plan.parallelism)
        caps = [cap for cap in view.memory_caps_gib if cap is not None]

        def sure(b: int) -> bool:
            m = sum(self.w.plan_memory(b, plan.parallelism, plan.checkpointing, shard, view.gpus > 1).values())
            return all(fit_state(m, cap) == "fits" for cap in caps)

        lo, hi = 0, max(batches)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sure(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo or None

    # ---- DDP ---------------------------------------------------------------------------------
    def ddp(self, view: ClusterView, batches: list[int], comps: list[_Compute], checkpointing: str) -> Plan:
        """DDP: bucketed all-reduce overlapping backward (srift/simulate/ddp.py), K-FAC's phases."""
        w, comm = self.w, view.comm
        slowest = max(range(len(comps)), key=lambda i: comps[i].compute_end_s)
        crit = comps[slowest]
        compute_end = crit.compute_end_s
        ar = self.communication(view, comps, compute_end)
        off = w.offload_times(view.gpus_per_group[slowest], batches[slowest], (DDP, checkpointing, 1),
                              crit.forward_s, compute_end - crit.forward_s)
        optimizer = max(c.times.optimizer_s for c in comps) if off.optimizer_s is None else off.optimizer_s
        overhead = max(c.times.overhead_s for c in comps)
        # Gradient accumulation: the first grad_accum - 1 micro-batches run without the
        # all-reduce (no_sync), the last one as a plain iteration.
        accum = w.job.grad_accum
        recompute = 0.0
        if checkpointing != NO_CHECKPOINTING:
            _, _, rec = w.unit_times(view.gpus_per_group, batches, checkpointing)
            recompute = accum * sum(rec)
        seconds: dict[Phase, float] = {
            DATA: 0.0,  # the loader: added in predict()
            FORWARD: (crit.forward_s + off.forward_s) * accum,
            BACKWARD: (compute_end - crit.forward_s + off.backward_s) * accum,
            EXPOSED_COMM: ar.exposed_s,
            COMM_INTERFERENCE: ar.interference_s,
            OPTIMIZER: optimizer,
            OVERHEAD: overhead * accum,
        }
        if recompute:
            seconds[RECOMPUTE] = recompute
        kfac = None
        if w.job.kfac:
            prof = w.profile_at(batches[slowest], w.source_for(view.gpus_per_group[slowest]))
            kfac = plan_kfac(prof, view.cluster, w.job, crit.times, comm, w.layout, inverse_method=w.job.kfac_inverse_method)
            seconds.update(kfac.phases.as_dict())
        breakdown = Breakdown.of(ddp_phases(bool(recompute), kfac is not None), seconds, ar.total_s)
        p90 = ((compute_end * (1.0 + Z90 * w.compute_cv) + off.forward_s + off.backward_s) * accum + ar.exposed_p90_s
               + ar.interference_p90_s + optimizer + overhead * accum
               + (kfac.phases_p90.total_s if kfac is not None else 0.0) + recompute)
        return Plan("ddp", checkpointing, breakdown, p90, ar.exposed_s + ar.interference_s,
                    self.memory_fit(view, batches, Candidate("ddp", checkpointing)), kfac)

    def communication(self, view: ClusterView, comps: list[_Compute], compute_end: float) -> AllReduce:
        """The gradient all-reduce's exposed time and interference at the median and the p90."""
        comm = view.comm
        ready = comps[0].ready_rel_s
        for c in comps[1:]:
            ready = np.maximum(ready, c.ready_rel_s)  # a bucket waits for its slowest worker
        # A communication hook's kernels run in the bucket's turn, before and after its all-reduces.
        hook = max((self.w.hook_s(g) for g in set(view.gpus_per_group)), key=lambda h: float(h.sum()))
        ar50 = self.w.allreduce_s(comm, 0.5) + hook
        ar90 = self.w.allreduce_s(comm, 0.9) + hook
        if view.cpu_workers:
            # CPU workers: gloo's all-reduce runs on the same cores as the compute, so it takes
            # its time from the iteration instead of hiding behind backward.
            return AllReduce(float(ar50.sum()), float(ar90.sum()), 0.0, 0.0, float(ar50.sum()))
        exposed50 = max(0.0, comm_end_s(ready, ar50) - compute_end)
        exposed90 = max(0.0, comm_end_s(ready, ar90) - compute_end)
        # The all-reduce hidden behind backward still slows it (shared SMs and memory).
        k = comm.params.overlap_interference * self.w.gpu_side(comm)
        return AllReduce(exposed50, exposed90, k * max(0.0, float(ar50.sum()) - exposed50),
                         k * max(0.0, float(ar90.sum()) - exposed90), float(ar50.sum()))

    # ---- sharded -----------------------------------------------------------------------------
    def sharded(self, view: ClusterView, batches: list[int], comps: list[_Compute], parallelism: str,
                checkpointing: str, p90: bool) -> Plan:
        """ZeRO-2, FSDP or HSDP: the units' collectives scheduled beside compute (sharded.py)."""
        w, comm = self.w, view.comm
        fwd, bwd, rec = w.unit_times(view.gpus_per_group, batches, checkpointing)
        cpu = view.cpu_workers
        hardware = tuple(zip(view.gpus_per_group, batches))

        def step(quantile: float) -> StepTimes:
            return w.step(comm, parallelism, checkpointing, quantile, hardware, fwd, bwd, cpu)

        s50 = step(0.5)
        accum = w.job.grad_accum
        recompute = sum(rec)
        slowest = max(range(len(comps)), key=lambda i: comps[i].compute_end_s)
        off = w.offload_times(view.gpus_per_group[slowest], batches[slowest],
                              (parallelism, checkpointing, view.shard_gpus(parallelism)), sum(fwd), sum(bwd))
        optimizer = (max(c.times.optimizer_s for c in comps) / view.shard_gpus(parallelism) if off.optimizer_s is None
                     else off.optimizer_s)
        overhead = max(c.times.overhead_s for c in comps)
        k = 0.0 if cpu else comm.params.overlap_interference * w.sharded_gpu_side(comm)
        declared = HSDP_PHASES if parallelism == HSDP else SHARDED_PHASES
        seconds: dict[Phase, float] = {
            DATA: 0.0,  # the loader: added in predict()
            FORWARD: (sum(fwd) + off.forward_s) * accum,
            BACKWARD: (sum(bwd) - recompute + off.backward_s) * accum,
            RECOMPUTE: recompute * accum,
            **{key: value * accum for key, value in zip(SHARDED_EXPOSED, s50.exposed_s) if key in declared},
            COMM_INTERFERENCE: k * s50.hidden_s * accum,
            OPTIMIZER: optimizer,
            OVERHEAD: overhead * accum,
        }
        breakdown = Breakdown.of(declared, seconds, sum(s50.comm_s) * accum)
        exposed = sum(s50.exposed_s) * accum
        p90_s = 0.0
        if p90:
            s90 = step(0.9)
            p90_s = (accum * (overhead + s90.end_s + s90.compute_s * Z90 * w.compute_cv + k * s90.hidden_s
                              + off.forward_s + off.backward_s)
                     + optimizer)
        return Plan(parallelism, checkpointing, breakdown, p90_s, exposed + breakdown[COMM_INTERFERENCE],
                    self.memory_fit(view, batches, Candidate(parallelism, checkpointing)), None)
