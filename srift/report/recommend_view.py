"""`srift recommend`: the ranked table with the sentence on why the top choice wins, as a rich
table, markdown or the JSON document (schema srift.recommend/v1)."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.markup import escape

from srift.bounds import MAX_NOTE_CHARS
from srift.catalog.provenance import ESTIMATE_MARK, marked_usd
from srift.catalog.spot import capacity_warning
from srift.errors import SriftError
from srift.job import ALLTOALL, AUTO, DDP, gemm_recipe_label
from srift.perf.accuracy import node_evidence
from srift.report.format import (console, error_text, price_lines, print_json, save_json, seconds, signed_pct, usd,
                                 usd_per_million_tokens)
from srift.report.table import Column, print_table
from srift.results import RecommendResult, ages_json
from srift.search.confidence import label as q_label
from srift.search.limits import COST, THROUGHPUT, within
from srift.report.why_figures import _tokens, median_clause, miss_clauses, rate_text, ranked_value, versus_chosen, vs_json
from srift.search.dominance import TIE_FRACTION
from srift.search.rank import Candidate, SearchResult
from srift.text import markdown as md


def header(result: RecommendResult) -> str:
    """``resnet50, fp32, batch 64/GPU, 90 epochs of 1,281,167 samples; aws (22 regions)``: what was searched for."""
    job = result.job
    batch = (f"global batch {job.global_batch_size:,}" if job.global_batch_size is not None
             else f"batch {result.batch_size}/GPU")
    text = (f"{result.model}, {result.precision}" + (f" with {gemm_recipe_label(job.fp8)}" if job.fp8 else "")
            + (f", MoE dispatcher {job.moe_dispatcher}" + (" (EP overlap)" if job.moe_ep_overlap else "")
               if job.layout is not None and (job.moe_dispatcher != ALLTOALL or job.moe_ep_overlap) else "")
            + f", {batch}" + (f", seq {result.seq_len}" if result.seq_len else "")
            + (f", K-FAC ({job.kfac_strategy})" if job.kfac else "")
            + (f", {job.finetune_label}" if job.finetune_label else ""))
    if job.length is not None:
        text += f", {job.length.describe()}"
    stacks = sorted({c.prediction.stack for c in result.search.recommendations if c.prediction.stack})
    named = job.stack or ", ".join(stacks)
    if named:
        text += f", stack {named}"
    return text + f"; {where_searched(result)}"


def where_searched(result: RecommendResult) -> str:
    """``aws (every region)``, ``aws/us-west-2``, ``gcp (every region), lambda (every region)``."""
    return ", ".join(k if "/" in k else f"{k} (every region)" for k in result.catalog_as_of) or result.infra


def target_line(result: RecommendResult) -> str:
    c = result.constraints
    limits = []
    if c.budget_usd_per_hour is not None:
        limits.append(f"under {usd(c.budget_usd_per_hour)}/h")
    if c.deadline_hours is not None:
        limits.append(f"within {c.deadline_hours:g} h")
    if c.max_cost_usd is not None:
        limits.append(f"at most {usd(c.max_cost_usd)} per job")
    goal = "maximizing throughput" if result.search.objective == THROUGHPUT else (
        "minimizing job cost" if result.job.length is not None else "minimizing cost per sample")
    text = f"Target: {goal}" + (f" {' and '.join(limits)}" if limits else "")
    if c.deadline_hours is not None or c.max_cost_usd is not None:
        text += f", met at {c.confidence:.0%} confidence"
    elif c.ranking_confidence is not None:
        text += f", ranked at {c.confidence:.0%} confidence"
    return text


def marks(c: Candidate) -> str:
    """`` [arm64]``, `` [unsupported]``: what a reader must know about the hardware."""
    out = ""
    if c.host_arch == "arm64":
        out += " [arm64]"
    if not c.supported:
        out += " [unsupported]"
    if any("not among" not in b for b in c.prediction.beyond_validated):
        out += " [beyond validated]"  # which range: the notes (the table stays narrow)
    return out


def bottleneck_text(c: Candidate) -> str:
    b = c.prediction.bottleneck
    if b == "input" and c.vcpus_per_gpu is not None:
        return f"input ({c.vcpus_per_gpu:g} vCPUs/GPU)"
    return b


def where(c: Candidate) -> str:
    more = len(c.regions) - 1
    return c.infra + (f" (+{more})" if more > 0 else "")


def candidate_json(cand: Candidate, rank: int, result: SearchResult | None = None, constraints: Any = None) -> dict[str, Any]:
    p = cand.prediction
    at = cand.at_confidence
    out: dict[str, Any] = {
        "rank": rank,
        "instance": cand.instance,
        "label": cand.label,
        "cloud": cand.cloud,
        "region": cand.region,
        "regions": list(cand.regions),
        "infra": cand.infra,
        "host_arch": cand.host_arch,
        "supported": cand.supported,
        "market": cand.market.label,
        "spot": cand.spot,
        "gpus": cand.gpus,
        "nodes": cand.nodes,
        "node_evidence": node_evidence(cand.nodes),
        "throughput_samples_per_s": p.throughput_samples_per_s,
        "expected_throughput_samples_per_s": cand.expected_throughput_samples_per_s,
        "iteration_time_s": p.iteration_time_s,
        "p90_iteration_time_s": p.p90_iteration_time_s,
        "cost_per_hour_usd": cand.cost_per_hour_usd,
        "usd_per_million_samples": cand.usd_per_million_samples,
        "job_hours": cand.job_hours,
        "job_cost_usd": cand.job_cost_usd,
        "bottleneck": p.bottleneck,
        "vcpus_per_gpu": cand.vcpus_per_gpu,
        "input_bound": p.bottleneck == "input",
        "fits_in_memory": p.fits_in_memory,
        "global_batch_size": p.global_batch_size,
        "batch_split": [dataclasses.asdict(b) for b in p.batch_split],
        "breakdown": p.breakdown.to_json(),
        "typical_error_pct": p.typical_error_pct,
        "typical_error_basis": p.typical_error_basis,
        "flags": list(cand.flags),
        **(cand.price.to_dict() if cand.price is not None else
           {"price_source": None, "price_estimated": False, "price_suspect": False, "price_notes": []}),
        "parallelism": p.parallelism,
        "stack": p.stack,
        "layout": p.layout.to_dict() if p.layout is not None else None,
        "activation_checkpointing": p.activation_checkpointing,
        "grad_accum": p.grad_accum,
        "memory_per_gpu_bytes": p.memory_per_gpu_bytes,
        "memory_allocated_bytes": p.memory_allocated_bytes,
        "memory_fit": p.memory_fit,
        "memory_safe_batch": p.memory_safe_batch,
        "throughput_tokens_per_s": p.throughput_tokens_per_s,
        "expected_throughput_tokens_per_s": _tokens(cand),
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "mfu": p.mfu,
        "usd_per_million_tokens": usd_per_million_tokens(p),
    }
    rank_q = constraints.ranking_confidence if constraints is not None else None
    out["ranked_at_confidence"] = rank_q
    out["ranking_quantile_factor"] = cand.quantile_factor(rank_q)
    if result is not None:
        out["ranked_objective"] = ranked_value(cand, result.objective, result.confidence)
    if at is not None:
        out.update({"confidence": at.confidence, "job_hours_p50": cand.job_hours, f"job_hours_{at.label}": at.hours,
                    "job_cost_usd_p50": cand.job_cost_usd, f"job_cost_usd_{at.label}": at.cost_usd,
                    "uncertainty": at.uncertainty.to_dict()})
    if constraints is not None and at is not None:
        limits = []
        if constraints.deadline_hours is not None:
            limits.append({"limit": "deadline_hours", "value": constraints.deadline_hours, "predicted": at.hours,
                           "confidence": at.confidence, "met": within(at.hours, constraints.deadline_hours)})
        if constraints.max_cost_usd is not None and at.cost_usd is not None:
            limits.append({"limit": "max_cost_usd", "value": constraints.max_cost_usd, "predicted": at.cost_usd,
                           "confidence": at.confidence, "met": within(at.cost_usd, constraints.max_cost_usd)})
        out["limits"] = limits
    return out


def _metric_word(goal: str) -> str:
    return "faster" if goal == THROUGHPUT else "cheaper"


def why(result: SearchResult) -> str:
    """Why the top choice wins: the simplicity rule when it chose, what the runner-up trades, a
    close call, the best one-node choice behind a multi-node one, an input-bound choice."""
    recs = result.recommendations
    if not recs:
        return ""
    top = recs[0]
    pick = result.simpler_choice
    if pick is not None:
        over, blocker = pick.over, pick.blocker
        at_q = f" at {result.ranked_at:.0%} confidence" if result.ranked_at not in (None, 0.5) else ""  # 0.5: the median
        if blocker is pick.chosen or blocker.instance == pick.chosen.instance:
            text = (f"{top.label} is chosen over {over.label} (runner-up): {over.label} is {pick.edge:.0%} "
                    f"{_metric_word(result.objective)}{at_q} but needs {pick.adds}, and {pick.edge:.0%} is less than their "
                    f"combined typical error (±{pick.error_pct:.0f} %): simpler wins within the error.")
        else:
            text = (f"{top.label} is chosen: {over.label} ranks first but beats the simpler {blocker.label} by only "
                    f"{pick.edge:.0%}, less than their combined typical error (±{pick.error_pct:.0f} %), and {top.label} is "
                    "the best configuration that beats every simpler one by more than their combined error.")
    elif result.objective == THROUGHPUT:
        at_q = f" at {result.confidence:.0%} confidence" if result.best_at_median is not None else ""
        text = (f"{top.label} wins: the highest throughput{at_q} ({rate_text(top)} median) "
                f"that meets the limits, at {marked_usd(usd(top.cost_per_hour_usd), top.price)}/h; it is {top.prediction.bottleneck}-bound.")
    else:
        what = (f"{marked_usd(usd(top.job_cost_usd), top.price)} for the job" if top.job_cost_usd is not None
                else f"{marked_usd(usd(top.usd_per_million_samples), top.price)} per million samples")
        text = f"{top.label} wins: the lowest cost ({what}) that meets the limits; it is {top.prediction.bottleneck}-bound."
    at = top.at_confidence
    if at is not None and (result.confidence is not None):
        text += (f" At {at.confidence:.0%} confidence the job takes {at.hours:,.1f} h and costs {marked_usd(usd(at.cost_usd), top.price)} "
                 f"(median {top.job_hours:,.1f} h).")
    m = result.best_at_median
    if m is not None:
        text += median_clause(result, pick.over if pick is not None else top, m)  # first at the confidence
    if len(recs) > 1 and pick is None:
        ru = recs[1]
        dt, dc = versus_chosen(ru, top)
        text += f" Runner-up {ru.label}: {signed_pct(dt)} throughput for {signed_pct(dc)} $/h."
        close = result.close_call
        if close is not None:
            text += (f" The two are {close.gap:.0%} apart on other GPUs ({', '.join(close.gpus)} against "
                     f"{', '.join(close.runner_up_gpus)}), less than their combined typical error "
                     f"(±{close.error_pct:.1f} %): profile your job on one GPU of each (srift profile) "
                     f"and pass both profiles (--profile A --profile B).")
    one = result.best_single_node
    if one is not None:
        dt, _ = versus_chosen(one, top)
        text += (f" It spans {top.nodes} nodes, the least validated case (typical error below); "
                 f"the best one-node choice is {one.label}: {signed_pct(dt)} throughput at {marked_usd(usd(one.cost_per_hour_usd), one.price)}/h.")
    if top.prediction.bottleneck == "input" and top.vcpus_per_gpu is not None:
        text += (f" Its {top.vcpus_per_gpu:g} vCPUs per GPU cannot prepare the input as fast as its GPUs train: "
                 "an instance with more vCPUs per GPU, or preprocessed data, would be faster.")
    if top.host_arch == "arm64":
        text += " Its host is arm64: the job needs aarch64 builds of PyTorch and its other native packages."
    if top.prediction.memory_fit == "may not fit":
        safe = top.prediction.memory_safe_batch
        text += (f" Its memory ({top.prediction.memory_per_gpu_bytes / 2**30:,.1f} GiB per GPU) is within the prediction's "
                 "typical error of what the GPU can hold: it may not fit"
                 + (f" (a batch of {safe} per GPU fits for sure)." if safe else "."))
    return text + _price_clause(top)


def summary(found: SearchResult) -> str:
    """How much was searched, simulated and left out, and why."""
    labels = {"budget": "over budget", "memory": "out of memory", "unsupported": "on GPUs current PyTorch wheels do not run on",
              "batch": "not dividing the global batch",
              "layout": "that no layout divides, or too few to hold the training states or meet the deadline at "
                        "the GPU's peak", "max_gpus": "larger than --max-gpus or --max-nodes",
              "bound": "shown by the search bound unable to win",
              "cap": f"not simulated: the search stopped at its cap of {found.simulated:,} simulations (MAX_SEARCH_SIMULATIONS, "
                     "docs/limits.md; a smaller --max-gpus or --infra searches fewer)"}
    # Memory's count is said even when 0: a planner that drops runs silently loses trust.
    left = ", ".join(f"{v:,} {labels.get(k, k)}" for k, v in found.pruned.items() if v or k == "memory")
    return (f"{found.considered:,} configurations considered; {found.simulated:,} simulations (one per hardware and node count, "
            f"shared by every region) priced {found.evaluated:,} of them" + (f"; left out: {left}" if left else "") + ".")


def recommend_json(result: RecommendResult, failure: SriftError | None = None) -> dict[str, Any]:
    """The JSON document of `srift recommend` (also when nothing meets the limits: ``ok`` false, with the reason)."""
    found = result.search
    c = result.constraints
    job = result.job
    return {
        "schema": result.schema,
        "ok": failure is None,
        "error": None if failure is None else {"message": failure.message, "hint": failure.hint},
        "target": target_line(result),
        "objective": found.objective,
        "confidence": c.confidence,
        "job": {"model": result.model, "precision": result.precision, "batch_size": result.batch_size,
                "grad_compression": job.grad_compression,
                "global_batch_size": job.global_batch_size, "seq_len": result.seq_len, "fp8": job.fp8,
                "moe_dispatcher": job.moe_dispatcher, "moe_ep_overlap": job.moe_ep_overlap,
                "mtp_layers": job.mtp_layers or 0, "stack": job.stack,
                "length": None if job.length is None else {**{k: v for k, v in dataclasses.asdict(job.length).items() if v is not None},
                                                           "described": job.length.describe()}},
        "infra": result.infra,
        "regions_searched": list(found.regions_searched),
        "catalog_as_of": ages_json(result.catalog_as_of),
        "warnings": price_lines(result.catalog_as_of)[1:],
        "recommendations": [{**candidate_json(x, i + 1, found, c), **({"vs_chosen": vs_json(x, found.recommendations[0])} if i else {})}
                            for i, x in enumerate(found.recommendations)],
        "considered": found.considered,
        "evaluated": found.evaluated,
        "simulated": found.simulated,
        "pruned": found.pruned,
        "pareto_frontier": [{"instance": x.instance, "infra": x.infra, "spot": x.spot, "cost_per_hour_usd": x.cost_per_hour_usd,
                             "expected_throughput_samples_per_s": x.expected_throughput_samples_per_s} for x in found.frontier],
        "why": why(found),
        "grad_accum_searched": list(result.grad_accum_searched),
        "grad_compression_tip": None if result.compression_tip is None else dataclasses.asdict(result.compression_tip),
        "max_global_batch": None if result.global_batch_limit is None else dataclasses.asdict(result.global_batch_limit),
        "gpu_range": None if result.gpu_range is None else dataclasses.asdict(result.gpu_range),
        "notes": _notes(result),
        "simpler_choice": None if found.simpler_choice is None else {
            "chosen": found.simpler_choice.chosen.instance, "over": found.simpler_choice.over.instance,
            "blocker": found.simpler_choice.blocker.instance, "edge": found.simpler_choice.edge,
            "combined_error_pct": found.simpler_choice.error_pct, "adds": found.simpler_choice.adds},
        "best_single_node": {**candidate_json(found.best_single_node, 0), "vs_chosen": vs_json(found.best_single_node, found.recommendations[0])}
        if found.best_single_node and found.recommendations else None,
        "best_at_median": candidate_json(found.best_at_median, 0, found, c) if found.best_at_median is not None else None,
        "close_call": dataclasses.asdict(found.close_call) if found.close_call is not None else None,
        "tie_fraction": TIE_FRACTION,
        "closest": candidate_json(found.closest, 0, found, c) if found.closest is not None and not found.recommendations else None,
        "limits_missed": [m.to_dict() for m in found.misses],
        "binding_limits": [m.limit for m in found.misses if m.binds],
        "model": result.model,
    }


def _rows(result: RecommendResult) -> tuple[list[str], list[list[str]]]:
    recs = result.search.recommendations
    with_job = result.job.length is not None
    q = q_label(result.constraints.confidence)
    batch_col = result.job.global_batch_size is not None or any(len(c.prediction.batch_split) > 1 for c in recs)
    tokens = result.seq_len is not None
    # How each row trains, where there is a choice (a profile with FSDP units, e.g. an LLM).
    plans = any(c.prediction.plan_label != DDP for c in recs)
    # How far the validation reaches at each row's node count, where a row spans several nodes.
    nodes_col = any(c.nodes > 1 for c in recs)
    batch_head = MICRO_BATCHES if recs and all(c.prediction.layout for c in recs) else "batch/GPU"
    head = ["", "configuration", "where", "GPUs"] + (["nodes"] if nodes_col else []) + ([batch_head] if batch_col else []) + (["plan"] if plans else []) + [
        "tokens/s" if tokens else "samples/s", "iteration", "$/h", "$/M tokens" if tokens else "$/M samples"]
    if with_job:
        head += [f"job hours ({q})", f"job $ ({q})"]
    head.append("bottleneck")
    rows = []
    for i, c in enumerate(recs):
        row = ["CHOSEN" if i == 0 else str(i + 1), c.label + marks(c), where(c), str(c.gpus)]
        if nodes_col:
            row.append(node_evidence(c.nodes, short=True))
        if batch_col:
            row.append(batch_cell(c))
        if plans:
            row.append(c.prediction.plan_label)
        rate = _tokens(c)
        row += [f"{rate:,.0f}" if tokens and rate is not None else f"{c.expected_throughput_samples_per_s:,.0f}",
                seconds(c.prediction.iteration_time_s), marked_usd(usd(c.cost_per_hour_usd), c.price),
                marked_usd(usd(usd_per_million_tokens(c.prediction), 3) if tokens else usd(c.usd_per_million_samples, 3), c.price)]
        if with_job:
            at = c.at_confidence
            row += [f"{c.job_hours:,.1f} ({at.hours:,.1f})" if c.job_hours is not None and at is not None else "-",
                    marked_usd(f"{usd(c.job_cost_usd, 0)} ({usd(at.cost_usd, 0)})", c.price) if at is not None else "-"]
        row.append(bottleneck_text(c))
        rows.append(row)
    return head, rows


MICRO_BATCHES = "micro-batch x count"  # a layout row's batch column: sequences per micro-batch x micro-batches per step


def batch_cell(c: Candidate) -> str:
    """A layout's ``2 x 64`` (micro-batch x micro-batches per step, per pipeline), else the batch per GPU."""
    lay = c.prediction.layout
    if lay:
        return f"{lay.micro_batch} x {lay.grad_accum}"
    return "/".join(dict.fromkeys(str(b.per_gpu_batch) for b in c.prediction.batch_split))


