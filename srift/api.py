"""What each command computes: names and paths in, typed results out, nothing printed.

The commands (srift/commands/) parse their flags, call one function here and hand its result to
one renderer (srift/report/). Scripts and notebooks can call these functions the same way.

Nothing here imports torch at import time: ``profile_*`` and ``calibrate_comm`` import it when
called (``require_torch`` says clearly when it is missing).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from srift.bounds import MAX_BATCH_SIZE, MAX_BUDGET_USD_PER_HOUR, MAX_COST_USD, MAX_DEADLINE_HOURS, require
from srift.catalog import Instance, get_instance, load_catalog, parse_infra
from srift.catalog.provenance import combined, price_provenance
from srift.catalog.spec import efa_fallbacks
from srift.cluster import Cluster
from srift.errors import SriftError
from srift.files import check_name, check_outputs, file_in, output_file, read_json  # noqa: F401 (check_outputs: for the commands)
from srift.hardware import CPU, gpus
from srift.hardware import gpu as gpu_spec
from srift.job import AMP, AUTO, BF16, DDP, DEFAULT_INFRA, FINETUNE_MODES, ZERO1, Fp8Recipe, Job
from srift.perf.fp8 import fp8_unsupported, gemm_peak_flops
from srift.jobfile import JobFile
from srift.profile import Profile
from srift.report.format import usd, with_article
from srift.report.why_figures import miss_clauses
from srift.results import (
    CHECK_SCHEMA,
    CheckedConfiguration,
    CheckResult,
    MetricChange,
    LaunchGroup,
    LaunchPlan,
    PredictResult,
    PriceAge,
    RecommendResult,
)
from srift.search import SweepOptions, search
from srift.search.confidence import at_confidence, uncertainty_of
from srift.search.gpu_range import GpuRange, gpus_floor, layout_gpu_range, needed_flops_per_s
from srift.search.hooks import compression_tip
from srift.search.limits import Constraints, check_limits
from srift.search.large_batch import GlobalBatchLimit, accumulation_choices, default_max_global_batch
from srift.search.rank import SearchResult, objective_key
from srift.search.space import CountFilter
from srift.search.sweep import Progress
from srift.simulate.sequences import sequences_of
from srift.simulate.whatif import memory_what_if, trick_changes, variant
from srift.simulate import Predictor
from srift.simulate.door import data_parallel_options, route, route_note
from srift.simulate.finetune import finetune_optimizer
from srift.simulate.hints import precision_hint
from srift.simulate.layout_prediction import LayoutPredictor, layout_memory_error
from srift.simulate.prediction import Prediction
from srift.simulate.layouts import has_layout
from srift.simulate.memory import USABLE_FRACTION, usable_bytes
from srift.zoo.llm import DecoderArch, default_seq_len, params_count

from srift.resolve import (  # noqa: F401 (what the user names: re-exported for the commands and scripts)
    require_one_source, resolve_profiles, is_decoder_llm, default_precision, bf16_capable, require_bf16, resolve_infra,
    resolve_cluster, spec_instances, price_ages, hardware_notes, price_notes, model_flops_fn, model_arch,
)
from srift.api_tools import (  # noqa: F401 (the catalog, example, profile and completion commands' functions)
    GPU_SORTS, catalog_list, catalog_gpus, catalog_show, catalog_ages, catalog_refresh, copy_examples, require_torch,
    profile_model, profile_script, calibrate_comm, completion_names,
)

# ---- predict ------------------------------------------------------------------------------------
def with_micro_batch(job: Job, micro_batch_size: int | None, gpus: int) -> Job:
    """``job`` with ``--micro-batch-size M`` on ``gpus`` GPUs: M sequences per GPU per micro-batch,
    and with ``--global-batch-size G``, G / (M x GPUs) micro-batches per optimizer step.

    Raises:
        SriftError: for a global batch that is not a multiple of M x GPUs, or M with --batch-size
            or --grad-accum (they say the same thing twice).
    """
    if micro_batch_size is None:
        return job
    require(micro_batch_size, "--micro-batch-size", 1, MAX_BATCH_SIZE, integer=True,
            hint=f"pass --micro-batch-size from 1 to {MAX_BATCH_SIZE:,}.")
    if job.batch_size is not None or job.grad_accum != 1:
        raise SriftError("--micro-batch-size says what --batch-size and --grad-accum say.",
                         "give --micro-batch-size with --global-batch-size, or --batch-size with --grad-accum.")
    g = job.global_batch_size
    if g is None:
        return dataclasses.replace(job, batch_size=micro_batch_size)
    if g % (micro_batch_size * gpus):
        raise SriftError(f"global batch {g:,} is not a multiple of micro-batch {micro_batch_size:,} x {gpus:,} GPUs.",
                         "make --global-batch-size a multiple of --micro-batch-size times the GPUs.")
    return dataclasses.replace(job, batch_size=micro_batch_size, grad_accum=g // (micro_batch_size * gpus))


def predict(job: Job, model: str | None = None, profiles: Sequence[str] | None = None, instance: str | None = None,
            cluster_file: str | None = None, region: str = DEFAULT_INFRA, spot: bool = False,
            model_config: str | None = None, placement_group: bool | None = None) -> PredictResult:
    """Predict ``job`` of a model, a Hugging Face config or profile(s) on an instance spec (in the
    ``region`` selection, ``--infra`` spelling) or a cluster file (a data-parallel job's
    ``--micro-batch-size``: ``with_micro_batch``)."""
    require_one_source(model, profiles, model_config)
    cluster = resolve_cluster(instance, cluster_file, region=region, spot=spot, placement_group=placement_group)
    arch = model_arch(model, model_config)
    routed = route(job, arch, cluster.gpus)  # one simulator per job, whichever way it is spelled
    door_notes, job = route_note(job, routed), routed
    if job.layout is None:
        job = with_micro_batch(dataclasses.replace(job, micro_batch_size=None), job.micro_batch_size, cluster.gpus)
    gpu_names = [g.gpu for g in cluster.node_groups if g.gpu != CPU]
    if job.precision is None and is_decoder_llm(model, model_config):
        job = dataclasses.replace(job, precision=default_precision(model, model_config, gpu_names))
    if job.precision == BF16:  # given, or --finetune's default: refused as recommend refuses it
        require_bf16(gpu_names)
    if job.layout is not None and arch is not None and not profiles:  # the layout simulator alone: no profile
        predictor: Predictor | LayoutPredictor = LayoutPredictor(arch, job, job.seq_len or default_seq_len(arch))
        name, precision = arch.name, str(job.precision)
    else:
        prof, more = resolve_profiles(model, profiles, model_config, job.precision)
        flops = model_flops_fn(model, model_config)
        predictor = Predictor(prof, job, more, flops, arch)
        name, precision = prof.name, job.precision or prof.precision
    pred = predictor.predict(cluster)
    if door_notes:
        pred = dataclasses.replace(pred, notes=[*pred.notes, *door_notes])
    if not pred.fits_in_memory:  # an iteration time for a job that cannot run would mislead
        raise (layout_memory_error(cluster, pred, name) if pred.layout
               else memory_error(cluster, pred, name, lighter_finetune(prof, job, more, flops, cluster)))
    if isinstance(predictor, Predictor) and not pred.layout and gpu_names:  # a likely choice the job left out
        hint = precision_hint(precision, pred, lambda: Predictor(prof, dataclasses.replace(job, precision=AMP), more, flops,
                                                                  arch).predict(cluster))
        pred = dataclasses.replace(pred, notes=[*pred.notes, hint]) if hint else pred
    ages: dict[str, PriceAge] = {}
    host_arch = None
    price = None
    if instance is not None:
        rows = spec_instances(instance, region)
        price = combined(price_provenance(get_instance(g.instance_type, region), g.spot)
                         for g in cluster.node_groups if g.instance_type)
        pred = dataclasses.replace(pred, notes=[*pred.notes, *hardware_notes(rows), *price_notes(price, cluster)])
        ages = price_ages([(r.cloud, r.region) for r in rows])
        host_arch = rows[0].host_arch if len({r.host_arch for r in rows}) == 1 else "mixed"
    optimizer = finetune_optimizer(job) if job.finetune is not None else job.optimizer
    what_if = (memory_what_if(job, pred, lambda j: Predictor(prof, j, more, flops, arch).predict(cluster))
               if job.finetune is not None and isinstance(predictor, Predictor) and not pred.layout else ())
    return PredictResult(pred, name, precision, optimizer, job.kfac_strategy, spot,
                         catalog_as_of=ages, host_arch=host_arch, uncertainty=uncertainty_of(pred, None),
                         network_fallbacks=network_fallbacks(predictor.on_network, cluster), price=price,
                         memory_what_if=what_if)


# ---- hand-off -----------------------------------------------------------------------------------
def network_fallbacks(predict: Callable[[Cluster], Prediction], cluster: Cluster) -> tuple[tuple[str, Prediction], ...]:
    """The cluster's prediction with one EFA interface and without EFA (``efa_fallbacks``), for the
    hand-off to say what a launcher that does not set up every interface gets."""
    return tuple((what, predict(alt)) for what, alt in efa_fallbacks(cluster))


def launch_plan(model: str, prediction: Prediction, instance: str | None = None, cluster_file: str | None = None,
                region: str = DEFAULT_INFRA, spot: bool = False,
                fallbacks: tuple[tuple[str, Prediction], ...] = ()) -> LaunchPlan:
    """What to start for a predicted configuration (``--instance SPEC`` or ``--cluster FILE``, as
    predicted): its node groups with their catalog rows and per-GPU batches, for a SkyPilot task
    or torchrun lines (srift/report/handoff.py)."""
    cluster = resolve_cluster(instance, cluster_file, region=region, spot=spot)
    shares = prediction.batch_split if len(prediction.batch_split) == len(cluster.node_groups) else None
    groups = tuple(
        LaunchGroup(g.count, g.gpus_per_node, g.gpu, g.spot, shares[i].per_gpu_batch if shares else None,
                    get_instance(g.instance_type, region) if g.instance_type else None)
        for i, g in enumerate(cluster.node_groups))
    return LaunchPlan(model, prediction.cluster, groups, prediction, fallbacks)


def recommended_plan(result: RecommendResult) -> LaunchPlan:
    """The launch plan of the chosen configuration (call only when there is one)."""
    top = result.search.recommendations[0]
    return launch_plan(result.model, top.prediction, top.instance, region=top.infra, spot=top.spot,
                       fallbacks=result.network_fallbacks)


def lighter_finetune(prof: Profile, job: Job, more: Sequence[Profile], flops: Callable[[int], float] | None,
                     cluster: Cluster) -> str | None:
    """For a fine-tuning job that does not fit on ``cluster``: the first memory trick it does not
    use (``trick_changes``), else the first lighter mode (full, then LoRA, then QLoRA), that fits
    there, as a hint with its memory; None when none does."""
    if job.finetune is None:
        return None
    lighter: list[tuple[str, dict[str, object]]] = [
        (f"--finetune {m}", {"finetune": m}) for m in FINETUNE_MODES[FINETUNE_MODES.index(job.finetune) + 1:]]
    for flags, fields in trick_changes(job) + lighter:  # the memory tricks first (srift/simulate/whatif.py)
        changed = variant(job, fields)
        if changed is None:
            continue
        pred = Predictor(prof, changed, more, flops).predict(cluster)
        if pred.fits_in_memory:
            rate = (f"{pred.throughput_tokens_per_s:,.0f} tokens/s" if pred.throughput_tokens_per_s
                    else f"{pred.throughput_samples_per_s:,.3g} samples/s")
            return f"{flags} fits ({pred.memory_per_gpu_bytes / 2**30:,.1f} GiB per GPU, {rate})"
    return None


def memory_error(cluster: Cluster, pred: Prediction, model: str, instead: str | None = None) -> SriftError:
    """The error for a job that does not fit: what the most loaded GPU needs under the plan the
    prediction chose, its largest part, and what the smallest GPU short of it has; ``instead``:
    what would fit on the same GPUs (``lighter_finetune``), said first in the hint."""
    need, parts = pred.memory_per_gpu_bytes, pred.memory_breakdown_bytes
    caps = [(g.gpu_memory_gib if g.gpu_memory_gib is not None else gpu_spec(g.gpu).memory_gib, g.gpu)
            for g in cluster.node_groups if g.gpu != CPU]
    cap, gpu = min(caps) if caps else (0.0, "GPU")
    largest = max(parts, key=lambda k: parts[k]) if parts else None
    part = f" ({largest.replace('_', ' ')}: {parts[largest] / 2**30:,.1f} GiB)" if largest else ""
    seq = f" and sequence length {pred.seq_len:,}" if pred.seq_len else ""
    batch = max((b.per_gpu_batch for b in pred.batch_split), default=0)
    at = (f"micro-batches of {pred.micro_batch_size:,} ({pred.grad_accum:,} per step)" if pred.grad_accum > 1 and pred.micro_batch_size
          else f"a per-GPU batch of {batch:,}")
    return SriftError(
        f"{model} does not fit in GPU memory on {cluster.name} with {pred.plan_label}: at {at}{seq} "
        f"the most loaded GPU needs {need / 2**30:,.1f} GiB{part}, and {with_article(gpu)} has {cap:g} GiB "
        f"({USABLE_FRACTION:.0%} of it usable).",
        (f"{instead}; or " if instead else "") + "lower --batch-size (or --seq-len), use --precision bf16 or amp, shard it (--parallelism fsdp, "
        "--activation-checkpointing full), or choose GPUs with more memory (`srift recommend` searches only the "
        "configurations the job fits).")


# ---- recommend ----------------------------------------------------------------------------------
def with_resolved_length(job: Job, prof: Profile) -> Job:
    """The job with its length knowing the sequence length (a ``--tokens`` length needs it)."""
    if job.length is None:
        return job
    seq = (job.seq_len or prof.seq_len) if prof.seq_len else None
    # A --tokens length counts real tokens: a sample holds its mean length (srift/simulate/sequences.py).
    samples = sequences_of(seq, job.mean_seq_len, job.lengths_file, job.packed) if seq else None
    seq = max(1, round(samples.tokens_per_sample)) if samples is not None else seq
    return dataclasses.replace(job, length=job.length.with_seq_len(seq))


def recommend(job: Job, constraints: Constraints, model: str | None = None, profiles: Sequence[str] | None = None,
              infra: str = "aws", model_config: str | None = None, progress: Progress | None = None) -> RecommendResult:
    """Search the catalog of ``infra`` (every AWS region by default) for the best configurations of
    a model, a Hugging Face config or profile(s).

    With a fixed global batch and ``--grad-accum`` left at 1, each of
    ``srift.search.large_batch.accumulation_choices`` is searched and the best chosen
    configuration wins. Without one, the cluster is kept within the largest global batch
    (``constraints.max_global_batch`` or the family default) at the per-GPU batch.

    A decoder LLM's job that names no layout and says nothing of data parallelism
    (``takes_default_layout``) searches layouts (``--layout auto``) at a fixed global batch (the
    family's, unless given), over GPU counts derived from the job when ``--max-gpus`` is not given
    (srift/search/gpu_range.py).
    """
    constraints.require_length(job.length, job.global_batch_size)
    if job.precision is None and is_decoder_llm(model, model_config):
        job = dataclasses.replace(job, precision=default_precision(model, model_config, sorted(constraints.gpus)))
    if job.precision == BF16 and constraints.gpus:
        require_bf16(sorted(constraints.gpus))
    prof, more = resolve_profiles(model, profiles, model_config, job.precision)
    job = with_resolved_length(job, prof)
    arch = model_arch(model, model_config)
    if arch is not None and not profiles and takes_default_layout(job, constraints):
        job = dataclasses.replace(job, layout=AUTO)  # --micro-batch-size is then the layout's
    if job.layout is None and job.micro_batch_size is not None:  # the cluster varies: the per-GPU batch
        job = with_micro_batch(dataclasses.replace(job, micro_batch_size=None, global_batch_size=None),
                               job.micro_batch_size, 1) if job.global_batch_size is None else job
        if job.micro_batch_size is not None:
            raise SriftError("a search without --layout takes --batch-size with --grad-accum, not --micro-batch-size "
                             "with --global-batch-size (the micro-batches per step would change with the GPUs).",
                             "give --batch-size and --grad-accum, or --global-batch-size alone.")
    seq = (job.seq_len or prof.seq_len) if prof.seq_len else None
    limit = (GlobalBatchLimit(constraints.max_global_batch, "--max-global-batch") if constraints.max_global_batch
             else default_max_global_batch(seq))
    flops = model_flops_fn(model, model_config)
    gpu_range: GpuRange | None = None
    batch_defaulted = False
    if job.layout is not None and arch is not None and flops is not None and seq:
        # A layout's data parallelism takes only part of the GPUs: the global batch is fixed (the
        # family's published one unless given), and the cluster bounded by the job, not by it.
        batch_defaulted = job.global_batch_size is None
        job = dataclasses.replace(job, global_batch_size=job.global_batch_size or limit.samples)
        if constraints.auto_max_gpus:
            gpu_range = _layout_gpu_range(arch, flops(seq), seq, job, constraints, infra)
            constraints = dataclasses.replace(constraints, max_gpus=gpu_range.max_gpus)
    best: tuple[Predictor, SearchResult] | None = None
    # A layout searches its own micro-batches: one search, not one per accumulation.
    choices = (job.grad_accum,) if job.layout is not None else accumulation_choices(job.global_batch_size, job.grad_accum)
    if job.optimizer_in_backward:  # stepped in backward: no gradient accumulation (srift/simulate/offload.py)
        choices = (1,)
    for ga in choices:
        predictor = Predictor(prof, dataclasses.replace(job, grad_accum=ga), more, flops, arch)
        c = constraints
        if job.global_batch_size is None:  # keep the global batch within the limit: fewer GPUs
            c = dataclasses.replace(c, max_gpus=max(1, min(c.max_gpus, limit.samples // (predictor.ref_batch * ga))))
        found = _search(predictor, c, infra, progress)
        if best is None or (found.recommendations and (not best[1].recommendations or _better(found, best[1], c))):
            best = (predictor, found)
    assert best is not None
    predictor, found = best
    fallbacks: tuple[tuple[str, Prediction], ...] = ()
    tip = None
    if found.recommendations:
        top = found.recommendations[0]
        chosen = resolve_cluster(top.instance, None, region=top.infra, spot=top.spot)
        fallbacks = network_fallbacks(predictor.predict, chosen)
        tip = compression_tip(lambda j: Predictor(prof, j, more, flops, arch), predictor.job, chosen, top.prediction)
    return RecommendResult(found, constraints, predictor.job, prof.name, predictor.precision, predictor.ref_batch, seq, infra,
                           price_ages([(t.cloud, t.region) for t in parse_infra(infra)]), fallbacks,
                           grad_accum_searched=choices if len(choices) > 1 else (), global_batch_limit=limit,
                           gpu_range=gpu_range, global_batch_defaulted=batch_defaulted,
                           compression_tip=tip)


def takes_default_layout(job: Job, constraints: Constraints) -> bool:
    """Whether recommend searches layouts (``--layout auto``) for a decoder LLM's job that names
    none: unless the job says data parallelism (``--batch-size``, ``--grad-accum``, a sharded
    ``--parallelism`` or an option only data parallelism models), fine-tunes, uses K-FAC, or the
    search mixes node types."""
    return (job.layout is None and job.batch_size is None and job.grad_accum == 1 and job.finetune is None
            and not job.kfac and job.parallelism in (AUTO, ZERO1, DDP) and not constraints.mixed
            and not data_parallel_options(job))


def _search_rows(precision: str, infra: str, fp8: Fp8Recipe | None = None) -> list[Instance]:
    """The catalog rows a search prices (bf16 jobs: GPUs with bf16 tensor cores only; FP8 GEMMs:
    GPUs that run the recipe)."""
    rows = load_catalog(infra)
    if precision == BF16:  # GPUs without bf16 tensor cores would run it at the fp32 rate
        rows = [r for r in rows if bf16_capable(r.gpu_name)]
    if fp8 is not None:
        rows = [r for r in rows if r.gpu_name in gpus() and fp8_unsupported(r.gpu_name, fp8) is None]
    return rows


def _layout_counts(arch: DecoderArch, job: Job, predictor: Predictor, c: Constraints) -> CountFilter:
    """A layout search's ``count_ok``: counts some layout divides at the job's global batch, with
    enough GPUs of the type to hold the training states and meet the deadline at their peak
    (srift.search.gpu_range.gpus_floor: no layout beats it, so nothing that could win is left out)."""
    gb, seq = job.global_batch_size or 1, predictor.seq_len or 1
    length = job.length
    tokens = None if length is None or length.data_samples is None else length.data_samples * seq
    need = (needed_flops_per_s(tokens, predictor.flops_per_token, c.deadline_hours)
            if tokens is not None and c.deadline_hours is not None else None)
    known: dict[int, np.ndarray] = {}  # per GPUs a node, each GPU total's has_layout (-1: not asked yet)
    floors: dict[str, int] = {}

    def floor_of(inst: Instance) -> int:
        spec = gpus().get(inst.gpu_name)
        if spec is None:
            return 0
        # FP8 GEMMs can run above the bf16 peak: the floor takes the FP8 one, a bound no layout beats.
        peak = gemm_peak_flops(spec, job.fp8) if job.fp8 else spec.peak_flops(predictor.precision)
        return gpus_floor(params_count(arch), peak, usable_bytes(inst.gpu_memory_gib), need)

    def mask(inst: Instance, nodes: np.ndarray) -> np.ndarray:  # every hardware asks again for the same counts
        if inst.gpu_name not in floors:
            floors[inst.gpu_name] = floor_of(inst)
        g, total = inst.gpu_count, nodes * inst.gpu_count
        table, top = known.get(g, np.zeros(0, dtype=np.int8)), int(total.max(initial=0))
        if len(table) <= top:
            table = known[g] = np.concatenate([table, np.full(top + 1 - len(table), -1, dtype=np.int8)])
        ok = total >= floors[inst.gpu_name]
        for n in total[ok & (table[total] < 0)].tolist():
            table[n] = has_layout(arch, n, g, seq, gb)
        return ok & (table[total] == 1)

    return CountFilter(mask)


def _layout_gpu_range(arch: DecoderArch, flops_per_token: float, seq_len: int, job: Job, c: Constraints,
                      infra: str) -> GpuRange:
    """The GPU counts a layout search covers (srift/search/gpu_range.py) over the GPUs it prices."""
    specs = {r.gpu_name: (gpus()[r.gpu_name], r.gpu_memory_gib) for r in _search_rows(job.precision or "bf16", infra, job.fp8)
             if r.gpu_name in gpus() and (not c.gpus or r.gpu_name in c.gpus)}
    if not specs:
        return GpuRange(1, c.max_gpus, "the default (no GPU with a datasheet to derive it from)")
    precision = job.precision or "bf16"
    length = job.length
    tokens = None if length is None or length.data_samples is None else length.data_samples * seq_len
    return layout_gpu_range(params_count(arch), flops_per_token, [spec.peak_flops(precision) for spec, _ in specs.values()],
                            [usable_bytes(mem) for _, mem in specs.values()], tokens, c.deadline_hours)


def _better(a: SearchResult, b: SearchResult, c: Constraints) -> bool:
    """True when ``a``'s chosen configuration beats ``b``'s on the objective (at the ranking quantile)."""
    key = objective_key(c.goal, c.ranking_confidence)
    return key(a.recommendations[0]) < key(b.recommendations[0])


def _search(predictor: Predictor, constraints: Constraints, infra: str, progress: Progress | None = None) -> SearchResult:
    job = predictor.job

    def memory_ok(inst: Instance) -> bool:  # with a fixed global batch the per-GPU batch varies: let the simulator judge
        return job.global_batch_size is not None or predictor.could_fit(inst.gpu_memory_gib, constraints.max_gpus)

    count_ok = None
    # A deadline or a maximum cost leaves few counts feasible: the count sweep's bisection finds them
    # with fewer simulations than bounding every count (srift/search/bounded.py) would.
    bounded = constraints.deadline_hours is None and constraints.max_cost_usd is None
    arch = predictor.arch
    if job.layout is not None and arch is not None and job.global_batch_size is not None:
        count_ok = _layout_counts(arch, job, predictor, constraints)

    return search(_search_rows(predictor.precision, infra, job.fp8), predictor.predict, constraints, job.length,
                  per_gpu_memory_ok=memory_ok, global_batch_size=job.global_batch_size, progress=progress,
                  grad_accum=job.grad_accum, count_ok=count_ok,
                  sweep_options=SweepOptions(bound=predictor.throughput_bound if count_ok is not None and bounded else None))


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
        at = closest.at_confidence
        if at is not None:
            near += f", {at.hours:,.1f} h and {usd(at.cost_usd)} at {at.confidence:.0%} confidence"
        near += "."
    what = {
        "budget": f"the budget of {usd(c.budget_usd_per_hour)}/h",
        "deadline": f"the deadline of {c.deadline_hours:g} h" if c.deadline_hours else "the deadline",
        "max-cost": f"the maximum cost of {usd(c.max_cost_usd)}" if c.max_cost_usd else "the maximum cost",
        "memory": "GPU memory (the job fits on no GPU at this batch size)",
        "layout": (f"the GPU counts searched (up to {c.max_gpus:,}: none holds the training states"
                   + (" or meets the deadline at the GPUs' peak" if c.deadline_hours else "")
                   + ", or no layout divides it at this global batch)"),
    }[found.cut_by or "budget"]
    hint = {"memory": "lower --batch-size, use --precision amp, or allow larger GPUs.",
            "layout": "raise --max-gpus, relax the deadline, or change --global-batch-size.",
            "deadline": f"relax that limit, or meet it at a lower --confidence than {c.confidence:g} (0.5: at the median).",
            "max-cost": f"relax that limit, or meet it at a lower --confidence than {c.confidence:g} (0.5: at the median)."
            }.get(found.cut_by or "", "relax that limit.")
    clauses = miss_clauses(found, c)  # which limit binds, and the plan closest to it (srift/search/diagnose.py)
    if len(clauses) > 1:  # two limits: which one binds (one limit binds by itself)
        what = "both limits together: " + "; ".join(clauses)
    return SriftError(f"no configuration meets {what}.{near}", hint, exit_code=1)


# ---- check --------------------------------------------------------------------------------------
_COMPARED = ("predicted_cost_usd", "predicted_hours", "cost_per_hour_usd")
# What a baseline's figures may be (srift/bounds.py): the cost and hours of the largest job srift models.
_BASELINE_BOUNDS = {"predicted_cost_usd": MAX_COST_USD * 1e6, "predicted_hours": MAX_DEADLINE_HOURS * 1e6,
                    "cost_per_hour_usd": MAX_BUDGET_USD_PER_HOUR}


def check(jobfile: JobFile, compare_to: str | None = None, progress: Progress | None = None) -> CheckResult:
    """Predict the job of a job file (on its instance, or on what `srift recommend` would choose
    within its limits: the same search, its defaults included, such as a decoder LLM's layout
    search) and compare it with its limits at the job file's confidence, and with a baseline
    result if given.

    Raises:
        SriftError: for a bad baseline, an unpriced instance, or a job that fits no GPU (exit 1).
    """
    base = load_baseline(compare_to) if compare_to else None
    job = jobfile.job
    profile, more = resolve_profiles(jobfile.model, jobfile.profiles, precision=job.precision)
    job = with_resolved_length(job, profile)
    infra = jobfile.infra
    precision = job.precision or profile.precision
    if jobfile.instance is not None:
        predictor = Predictor(profile, job, more, model_flops_fn(jobfile.model), model_arch(jobfile.model))
        cluster = resolve_cluster(jobfile.instance, None, region=infra, spot=jobfile.spot)
        pred, instance, chosen_by = predictor.predict(cluster), jobfile.instance, "job file"
        rows = spec_instances(jobfile.instance, infra)
        pred = dataclasses.replace(pred, notes=[*pred.notes, *hardware_notes(rows)])
        where = ", ".join(sorted({f"{r.cloud}/{r.region}" for r in rows}))
        ages = price_ages([(r.cloud, r.region) for r in rows])
    else:
        constraints = Constraints.of_check(jobfile.limits, jobfile.spot, jobfile.confidence)
        searched = recommend(job, constraints, model=jobfile.model, profiles=jobfile.profiles, infra=infra, progress=progress)
        found, job, precision = searched.search, searched.job, searched.precision
        best = found.recommendations[0] if found.recommendations else found.closest
        if best is None:
            raise SriftError("no configuration could be predicted for this job (it fits no GPU at this batch size).",
                             "lower batch_size, or give an instance.", exit_code=1)
        pred, instance, where = best.prediction, best.instance, best.infra
        chosen_by = _chosen_by(found.recommendations != [], found.cut_by)
        ages = price_ages([(t.cloud, t.region) for t in parse_infra(infra)])
    cost_h = pred.cost_per_hour_usd
    if cost_h is None:
        raise SriftError(f"'{instance}' has no price in the catalog, so its cost cannot be checked.", "choose a priced instance type.")
    assert job.length is not None  # a job file always has one (recommend keeps it)
    run = pred.job_run(job.length)
    assert run.cost_usd is not None
    at = at_confidence(run.hours, cost_h, uncertainty_of(pred, run.hours), jobfile.confidence)
    limits = check_limits(jobfile.limits, run, at, cost_h, pred.fits_in_memory)
    config = CheckedConfiguration(instance, jobfile.spot, pred.gpus, chosen_by, pred.global_batch_size, pred.iteration_time_s,
                                  pred.expected_throughput_samples_per_s, pred.bottleneck, where,
                                  pred.typical_error_pct, pred.typical_error_basis, tuple(pred.notes), plan=pred.plan_label,
                                  stack=pred.stack)
    result = CheckResult(all(c.passed for c in limits), run.cost_usd, run.hours, cost_h, config, profile.name,
                         precision, run.steps, job.optimizer, limits, ages, at)
    return dataclasses.replace(result, change=compare(result, base)) if base is not None else result


_CHEAPEST = "srift recommend (cheapest under the limits"


def _chosen_by(found: bool, cut_by: str | None) -> str:
    """How `check` without an instance chose: the cheapest within the limits; when the maximum cost
    binds, the cheapest within the others (the same rule, the cost left out); else the plan closest
    to the binding limit (srift/search/diagnose.py)."""
    if found:
        return _CHEAPEST + ")"
    if cut_by == "max-cost":
        return _CHEAPEST + " but the maximum cost, which none meets)"
    return f"closest to the limits ({cut_by} binds)" if cut_by else "closest to the limits"


def _rule(chosen_by: str) -> str:
    """The selection rule of a ``chosen_by``: the cheapest (within all limits, or all but the maximum cost) is one."""
    return "cheapest" if chosen_by.startswith(_CHEAPEST) else chosen_by


def compare(result: CheckResult, base: Mapping[str, Any]) -> dict[str, MetricChange]:
    """Cost, hours and $/h against an earlier result (absolute and %).

    Raises:
        SriftError: when the baseline lacks one of those figures.
    """
    out = {}
    rule = base.get("configuration", {}).get("chosen_by") if isinstance(base.get("configuration"), dict) else None
    # Like with like: a change between configurations chosen by different rules has no percentage.
    same_rule = not isinstance(rule, str) or _rule(rule) == _rule(result.configuration.chosen_by)
    for key in _COMPARED:
        new, old = getattr(result, key), base.get(key)
        if not isinstance(old, (int, float)) or isinstance(old, bool):
            raise SriftError(f"the baseline has no numeric '{key}'.", "pass a JSON file written by `srift check --out-file`.")
        old = float(old)
        pct = (new - old) / old * 100.0 if old > 0 else None
        # A base of a few denormal dollars makes any change "infinite %": no percentage then.
        out[key] = MetricChange(old, new, new - old, pct if same_rule and (pct is None or math.isfinite(pct)) else None, same_rule)
    return out


def load_baseline(path: str) -> dict[str, Any]:
    """Read a JSON result written by `srift check --out-file`, its figures validated like any input.

    Raises:
        SriftError: for a missing file, bad JSON, another document, or a figure that is missing,
            not a number, negative, infinite or beyond what srift models.
    """
    p = Path(path)
    hint = "pass a JSON file written by `srift check --out-file` on the base branch."
    data = read_json(p, "baseline", hint)
    if not isinstance(data, dict) or data.get("schema") != CHECK_SCHEMA:
        raise SriftError(f"baseline '{p}' is not a srift check result.", "pass a file written by `srift check --out-file`.")
    for key, high in _BASELINE_BOUNDS.items():
        if key not in data:
            raise SriftError(f"baseline '{p}' has no '{key}'.", hint)
        require(data[key], f"baseline '{p}': '{key}'", 0, high, hint=hint)
    return data
