"""Renderers: turn results into tables, JSON-ready dicts and markdown. No logic lives here."""

from __future__ import annotations

from typing import Any

from srift.simulate.prediction import Prediction

PHASE_LABELS = {
    "data": "data loading",
    "forward": "forward",
    "backward": "backward",
    "exposed_comm": "exposed all-reduce",
    "optimizer": "optimizer step",
    "overhead": "framework overhead",
    "factor_compute": "K-FAC factors",
    "exposed_factor_comm": "K-FAC factor all-reduce (exposed)",
    "inversion": "K-FAC inversions",
    "inverse_broadcast": "K-FAC inverse broadcast",
    "preconditioning": "K-FAC preconditioning",
}


def usd(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"${v:,.{digits}f}"


def seconds(v: float) -> str:
    if v >= 1:
        return f"{v:.2f} s"
    if v >= 1e-3:
        return f"{v * 1e3:.1f} ms"
    return f"{v * 1e6:.0f} us"


def gib(v: float) -> str:
    return f"{v / 2**30:.1f} GiB"


def prediction_json(pred: Prediction, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of `srift predict`."""
    out = pred.to_dict()
    if extra:
        out.update(extra)
    return out


def render_prediction(pred: Prediction, title: str) -> None:
    """Print a prediction as a rich table with its breakdown."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{title}[/bold]")
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
    if pred.spot:
        s = pred.spot
        summary.add_row(
            "Spot (expected)",
            f"{s['expected_throughput_samples_per_s']:,.1f} samples/s, {usd(s['expected_usd_per_million_samples'])} per million "
            f"({s['interruptions_per_hour']:.3f} interruptions/h, {s['useful_fraction']:.1%} useful)",
        )
    if len(pred.batch_split) > 1:
        summary.add_row("Batch split", ", ".join(f"{b['group']}: {b['per_gpu_batch']}/GPU" for b in pred.batch_split))
    console.print(summary)
    table = Table(title="Iteration breakdown")
    table.add_column("phase")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    for key, value in pred.breakdown.items():
        if key == "comm_total":
            continue
        table.add_row(PHASE_LABELS.get(key, key), seconds(value), f"{value / pred.iteration_time_s:.0%}")
    table.add_row("[bold]total[/bold]", f"[bold]{seconds(pred.iteration_time_s)}[/bold]", "100%")
    console.print(table)
    total = pred.breakdown.get("comm_total", 0.0)
    if total > 0:
        hidden = max(0.0, total - pred.breakdown.get("exposed_comm", 0.0)) / total
        console.print(f"All-reduce {seconds(total)} per iteration, {hidden:.0%} of it hidden behind backward.")
    for note in pred.notes:
        console.print(f"[dim]Note: {note}[/dim]")