def _drop_order(result: RecommendResult) -> dict[str, int]:
    """Columns a narrow terminal loses first: detail before the figures the target is about
    ($ per million samples is the target when minimizing cost without a job length)."""
    per_million = "$/M tokens" if result.seq_len is not None else "$/M samples"
    order = ["iteration", "batch/GPU", MICRO_BATCHES, "bottleneck", per_million, "GPUs", "where", "nodes"]
    if result.search.objective == COST and result.job.length is None:
        order.remove(per_million)
    return {h: i + 1 for i, h in enumerate(order)}


def spot_capacity_lines(cands: list[Candidate]) -> list[str]:
    """The spot capacity warning of each spot group above the stated node count."""
    out = []
    for c in cands:
        for part in c.instance.split("+"):
            itype, _, rest = part.partition(":")
            count, _, market = rest.partition("@")
            if c.spot and market != "on-demand":
                line = capacity_warning(itype, int(count or 1))
                if line:
                    out.append(line)
    return out


def price_legend(cands: list[Candidate]) -> list[str]:
    """The legend of the ``~`` mark, with why each marked price shown is estimated or suspect."""
    reasons = list(dict.fromkeys(r for c in cands if c.price is not None and c.price.marked for r in c.price.reasons))
    if not reasons:
        return []
    return [f"{ESTIMATE_MARK} marks an estimated or suspect price; check it before renting: " + "; ".join(reasons) + "."]


