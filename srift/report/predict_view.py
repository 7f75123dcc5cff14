"""`srift predict`: a table with the iteration's breakdown, or the JSON document."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from srift.bounds import MAX_NOTE_CHARS
from srift.job import DDP, HSDP, INTERLEAVED, KFAC, NO_CHECKPOINTING, gemm_recipe_label
from srift.report.format import console, error_text, gib, price_lines, print_json, save_json, seconds, usd, usd_per_million_tokens
from srift.catalog.provenance import marked_usd
from srift.errors import SriftError
from srift.results import PREDICT_SCHEMA, PredictResult, ages_json
from srift.report.table import Column, print_table
from srift.simulate.breakdown import (BACKWARD, BUBBLE, COMM_INTERFERENCE, DATA, EXPOSED_ALL_GATHER, EXPOSED_COMM, EXPOSED_CP,
                                     EXPOSED_CROSS_NODE_ALLREDUCE, EXPOSED_DP, EXPOSED_EP, EXPOSED_FACTOR_COMM, EXPOSED_PP,
                                     EXPOSED_REDUCE_SCATTER, EXPOSED_TP, FACTOR_COMPUTE, FORWARD, INVERSE_BROADCAST, INVERSION,
                                     KFAC_COMM_INTERFERENCE, OPTIMIZER, OVERHEAD, PRECONDITIONING, RECOMPUTE, Phase)
from srift.simulate.prediction import Prediction
from srift.text import markdown as md

NO_FIT = "DOES NOT FIT"
MAY_NOT_FIT = "MAY NOT FIT"

PHASE_LABELS: dict[Phase, str] = {
    DATA: "data loading",
    FORWARD: "forward",
    BACKWARD: "backward",
    RECOMPUTE: "recompute (activation checkpointing)",
    EXPOSED_COMM: "exposed all-reduce",
    EXPOSED_ALL_GATHER: "exposed all-gather",
    EXPOSED_REDUCE_SCATTER: "exposed reduce-scatter",
    EXPOSED_CROSS_NODE_ALLREDUCE: "exposed cross-node all-reduce",
    COMM_INTERFERENCE: "communication interference",
    EXPOSED_TP: "exposed tensor-parallel collectives",
    EXPOSED_CP: "exposed context-parallel ring",
    EXPOSED_EP: "exposed expert-parallel all-to-all",
    EXPOSED_PP: "exposed pipeline sends",
    BUBBLE: "pipeline bubble",
    EXPOSED_DP: "exposed data-parallel reduction",
    OPTIMIZER: "optimizer step",
    OVERHEAD: "framework overhead",
    FACTOR_COMPUTE: "K-FAC factors",
    EXPOSED_FACTOR_COMM: "K-FAC factor all-reduce (exposed)",
    INVERSION: "K-FAC inversions",
    INVERSE_BROADCAST: "K-FAC inverse broadcast",
    KFAC_COMM_INTERFERENCE: "K-FAC communication interference",
    PRECONDITIONING: "K-FAC preconditioning",
}


def prediction_json(result: PredictResult) -> dict[str, Any]:
    """The JSON document of `srift predict` (schema ``srift.predict/v1``)."""
    out: dict[str, Any] = {"schema": result.schema, "ok": True, "error": None}
    out.update(result.prediction.to_dict())
    out.update({"model": result.model, "precision": result.precision, "optimizer": result.optimizer,
                "spot_pricing": result.spot_pricing, "host_arch": result.host_arch,
                "catalog_as_of": ages_json(result.catalog_as_of), "warnings": price_lines(result.catalog_as_of)[1:],
                "uncertainty": result.uncertainty.to_dict() if result.uncertainty else None,
                **(result.price.to_dict() if result.price is not None else
                   {"price_source": None, "price_estimated": False, "price_suspect": False, "price_notes": []}),
                "network_fallbacks": [{"network": what, "expected_throughput_samples_per_s": p.expected_throughput_samples_per_s}
                                      for what, p in result.network_fallbacks]})
    if result.memory_what_if:
        out["memory_what_if"] = [w.to_dict() for w in result.memory_what_if]
    return out


WHAT_IF_TITLE = "Memory what-if (each change alone, same cluster; saves: against the job as given)"


def what_if_rows(result: PredictResult) -> list[list[str]]:
    """The fine-tuning what-if's rows: change, memory per GPU, saved, fit, tokens/s per GPU."""
    return [[w.change, f"{w.memory_gib:,.1f} GiB", f"{w.saved_gib:+,.1f} GiB", w.fit,
             f"{w.tokens_per_s_per_gpu:,.0f}" if w.tokens_per_s_per_gpu is not None else "-"]
            for w in result.memory_what_if]


PLAN_LABELS = {"zero1": "ZeRO-1 (Megatron distributed optimizer)", "ddp": "DDP", "zero2": "ZeRO-2 (FSDP SHARD_GRAD_OP)", "fsdp": "FSDP (FULL_SHARD)",
               "hsdp": "HSDP (sharded within a node, replicated across nodes)"}
