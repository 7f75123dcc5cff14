"""`srift recommend`: the ranked table with the sentence on why the top choice wins, as a rich
table, markdown or the JSON document."""

from __future__ import annotations

import dataclasses
from typing import Any

from srift.report.format import console, error_text, print_json, save_json, seconds, usd, usd_per_million_tokens
from srift.report.table import Column, print_table
from srift.results import RecommendResult
from srift.search.rank import Candidate, SearchResult


def header(result: RecommendResult) -> str:
    """``resnet50, fp32, batch 64/GPU, us-east-1``: what was searched for."""
    job = result.job
    return (f"{result.model}, {result.precision}, batch {result.batch_size}/GPU"
            + (f", seq {result.seq_len}" if result.seq_len else "")
            + (f", K-FAC ({job.kfac_strategy})" if job.kfac else "") + f", {result.region}")


def target_line(result: RecommendResult) -> str:
    c = result.constraints
    limits = []
    if c.budget_usd_per_hour is not None:
        limits.append(f"under {usd(c.budget_usd_per_hour)}/h")
    if c.deadline_hours is not None:
        limits.append(f"within {c.deadline_hours:g} h")
    if c.max_cost_usd is not None:
        limits.append(f"at most {usd(c.max_cost_usd)} per job")
    goal = "maximizing throughput" if result.search.objective == "throughput" else (
        "minimizing job cost" if result.job.length is not None else "minimizing cost per sample")
    return f"Target: {goal}" + (f" {' and '.join(limits)}" if limits else "")


def _tokens(cand: Candidate) -> float | None:
    """Expected tokens/s of a sequence model's candidate, else None."""
    return cand.prediction.expected_throughput_tokens_per_s


def rate_text(cand: Candidate) -> str:
    """``3,855 samples/s`` or, for a sequence model, ``102,669 tokens/s``."""
    tokens = _tokens(cand)
    return f"{tokens:,.0f} tokens/s" if tokens is not None else f"{cand.expected_throughput_samples_per_s:,.0f} samples/s"


def candidate_json(cand: Candidate, rank: int) -> dict[str, Any]:
    p = cand.prediction
    return {
        "rank": rank,
        "instance": cand.instance,
        "spot": cand.spot,
        "gpus": cand.gpus,
        "throughput_samples_per_s": p.throughput_samples_per_s,
        "expected_throughput_samples_per_s": cand.expected_throughput_samples_per_s,
        "iteration_time_s": p.iteration_time_s,
        "p90_iteration_time_s": p.p90_iteration_time_s,
        "cost_per_hour_usd": cand.cost_per_hour_usd,
        "usd_per_million_samples": cand.usd_per_million_samples,
        "job_hours": cand.job_hours,
        "job_cost_usd": cand.job_cost_usd,
        "bottleneck": p.bottleneck,
        "fits_in_memory": p.fits_in_memory,
        "global_batch_size": p.global_batch_size,
        "batch_split": [dataclasses.asdict(b) for b in p.batch_split],
        "breakdown": p.breakdown,
        "typical_error_pct": p.typical_error_pct,
        "typical_error_basis": p.typical_error_basis,
        "parallelism": p.parallelism,
        "activation_checkpointing": p.activation_checkpointing,
        "grad_accum": p.grad_accum,
        "memory_per_gpu_bytes": p.memory_per_gpu_bytes,
        "throughput_tokens_per_s": p.throughput_tokens_per_s,
        "expected_throughput_tokens_per_s": _tokens(cand),
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "mfu": p.mfu,
        "usd_per_million_tokens": usd_per_million_tokens(p),
    }


def why(result: SearchResult) -> str:
    """One or two sentences on why the top choice wins and what the runner-up trades."""
    recs = result.recommendations
    if not recs:
        return ""
    top = recs[0]
    if result.objective == "throughput":
        text = (f"{top.label} wins: the highest throughput ({rate_text(top)}) "
                f"of the {result.evaluated:,} configurations that meet the limits, at {usd(top.cost_per_hour_usd)}/h; "
                f"it is {top.prediction.bottleneck}-bound.")
    else:
        what = f"{usd(top.job_cost_usd)} for the job" if top.job_cost_usd is not None else f"{usd(top.usd_per_million_samples)} per million samples"
        text = f"{top.label} wins: the lowest cost ({what}) that meets the limits; it is {top.prediction.bottleneck}-bound."
    if len(recs) > 1:
        ru = recs[1]
        dt = ru.expected_throughput_samples_per_s / top.expected_throughput_samples_per_s - 1
        dc = ru.cost_per_hour_usd / top.cost_per_hour_usd - 1
        text += f" Runner-up {ru.label}: {dt:+.0%} throughput for {dc:+.0%} $/h."
        close = result.close_call
        if close is not None:
            text += (f" The two are {close.gap:.0%} apart on other GPUs ({', '.join(close.gpus)} against "
                     f"{', '.join(close.runner_up_gpus)}), less than the compute model's typical error across GPUs "
                     f"(±{close.error_pct:.1f} %): profile your job on one GPU of each (srift profile) "
                     f"and pass both profiles (--profile A --profile B).")
    one = result.best_single_node
    if one is not None:
        dt = one.expected_throughput_samples_per_s / top.expected_throughput_samples_per_s - 1
        text += (f" It spans {top.nodes} nodes, the least validated case (typical error below); "
                 f"the best one-node choice is {one.label}: {dt:+.0%} throughput at {usd(one.cost_per_hour_usd)}/h.")
    return text