def _price_clause(c: Candidate) -> str:
    """`` Its price is estimated (...)``: said in the why-sentence when the chosen price is marked,
    or when it is a spot price from an undated snapshot (spot is a market: it moves)."""
    if c.price is not None and c.spot and not c.price.marked and "undated" in c.price.source:
        return (f" Its spot price ({usd(c.cost_per_hour_usd)}/h) is from an {c.price.source}: spot prices move, so "
                "check today's before renting.")
    if c.price is None or not c.price.marked:
        return ""
    kind = " and ".join(k for k, on in (("estimated", c.price.estimated), ("suspect", c.price.suspect)) if on)
    return f" Its price ({ESTIMATE_MARK}{usd(c.cost_per_hour_usd)}/h) is {kind}: {'; '.join(c.price.reasons)}."


def layout_search_line(result: RecommendResult) -> str:
    """What a layout search of a decoder LLM covered: its global batch and its GPU counts."""
    job, limit, r = result.job, result.global_batch_limit, result.gpu_range
    auto = "searched (--layout auto, the default for decoder LLMs)" if job.layout == AUTO else f"--layout {job.layout}"
    gb = job.global_batch_size or 0
    batch = (f"global batch {gb:,} sequences ({limit.basis}; --global-batch-size fixes it)"
             if result.global_batch_defaulted and limit is not None else f"global batch {gb:,}")
    counts = (f"clusters of up to {r.max_gpus:,} GPUs (at least {r.min_gpus:,} to hold the model"
              f"{' and meet the deadline' if result.constraints.deadline_hours else ''}: {r.basis})" if r is not None
              else f"clusters of up to {result.constraints.max_gpus:,} GPUs")
    return f"Layouts {auto}: {batch}; {counts}."


