"""Renderers: turn results into tables, JSON-ready dicts and markdown. No logic lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from srift.simulate.prediction import Prediction

if TYPE_CHECKING:
    from srift.search import Candidate, Constraints, SearchResult

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


def console():
    """A rich console; wide enough for the tables when output goes to a file or a pipe."""
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 140)


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


def error_text(pred: Prediction | dict[str, Any]) -> str:
    """``±9.9 % (what it rests on)``, or why there is no figure (from a Prediction or a dict
    carrying ``typical_error_pct`` and ``typical_error_basis``)."""
    get = pred.get if isinstance(pred, dict) else (lambda k, d=None: getattr(pred, k, d))
    pct, basis = get("typical_error_pct"), get("typical_error_basis") or ""
    if pct is None:
        return basis or "unknown"
    return f"±{pct:.1f} % ({basis})"


def prediction_json(pred: Prediction, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of `srift predict`."""
    out = pred.to_dict()
    if extra:
        out.update(extra)
    return out


def render_prediction(pred: Prediction, title: str) -> None:
    """Print a prediction as a rich table with its breakdown."""
    from rich.table import Table

    con = console()
    con.print(f"[bold]{title}[/bold]")
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
    summary.add_row("Typical error", error_text(pred))
    if pred.spot:
        s = pred.spot
        summary.add_row(
            "Spot (expected)",
            f"{s['expected_throughput_samples_per_s']:,.1f} samples/s, {usd(s['expected_usd_per_million_samples'])} per million "
            f"({s['interruptions_per_hour']:.3f} interruptions/h, {s['useful_fraction']:.1%} useful)",
        )
    if len(pred.batch_split) > 1:
        summary.add_row("Batch split", ", ".join(f"{b['group']}: {b['per_gpu_batch']}/GPU" for b in pred.batch_split))
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
        con.print(f"[dim]Note: {note}[/dim]")


# ---- recommend ------------------------------------------------------------------------------
def target_line(result: "SearchResult", constraints: "Constraints") -> str:
    c = constraints
    limits = []
    if c.budget_usd_per_hour is not None:
        limits.append(f"under {usd(c.budget_usd_per_hour)}/h")
    if c.deadline_hours is not None:
        limits.append(f"within {c.deadline_hours:g} h")
    if c.max_cost_usd is not None:
        limits.append(f"at most {usd(c.max_cost_usd)} per job")
    goal = "maximizing throughput" if result.objective == "throughput" else (
        "minimizing job cost" if c.has_length else "minimizing cost per sample")
    return f"Target: {goal}" + (f" {' and '.join(limits)}" if limits else "")


def candidate_json(cand: "Candidate", rank: int) -> dict[str, Any]:
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
        "batch_split": p.batch_split,
        "breakdown": p.breakdown,
        "typical_error_pct": p.typical_error_pct,
        "typical_error_basis": p.typical_error_basis,
    }