MEMORY_LABELS = {"weights": "parameters", "gathered_weights": "gathered (half-precision) parameters", "gradients": "gradients",
                 "optimizer_state": "optimizer states", "activations": "activations",
                 "allocator": "allocator reserve", "kfac_factors": "K-FAC factors",
                 "dequantized_weight": "one dequantized NF4 weight"}


def title(result: PredictResult) -> str:
    pred = result.prediction
    return (f"{result.model} on {pred.cluster}{' [Spot]' if result.spot_pricing else ''}, {result.precision}"
            + (f" with {gemm_recipe_label(pred.fp8)}" if pred.fp8 else "")
            + (f", MoE dispatcher {pred.moe_dispatcher}" if pred.moe_dispatcher else "")
            + (f", K-FAC ({result.kfac_strategy})" if result.optimizer == KFAC else ""))


def plan_text(pred: Prediction) -> str:
    """``FSDP (FULL_SHARD), selective activation checkpointing, 4 micro-batches``; a layout first:
    ``TP 8 x PP 4 (1F1B) x CP 1 x DP 1, ZeRO-1 ...``."""
    text = PLAN_LABELS.get(pred.parallelism, pred.parallelism)
    if pred.layout:
        lay = pred.layout
        sched = f"interleaved, {lay.vp} virtual stages" if lay.schedule == INTERLEAVED else "1F1B"
        ep = f" (EP {lay.ep} for the experts)" if lay.ep > 1 else ""
        text = f"TP {lay.tp} x PP {lay.pp} ({sched}) x CP {lay.cp} x DP {lay.dp}{ep}, " + text
    if pred.activation_checkpointing != NO_CHECKPOINTING:
        text += f", {pred.activation_checkpointing} activation checkpointing"
    if pred.grad_accum > 1:
        text += f", {pred.grad_accum} micro-batches of {pred.micro_batch_size or '?'}"
    if pred.grad_compression:
        text += f", {pred.grad_compression} gradient compression (DDP communication hook)"
    return text


def summary_rows(result: PredictResult) -> list[tuple[str, str]]:
    """(label, value) lines of the summary, in the order shown; ``DOES NOT FIT`` marks memory."""
    pred = result.prediction
    rows = [
        ("GPUs", f"{pred.gpus}  (global batch {pred.global_batch_size})"),
        ("Parallelism", plan_text(pred)),
        *([("Stack", pred.stack)] if pred.stack else []),
        ("Iteration", f"{seconds(pred.iteration_time_s)}  (p90 {seconds(pred.p90_iteration_time_s)})"),
        ("Throughput", f"{pred.throughput_samples_per_s:,.1f} samples/s"),
    ]
    if pred.throughput_tokens_per_s is not None:
        tokens = f"{pred.throughput_tokens_per_s:,.0f} tokens/s ({pred.tokens_per_s_per_gpu:,.0f} per GPU)"
        if pred.mfu is not None:
            tokens += f", MFU {pred.mfu:.1%}"
        rows.append(("Tokens", tokens))
    rows.append(("Cost", f"{marked_usd(usd(pred.cost_per_hour_usd), result.price)}/h, "
                 f"{marked_usd(usd(pred.usd_per_million_samples), result.price)} per million samples"
                 + (f", {usd(usd_per_million_tokens(pred), 3)} per million tokens" if pred.seq_len else "")))
    mem = (f"{gib(pred.memory_per_gpu_bytes)} per GPU reserved at the peak ({gib(pred.memory_allocated_bytes)} allocated)"
           + ("" if pred.fits_in_memory else f"  {NO_FIT}"))
    if pred.memory_stage is not None:
        mem += f" on pipeline stage {pred.memory_stage}"
    if pred.memory_fit == "may not fit":
        safe = f"; batch {pred.memory_safe_batch} per GPU fits for sure" if pred.memory_safe_batch else ""
        mem += f"  {MAY_NOT_FIT} (within the prediction's typical error of the usable memory{safe})"
    mem += " (" + ", ".join(f"{MEMORY_LABELS.get(k, k)} {gib(v)}" for k, v in pred.memory_breakdown_bytes.items() if v) + ")"
    rows += [("Memory", mem), ("Bottleneck", pred.bottleneck),
             ("Typical error", error_text(pred.typical_error_pct, pred.typical_error_basis))]
    if pred.beyond_validated:
        rows.append(("Validated", "beyond validated: " + ", ".join(pred.beyond_validated)))
    if result.price is not None:
        rows.append(("Price", result.price.source))
    if pred.spot:
        s = pred.spot
        rows.append(("Spot (expected)",
                     f"{s.expected_throughput_samples_per_s:,.1f} samples/s, {usd(s.expected_usd_per_million_samples)} per million "
                     f"({s.interruptions_per_hour:.3f} interruptions/h, {s.useful_fraction:.1%} useful)"))
    if len(pred.batch_split) > 1:
        rows.append(("Batch split", ", ".join(f"{b.group}: {b.per_gpu_batch}/GPU" for b in pred.batch_split)))
    return rows