def batch_lines(result: RecommendResult) -> list[str]:
    """What was searched about the global batch: the accumulation choices within a fixed one, and
    the largest global batch the search kept to (or a fixed one beyond it)."""
    job, limit, out = result.job, result.global_batch_limit, []
    if job.layout is not None:
        out.append(layout_search_line(result))
    if result.grad_accum_searched:
        out.append(f"Gradient accumulation searched within the fixed global batch of {job.global_batch_size:,}: "
                   f"{', '.join(map(str, result.grad_accum_searched))} micro-batches per step; chosen: {job.grad_accum} "
                   "(--grad-accum N fixes it).")
    if limit is None:
        return out
    gb = job.global_batch_size
    if result.global_batch_defaulted:
        return out
    if gb is not None and gb > limit.samples:
        out.append(f"Warning: a global batch of {gb:,} is beyond {limit.samples:,} ({limit.basis}): statistical efficiency "
                   "falls there, so more samples reach the same accuracy; srift's throughput does not count that loss.")
    elif gb is None:
        most = limit.samples // (result.batch_size * job.grad_accum)
        if most < result.constraints.max_gpus:
            out.append(f"Global batch kept at most {limit.samples:,} ({limit.basis}): beyond it statistical efficiency "
                       f"falls; at {result.batch_size * job.grad_accum:,} per GPU that is at most {most:,} GPUs "
                       "(--max-global-batch to change).")
    return out