def why(result: "SearchResult") -> str:
    """One or two sentences on why the top choice wins and what the runner-up trades."""
    recs = result.recommendations
    if not recs:
        return ""
    top = recs[0]
    if result.objective == "throughput":
        text = (f"{top.label} wins: the highest throughput ({top.expected_throughput_samples_per_s:,.0f} samples/s) "
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
        text += _close_call(top, ru, result.objective)
    one = result.best_single_node
    if one is not None:
        dt = one.expected_throughput_samples_per_s / top.expected_throughput_samples_per_s - 1
        text += (f" It spans {top.nodes} nodes, the least validated case (typical error below); "
                 f"the best one-node choice is {one.label}: {dt:+.0%} throughput at {usd(one.cost_per_hour_usd)}/h.")
    return text


def _gpus_of(c: "Candidate") -> tuple[str, ...]:
    return tuple(sorted({str(g["gpu"]) for g in c.prediction.batch_split}))


def _close_call(top: "Candidate", ru: "Candidate", objective: str) -> str:
    """A sentence when the runner-up runs on other GPUs and trails by less than the compute error.

    On the same GPUs the two predictions share most of their error, so their order holds; across
    GPU types the compute model's errors are separate (``compute_error_pct``: the network's error
    is shared by two multi-node choices and does not enter), and a gap smaller than that does
    not settle which is better."""
    errs = [c.prediction.compute_error_pct for c in (top, ru)]
    if None in errs or _gpus_of(top) == _gpus_of(ru):
        return ""
    err = max(errs)  # type: ignore[type-var]
    if objective == "throughput":
        gap = 1.0 - ru.expected_throughput_samples_per_s / top.expected_throughput_samples_per_s
    else:
        cost = (lambda c: c.job_cost_usd) if top.job_cost_usd is not None else (lambda c: c.usd_per_million_samples)
        gap = cost(ru) / cost(top) - 1.0
    if gap * 100.0 >= err:
        return ""
    return (f" The two are {gap:.0%} apart on other GPUs ({', '.join(_gpus_of(top))} against {', '.join(_gpus_of(ru))}), "
            f"less than the compute model's typical error across GPUs (±{err:.1f} %): profile your job on one GPU of each (srift profile) "
            f"and pass both profiles (--profile A --profile B).")


def recommend_json(result: "SearchResult", constraints: "Constraints", extra: dict[str, Any]) -> dict[str, Any]:
    out = {
        "target": target_line(result, constraints),
        "objective": result.objective,
        "recommendations": [candidate_json(c, i + 1) for i, c in enumerate(result.recommendations)],
        "considered": result.considered,
        "evaluated": result.evaluated,
        "pareto_frontier": [{"instance": c.instance, "spot": c.spot, "cost_per_hour_usd": c.cost_per_hour_usd,
                             "expected_throughput_samples_per_s": c.expected_throughput_samples_per_s} for c in result.frontier],
        "why": why(result),
        "best_single_node": candidate_json(result.best_single_node, 0) if result.best_single_node else None,
    }
    out.update(extra)
    return out


def _rows(result: "SearchResult", with_job: bool) -> tuple[list[str], list[list[str]]]:
    head = ["", "configuration", "GPUs", "samples/s", "iteration", "$/h", "$/M samples"]
    if with_job:
        head += ["job hours", "job $"]
    head.append("bottleneck")
    rows = []
    for i, c in enumerate(result.recommendations):
        row = ["CHOSEN" if i == 0 else str(i + 1), c.label, str(c.gpus), f"{c.expected_throughput_samples_per_s:,.0f}",
               seconds(c.prediction.iteration_time_s), usd(c.cost_per_hour_usd), usd(c.usd_per_million_samples, 3)]
        if with_job:
            row += [f"{c.job_hours:,.2f}" if c.job_hours is not None else "-", usd(c.job_cost_usd)]
        row.append(c.prediction.bottleneck)
        rows.append(row)
    return head, rows


def render_recommend(result: "SearchResult", constraints: "Constraints", header: str) -> None:
    from rich.table import Table

    con = console()
    con.print(header)
    con.print(f"[bold]{target_line(result, constraints)}[/bold]")
    head, rows = _rows(result, constraints.has_length)
    table = Table()
    for h in head:
        table.add_column(h, justify="right" if h not in ("", "configuration", "bottleneck") else "left")
    for i, row in enumerate(rows):
        table.add_row(*row, style="bold green" if i == 0 else None)
    con.print(table)
    con.print(why(result))
    if result.recommendations:
        con.print(f"[dim]Typical error of the chosen prediction: {error_text(result.recommendations[0].prediction)}.[/dim]")
    con.print(f"[dim]{result.considered:,} configurations considered, {result.evaluated:,} simulated "
                  f"({result.pruned.get('budget', 0):,} over budget, {result.pruned.get('memory', 0):,} out of memory pruned first).[/dim]")


def recommend_markdown(result: "SearchResult", constraints: "Constraints", header: str) -> str:
    head, rows = _rows(result, constraints.has_length)
    lines = [f"**{header}**", "", target_line(result, constraints), "",
             "| " + " | ".join(h or "rank" for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", why(result), "", f"{result.considered:,} configurations considered, {result.evaluated:,} simulated."]
    return "\n".join(lines)


def plot_recommend(result: "SearchResult", path: str, title: str) -> None:
    """Throughput vs $/h of every evaluated configuration, the Pareto frontier and the choice."""
    from srift.errors import SriftError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SriftError("--plot needs matplotlib, which is not installed.", "pip install 'srift[plot]' (or drop --plot).") from None
    import os
    import tempfile

    fig, ax = plt.subplots(figsize=(8, 5.5))
    ok = [(x, y) for x, y, f in result.evaluated_points if f]
    bad = [(x, y) for x, y, f in result.evaluated_points if not f]
    if bad:
        ax.scatter(*zip(*bad), s=8, c="#cccccc", label="violates a limit")
    if ok:
        ax.scatter(*zip(*ok), s=10, c="#4c72b0", alpha=0.6, label="meets the limits")
    if result.frontier:
        ax.plot([c.cost_per_hour_usd for c in result.frontier], [c.expected_throughput_samples_per_s for c in result.frontier],
                "-", c="#dd8452", lw=1.5, label="Pareto frontier")
    if result.recommendations:
        top = result.recommendations[0]
        ax.scatter([top.cost_per_hour_usd], [top.expected_throughput_samples_per_s], s=160, marker="*", c="#c44e52", zorder=5,
                   label=f"chosen: {top.label}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cluster price ($/hour)")
    ax.set_ylabel("expected throughput (samples/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=folder)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---- check ----------------------------------------------------------------------------------
_LIMIT_LABELS = {"max_cost_usd": "job cost", "max_hours": "job hours", "max_usd_per_hour": "$/hour",
                 "fits_in_memory": "fits in GPU memory"}
_CHANGE_LABELS = {"predicted_cost_usd": "cost", "predicted_hours": "hours", "cost_per_hour_usd": "$/hour"}


def _fmt_limit(name: str, v: Any) -> str:
    if v is None or isinstance(v, bool):
        return "-" if v is None else ("yes" if v else "no")
    return f"{v:,.2f} h" if name == "max_hours" else usd(v)


def _change_rows(change: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key, c in change.items():
        fmt = (lambda v: f"{v:,.2f} h") if key == "predicted_hours" else usd
        pct = "-" if c["change_pct"] is None else f"{c['change_pct']:+.0f}%"
        sign = "+" if c["change"] >= 0 else "-"
        rows.append([_CHANGE_LABELS[key], fmt(c["base"]), fmt(c["new"]), f"{sign}{fmt(abs(c['change']))}", pct])
    return rows


def check_markdown(result: dict[str, Any]) -> str:
    cfg = result["configuration"]
    status = "passed" if result["passed"] else "FAILED"
    icon = "✅" if result["passed"] else "❌"
    lines = [f"### {icon} srift check {status}: {result['job']['model']} on `{cfg['instance']}`" + (" [Spot]" if cfg["spot"] else ""),
             "",
             f"Predicted **{usd(result['predicted_cost_usd'])}** over **{result['predicted_hours']:,.2f} h** at "
             f"{usd(result['cost_per_hour_usd'])}/h ({cfg['gpus']} GPUs, {cfg['throughput_samples_per_s']:,.0f} samples/s, "
             f"{cfg['bottleneck']}-bound; configuration from {cfg['chosen_by']}). Typical error: {error_text(cfg)}.", "",
             "| limit | allowed | predicted | margin | |", "|---|---|---|---|---|"]
    for c in result["limits"]:
        margin = "-" if c["margin"] is None else f"{_fmt_limit(c['limit'], c['margin'])} ({c['margin_pct']:.0f}%)"
        lines.append(f"| {_LIMIT_LABELS[c['limit']]} | {_fmt_limit(c['limit'], c['value'])} | "
                     f"{_fmt_limit(c['limit'], c['predicted'])} | {margin} | {'✅' if c['passed'] else '❌'} |")
    if result.get("change"):
        lines += ["", "Change against the base branch:", "", "| | base | this change | change | % |", "|---|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in _change_rows(result["change"])]
    lines += ["", f"<sub>{result['schema']}, catalog prices as of {result.get('catalog_as_of') or '-'}</sub>"]
    return "\n".join(lines)


def render_check(result: dict[str, Any]) -> None:
    from rich.table import Table

    con = console()
    cfg = result["configuration"]
    status = "[bold green]PASSED[/bold green]" if result["passed"] else "[bold red]FAILED[/bold red]"
    con.print(f"srift check {status}: {result['job']['model']} on {cfg['instance']}" + (" [Spot]" if cfg["spot"] else "")
              + f" ({cfg['gpus']} GPUs, from {cfg['chosen_by']})")
    con.print(f"Predicted {usd(result['predicted_cost_usd'])} over {result['predicted_hours']:,.2f} h at "
              f"{usd(result['cost_per_hour_usd'])}/h, {cfg['throughput_samples_per_s']:,.0f} samples/s.")
    con.print(f"[dim]Typical error: {error_text(cfg)}.[/dim]")
    table = Table()
    for h in ("limit", "allowed", "predicted", "margin", ""):
        table.add_column(h)
    for c in result["limits"]:
        margin = "-" if c["margin"] is None else f"{_fmt_limit(c['limit'], c['margin'])} ({c['margin_pct']:.0f}%)"
        table.add_row(_LIMIT_LABELS[c["limit"]], _fmt_limit(c["limit"], c["value"]), _fmt_limit(c["limit"], c["predicted"]),
                      margin, "ok" if c["passed"] else "[red]EXCEEDED[/red]")
    con.print(table)
    if result.get("change"):
        t2 = Table(title="Change against the baseline")
        for h in ("", "base", "this change", "change", "%"):
            t2.add_column(h)
        for r in _change_rows(result["change"]):
            t2.add_row(*r)
        con.print(t2)
    con.print(f"[dim]Catalog prices as of {result.get('catalog_as_of') or '-'}.[/dim]")