def breakdown_rows(result: PredictResult) -> list[list[str]]:
    """(phase, time, share) of the iteration, then the total."""
    pred = result.prediction
    rows = [[PHASE_LABELS.get(key, key), seconds(value), f"{value / pred.iteration_time_s:.0%}"]
            for key, value in pred.breakdown.items()]
    return rows + [["total", seconds(pred.iteration_time_s), "100%"]]


def comm_line(result: PredictResult) -> str:
    """How much of the communication compute hides, or "" without any."""
    pred = result.prediction
    total = pred.breakdown.comm_total_s or 0.0
    if total <= 0:
        return ""
    hidden = pred.breakdown.hidden_comm_s / total
    if pred.layout:
        return (f"Tensor-, context-, {'expert-, ' if pred.layout.ep > 1 else ''}pipeline- and "
                f"data-parallel communication {seconds(total)} per iteration, "
                f"{hidden:.0%} of it hidden behind compute.")
    if pred.parallelism == DDP:
        return f"All-reduce {seconds(total)} per iteration, {hidden:.0%} of it hidden behind backward."
    return (f"All-gather and reduce-scatter{' and cross-node all-reduce' if pred.parallelism == HSDP else ''} "
            f"{seconds(total)} per iteration, {hidden:.0%} of it hidden behind compute.")


def render(result: PredictResult) -> None:
    """Print a prediction as a rich table with its breakdown."""
    con = console()
    con.print(f"[bold]{escape(title(result))}[/bold]")  # names come from the user's files: never markup
    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="dim")
    summary.add_column()
    for label, value in summary_rows(result):
        summary.add_row(label, escape(value).replace(NO_FIT, f"[red]{NO_FIT}[/red]")
                        .replace(MAY_NOT_FIT, f"[yellow]{MAY_NOT_FIT}[/yellow]"))
    con.print(summary)
    cells = breakdown_rows(result)
    print_table(con, [Column("phase"), Column("time", "right"), Column("share", "right")], cells, title="Iteration breakdown",
                row_styles=[None] * (len(cells) - 1) + ["bold"])
    if comm_line(result):
        con.print(comm_line(result))
    if result.memory_what_if:
        print_table(con, [Column("change"), Column("memory/GPU", "right"), Column("saves", "right"), Column("fit"),
                          Column("tokens/s/GPU", "right")], what_if_rows(result), title=WHAT_IF_TITLE)
    for note in result.prediction.notes:
        con.print(f"[dim]Note: {escape(note)}[/dim]")
    for line in price_lines(result.catalog_as_of):
        con.print(f"[dim]{escape(line)}[/dim]")


def markdown(result: PredictResult) -> str:
    """The prediction as markdown (a PR comment, a report)."""
    lines = [f"**{md(title(result), MAX_NOTE_CHARS)}**", "", "| | |", "|---|---|"]
    lines += [f"| {label} | {value.replace(NO_FIT, f'**{NO_FIT}**')} |" for label, value in summary_rows(result)]
    lines += ["", "| phase | time | share |", "|---|---:|---:|"]
    lines += ["| " + " | ".join(row) + " |" for row in breakdown_rows(result)]
    if comm_line(result):
        lines += ["", comm_line(result)]
    if result.memory_what_if:
        lines += ["", f"_{WHAT_IF_TITLE}_", "", "| change | memory/GPU | saves | fit | tokens/s/GPU |", "|---|---:|---:|---|---:|"]
        lines += ["| " + " | ".join(md(cell, MAX_NOTE_CHARS) for cell in row) + " |" for row in what_if_rows(result)]
    lines += [f"\n_Note: {md(note, MAX_NOTE_CHARS)}_" for note in result.prediction.notes]
    lines += [f"\n<sub>{' '.join(price_lines(result.catalog_as_of))}</sub>"] if result.catalog_as_of else []
    return "\n".join(lines)


def show_error(failure: SriftError) -> None:
    """The JSON document of a prediction that could not be made: ``ok`` false, with the reason."""
    print_json({"schema": PREDICT_SCHEMA, "ok": False, "error": {"message": failure.message, "hint": failure.hint}})


def show(result: PredictResult, fmt: str, out_file: str | None = None) -> None:
    """Write the JSON document to ``out_file`` if given, and print ``result`` as ``table``,
    ``json`` or ``markdown``."""
    doc = prediction_json(result)
    if out_file:
        save_json(out_file, doc)
    if fmt == "json":
        print_json(doc)
    elif fmt == "markdown":
        print(markdown(result))
    else:
        render(result)