def _notes(result: RecommendResult) -> list[str]:
    found = result.search
    out = batch_lines(result)
    if found.recommendations:
        top = found.recommendations[0]
        p = top.prediction
        out.append(f"Typical error of the chosen prediction: {error_text(p.typical_error_pct, p.typical_error_basis)}.")
        if result.compression_tip is not None:
            out.append(result.compression_tip.line())
        beyond = [f"{c.label} ({', '.join(c.prediction.beyond_validated)})" for c in found.recommendations
                  if c.prediction.beyond_validated]
        if beyond:
            out.append(f"Beyond validated (a size or count beyond widens the typical error; srift/perf/coverage.py): "
                       f"{'; '.join(beyond)}.")
        if top.at_confidence is not None:
            u = top.at_confidence.uncertainty
            out.append(f"Job hours at {top.at_confidence.confidence:.0%} confidence: the median x exp(z·σ), "
                       f"σ = {u.sigma:.3f} (model error {u.model:.3f}, run-to-run spread {u.spread:.3f}, spot {u.spot:.3f}; "
                       "srift/search/confidence.py).")
        out += price_legend(found.recommendations)
        out += spot_capacity_lines(found.recommendations[:1])
        shown, asked = len(found.recommendations), result.constraints.top
        if shown < asked:
            out.append(f"{shown} row{'s' if shown != 1 else ''}, not {asked}: the rows are the best of each instance family, and "
                       f"only {found.families} famil{'y' if found.families == 1 else 'ies'} meet the limits.")
    out += price_lines(result.catalog_as_of)
    out.append(summary(found))
    return out