def recommend_json(result: RecommendResult) -> dict[str, Any]:
    """The JSON document of `srift recommend`."""
    found = result.search
    return {
        "target": target_line(result),
        "objective": found.objective,
        "recommendations": [candidate_json(c, i + 1) for i, c in enumerate(found.recommendations)],
        "considered": found.considered,
        "evaluated": found.evaluated,
        "pareto_frontier": [{"instance": c.instance, "spot": c.spot, "cost_per_hour_usd": c.cost_per_hour_usd,
                             "expected_throughput_samples_per_s": c.expected_throughput_samples_per_s} for c in found.frontier],
        "why": why(found),
        "best_single_node": candidate_json(found.best_single_node, 0) if found.best_single_node else None,
        "model": result.model,
        "region": result.region,
    }


def _rows(result: RecommendResult) -> tuple[list[str], list[list[str]]]:
    with_job = result.job.length is not None
    recs = result.search.recommendations
    tokens = result.seq_len is not None
    # How each row trains, where there is a choice (a profile with FSDP units, e.g. an LLM).
    plans = any(c.prediction.plan_label != "ddp" for c in recs)
    head = ["", "configuration", "GPUs"] + (["plan"] if plans else []) + [
        "tokens/s" if tokens else "samples/s", "iteration", "$/h", "$/M tokens" if tokens else "$/M samples"]
    if with_job:
        head += ["job hours", "job $"]
    head.append("bottleneck")
    rows = []
    for i, c in enumerate(recs):
        rate = f"{_tokens(c):,.0f}" if tokens else f"{c.expected_throughput_samples_per_s:,.0f}"
        cost = usd(usd_per_million_tokens(c.prediction), 3) if tokens else usd(c.usd_per_million_samples, 3)
        row = ["CHOSEN" if i == 0 else str(i + 1), c.label, str(c.gpus)] + ([c.prediction.plan_label] if plans else []) + [
               rate, seconds(c.prediction.iteration_time_s), usd(c.cost_per_hour_usd), cost]
        if with_job:
            row += [f"{c.job_hours:,.2f}" if c.job_hours is not None else "-", usd(c.job_cost_usd)]
        row.append(c.prediction.bottleneck)
        rows.append(row)
    return head, rows


def _drop_order(result: RecommendResult) -> dict[str, int]:
    """Columns a narrow terminal loses first: detail before the figures the target is about
    ($ per million samples is the target when minimizing cost without a job length)."""
    per_million = "$/M tokens" if result.seq_len is not None else "$/M samples"
    order = ["iteration", "bottleneck", per_million, "GPUs"]
    if result.search.objective == "cost" and result.job.length is None:
        order.remove(per_million)
    return {h: i + 1 for i, h in enumerate(order)}


def render(result: RecommendResult) -> None:
    """Print the header, the target, the ranked table and why the top choice wins."""
    found = result.search
    con = console()
    con.print(header(result))
    con.print(f"[bold]{target_line(result)}[/bold]")
    head, rows = _rows(result)
    print_table(con, [Column(h, "left" if h in ("", "configuration", "plan", "bottleneck") else "right", _drop_order(result).get(h))
                      for h in head],
                rows, row_styles=["bold green" if i == 0 else None for i in range(len(rows))])
    con.print(why(found))
    if found.recommendations:
        top = found.recommendations[0].prediction
        con.print(f"[dim]Typical error of the chosen prediction: {error_text(top.typical_error_pct, top.typical_error_basis)}.[/dim]")
    con.print(f"[dim]{found.considered:,} configurations considered, {found.evaluated:,} simulated "
              f"({found.pruned.get('budget', 0):,} over budget, {found.pruned.get('memory', 0):,} out of memory pruned first).[/dim]")


def markdown(result: RecommendResult) -> str:
    head, rows = _rows(result)
    lines = [f"**{header(result)}**", "", target_line(result), "",
             "| " + " | ".join(h or "rank" for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", why(result.search), "", f"{result.search.considered:,} configurations considered, {result.search.evaluated:,} simulated."]
    return "\n".join(lines)


def show(result: RecommendResult, fmt: str, out_file: str | None = None) -> None:
    """Write the JSON document to ``out_file`` if given, and print ``result`` as ``table``,
    ``json`` or ``markdown``."""
    if out_file:
        save_json(out_file, recommend_json(result))
    if fmt == "json":
        print_json(recommend_json(result))
    elif fmt == "markdown":
        print(markdown(result))
    else:
        render(result)
