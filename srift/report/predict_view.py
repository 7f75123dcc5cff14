"""`srift predict`: a table with the iteration's breakdown, or the JSON document."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from srift.results import PredictResult
from srift.report.format import console, error_text, gib, print_json, seconds, usd, usd_per_million_tokens
from srift.simulate.prediction import Prediction

PHASE_LABELS = {
    "data": "data loading",
    "forward": "forward",
    "backward": "backward",
    "recompute": "recompute (activation checkpointing)",
    "exposed_comm": "exposed all-reduce",
    "exposed_all_gather": "exposed all-gather",
    "exposed_reduce_scatter": "exposed reduce-scatter",
    "exposed_cross_node_allreduce": "exposed cross-node all-reduce",
    "comm_interference": "communication interference",
    "optimizer": "optimizer step",
    "overhead": "framework overhead",
    "factor_compute": "K-FAC factors",
    "exposed_factor_comm": "K-FAC factor all-reduce (exposed)",
    "inversion": "K-FAC inversions",
    "inverse_broadcast": "K-FAC inverse broadcast",
    "preconditioning": "K-FAC preconditioning",
}


def prediction_json(result: PredictResult) -> dict[str, Any]:
    """The JSON document of `srift predict`."""
    out = result.prediction.to_dict()
    out.update({"model": result.model, "precision": result.precision, "optimizer": result.optimizer,
                "spot_pricing": result.spot_pricing})
    return out


PLAN_LABELS = {"ddp": "DDP", "zero2": "ZeRO-2 (FSDP SHARD_GRAD_OP)", "fsdp": "FSDP (FULL_SHARD)",
               "hsdp": "HSDP (sharded within a node, replicated across nodes)"}
MEMORY_LABELS = {"weights": "parameters", "gathered_weights": "gathered (half-precision) parameters", "gradients": "gradients",
                 "optimizer_state": "optimizer states", "activations": "activations", "fragmentation": "allocator slack",
                 "workspace": "workspace", "kfac_factors": "K-FAC factors"}


def title(result: PredictResult) -> str:
    return (f"{result.model} on {result.prediction.cluster}{' [Spot]' if result.spot_pricing else ''}, {result.precision}"
            + (f", K-FAC ({result.kfac_strategy})" if result.optimizer == "kfac" else ""))


def plan_text(pred: Prediction) -> str:
    """``FSDP (FULL_SHARD), selective activation checkpointing, 4 micro-batches``."""
    text = PLAN_LABELS.get(pred.parallelism, pred.parallelism)
    if pred.activation_checkpointing != "none":
        text += f", {pred.activation_checkpointing} activation checkpointing"
    if pred.grad_accum > 1:
        text += f", {pred.grad_accum} micro-batches of {pred.micro_batch_size or '?'}"
    return text


def exposed_comm_s(pred: Prediction) -> float:
    """Communication the compute waited for (all kinds)."""
    return sum(v for k, v in pred.breakdown.items() if k.startswith("exposed_") and "factor" not in k)


def render(result: PredictResult) -> None:
    """Print a prediction as a rich table with its breakdown."""
    pred = result.prediction
    con = console()
    con.print(f"[bold]{title(result)}[/bold]")
    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="dim")
    summary.add_column()
    summary.add_row("GPUs", f"{pred.gpus}  (global batch {pred.global_batch_size})")
    summary.add_row("Parallelism", plan_text(pred))
    summary.add_row("Iteration", f"{seconds(pred.iteration_time_s)}  (p90 {seconds(pred.p90_iteration_time_s)})")
    summary.add_row("Throughput", f"{pred.throughput_samples_per_s:,.1f} samples/s")
    if pred.throughput_tokens_per_s is not None:
        tokens = f"{pred.throughput_tokens_per_s:,.0f} tokens/s ({pred.tokens_per_s_per_gpu:,.0f} per GPU)"
        if pred.mfu is not None:
            tokens += f", MFU {pred.mfu:.1%}"
        summary.add_row("Tokens", tokens)
    summary.add_row("Cost", f"{usd(pred.cost_per_hour_usd)}/h, {usd(pred.usd_per_million_samples)} per million samples"
                    + (f", {usd(usd_per_million_tokens(pred), 3)} per million tokens" if pred.seq_len else ""))
    mem = f"{gib(pred.memory_per_gpu_bytes)} per GPU" + ("" if pred.fits_in_memory else "  [red]DOES NOT FIT[/red]")
    if pred.parallelism != "ddp" or "gathered_weights" in pred.memory_breakdown_bytes:
        mem += " (" + ", ".join(f"{MEMORY_LABELS.get(k, k)} {gib(v)}" for k, v in pred.memory_breakdown_bytes.items() if v) + ")"
    summary.add_row("Memory", mem)
    summary.add_row("Bottleneck", pred.bottleneck)
    summary.add_row("Typical error", error_text(pred.typical_error_pct, pred.typical_error_basis))
    if pred.spot:
        s = pred.spot
        summary.add_row(
            "Spot (expected)",
            f"{s.expected_throughput_samples_per_s:,.1f} samples/s, {usd(s.expected_usd_per_million_samples)} per million "
            f"({s.interruptions_per_hour:.3f} interruptions/h, {s.useful_fraction:.1%} useful)",
        )
    if len(pred.batch_split) > 1:
        summary.add_row("Batch split", ", ".join(f"{b.group}: {b.per_gpu_batch}/GPU" for b in pred.batch_split))
    con.print(summary)
    table = Table(title="Iteration breakdown")
    table.add_column("phase")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    for key, value in pred.breakdown.items():
        if key == "comm_total":
            continue
        table.add_row(PHASE_LABELS.get(key, key), seconds(value), f"{value / pred.iteration_time_s:.0%}")
    table.add_row("[bold]total[/bold]", f"[bold]{seconds(pred.iteration_time_s)}[/bold]", "100%")
    con.print(table)
    total = pred.breakdown.get("comm_total", 0.0)
    if total > 0:
        hidden = max(0.0, total - exposed_comm_s(pred)) / total
        if pred.parallelism == "ddp":
            con.print(f"All-reduce {seconds(total)} per iteration, {hidden:.0%} of it hidden behind backward.")
        else:
            con.print(f"All-gather and reduce-scatter{' and cross-node all-reduce' if pred.parallelism == 'hsdp' else ''} "
                      f"{seconds(total)} per iteration, {hidden:.0%} of it hidden behind compute.")
    for note in pred.notes:
        con.print(f"[dim]Note: {note}[/dim]")


def show(result: PredictResult, fmt: str) -> None:
    """Print ``result`` as ``table`` or ``json``."""
    if fmt == "json":
        print_json(prediction_json(result))
    else:
        render(result)