def render(result: RecommendResult) -> None:
    """Print the header, the target, the ranked table, why the top choice wins, and the notes."""
    found = result.search
    con = console()
    con.print(escape(header(result)))  # the model's name comes from the user's files
    con.print(f"[bold]{target_line(result)}[/bold]")
    head, rows = _rows(result)
    drop = _drop_order(result)
    print_table(con, [Column(h, "left" if h in ("", "configuration", "where", "nodes", "plan", "bottleneck") else "right", drop.get(h))
                      for h in head],
                [[escape(cell) for cell in row] for row in rows],
                row_styles=["bold green" if i == 0 else None for i in range(len(rows))])
    con.print(why(found))
    for line in _notes(result):
        con.print(f"[dim]{escape(line)}[/dim]", highlight=False)


def markdown(result: RecommendResult) -> str:
    head, rows = _rows(result)
    lines = [f"**{md(header(result), MAX_NOTE_CHARS)}**", "", target_line(result), "",
             "| " + " | ".join(h or "rank" for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", why(result.search), ""] + _notes(result)
    return "\n".join(lines)


def show(result: RecommendResult, fmt: str, out_file: str | None = None, failure: SriftError | None = None) -> None:
    """Write the JSON document to ``out_file`` if given, and print ``result`` as ``table``,
    ``json`` or ``markdown`` (``failure``: why nothing was chosen; the JSON document carries it)."""
    if out_file:
        save_json(out_file, recommend_json(result, failure))
    if failure is not None and fmt != "json":
        return  # the command prints the error line
    if fmt == "json":
        print_json(recommend_json(result, failure))
    elif fmt == "markdown":
        print(markdown(result))
    else:
        render(result)
