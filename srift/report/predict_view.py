"""`srift predict`: a table with the iteration's breakdown, or the JSON document."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from srift.report.format import console, error_text, gib, price_lines, print_json, seconds, usd
from srift.results import PredictResult, ages_json

PHASE_LABELS = {
    "data": "data loading",
    "forward": "forward",
    "backward": "backward",
    "exposed_comm": "exposed all-reduce",
    "comm_interference": "all-reduce interference",
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
    out: dict[str, Any] = {"schema": result.schema}
    out.update(result.prediction.to_dict())
    out.update({"model": result.model, "precision": result.precision, "optimizer": result.optimizer,
                "spot_pricing": result.spot_pricing, "host_arch": result.host_arch,
                "catalog_as_of": ages_json(result.catalog_as_of), "warnings": price_lines(result.catalog_as_of)[1:],
                "uncertainty": result.uncertainty.to_dict() if result.uncertainty else None})
    return out


def title(result: PredictResult) -> str:
    return (f"{result.model} on {result.prediction.cluster}{' [Spot]' if result.spot_pricing else ''}, {result.precision}"
            + (f", K-FAC ({result.kfac_strategy})" if result.optimizer == "kfac" else ""))


def render(result: PredictResult) -> None:
    """Print a prediction as a rich table with its breakdown."""
    pred = result.prediction
    con = console()
    con.print(f"[bold]{title(result)}[/bold]")
    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="dim")
    summary.add_column()
    summary.add_row("GPUs", f"{pred.gpus}  (global batch {pred.global_batch_size})")
    summary.add_row("Iteration", f"{seconds(pred.iteration_time_s)}  (p90 {seconds(pred.p90_iteration_time_s)})")
    summary.add_row("Throughput", f"{pred.throughput_samples_per_s:,.1f} samples/s")
    summary.add_row("Cost", f"{usd(pred.cost_per_hour_usd)}/h, {usd(pred.usd_per_million_samples)} per million samples")
    mem = f"{gib(pred.memory_per_gpu_bytes)} per GPU" + ("" if pred.fits_in_memory else "  [red]DOES NOT FIT[/red]")
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
        hidden = max(0.0, total - pred.breakdown.get("exposed_comm", 0.0)) / total
        con.print(f"All-reduce {seconds(total)} per iteration, {hidden:.0%} of it hidden behind backward.")
    for note in pred.notes:
        con.print(f"[dim]Note: {escape(note)}[/dim]")
    for line in price_lines(result.catalog_as_of):
        con.print(f"[dim]{escape(line)}[/dim]")


def show(result: PredictResult, fmt: str) -> None:
    """Print ``result`` as ``table`` or ``json``."""
    if fmt == "json":
        print_json(prediction_json(result))
    else:
        render(result)
