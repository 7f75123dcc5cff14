"""`srift check`: the limits table (rich or markdown, for a PR comment) or the JSON document."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from srift.bounds import MAX_NOTE_CHARS
from srift.outputs import write_json
from srift.job import DDP
from srift.report.format import console, error_text, plural, price_lines, print_json, usd
from srift.report.table import Column, print_table
from srift.results import CheckResult, MetricChange
from srift.text import markdown as md

_LIMIT_LABELS = {"max_cost_usd": "job cost", "max_hours": "job hours", "max_usd_per_hour": "$/hour",
                 "fits_in_memory": "fits in GPU memory"}
_CHANGE_LABELS = {"predicted_cost_usd": "cost", "predicted_hours": "hours", "cost_per_hour_usd": "$/hour"}


def _fmt_limit(name: str, v: Any) -> str:
    if v is None or isinstance(v, bool):
        return "-" if v is None else ("yes" if v else "no")
    return f"{v:,.2f} h" if name == "max_hours" else usd(v)


def _hours(v: float) -> str:
    return f"{v:,.2f} h"


def _change_rows(change: dict[str, MetricChange]) -> list[list[str]]:
    rows = []
    for key, c in change.items():
        fmt = _hours if key == "predicted_hours" else usd
        pct = "-" if c.change_pct is None else f"{c.change_pct:+.0f}%"
        sign = "+" if c.change >= 0 else "-"
        rows.append([_CHANGE_LABELS[key], fmt(c.base), fmt(c.new), f"{sign}{fmt(abs(c.change))}", pct])
    return rows


def _rule_note(result: CheckResult) -> str | None:
    """Why the change has no percentages: the base and this change chose their configurations by different rules."""
    if result.change and not all(c.comparable for c in result.change.values()):
        return ("Not like with like: the base's configuration and this change's were chosen by different rules (this "
                f"change's: {result.configuration.chosen_by}), so the change has no percentages.")
    return None


def _limit_cells(result: CheckResult) -> list[tuple[str, str, str, str, bool]]:
    """(label, allowed, predicted, margin, passed) per limit; hours and cost at the confidence, with the median."""
    out = []
    for c in result.limits:
        margin = "-" if c.margin is None else f"{_fmt_limit(c.limit, c.margin)} ({c.margin_pct:.0f}%)"
        predicted = _fmt_limit(c.limit, c.predicted)
        if c.confidence is not None:
            predicted += f" at {c.confidence:.0%} (median {_fmt_limit(c.limit, c.predicted_p50)})"
        out.append((_LIMIT_LABELS[c.limit], _fmt_limit(c.limit, c.value), predicted, margin, c.passed))
    return out


def _confidence_text(result: CheckResult) -> str:
    at = result.at_confidence
    u = at.uncertainty
    return (f"at {at.confidence:.0%} confidence {usd(at.cost_usd)} over {at.hours:,.2f} h "
            f"(σ {u.sigma:.3f}: model {u.model:.3f}, run-to-run {u.spread:.3f}, spot {u.spot:.3f})")


def markdown(result: CheckResult) -> str:
    cfg = result.configuration
    status = "passed" if result.passed else "FAILED"
    icon = "✅" if result.passed else "❌"
    lines = [f"### {icon} srift check {status}: {md(result.model)} on `{cfg.instance}`" + (" [Spot]" if cfg.spot else ""),
             "",
             f"Predicted **{usd(result.predicted_cost_usd)}** over **{result.predicted_hours:,.2f} h** (median), "
             f"{_confidence_text(result)}, at {usd(result.cost_per_hour_usd)}/h in {cfg.region} ({plural(cfg.gpus, 'GPU')}"
             f"{f', {cfg.plan}' if cfg.plan != DDP else ''}{f', stack {cfg.stack}' if cfg.stack else ''}, "
             f"{cfg.throughput_samples_per_s:,.0f} samples/s, {cfg.bottleneck}-bound; configuration from {cfg.chosen_by}). "
             f"Typical error: {error_text(cfg.typical_error_pct, cfg.typical_error_basis)}.", "",
             "| limit | allowed | predicted | margin | |", "|---|---|---|---|---|"]
    for label, allowed, predicted, margin, passed in _limit_cells(result):
        lines.append(f"| {label} | {allowed} | {predicted} | {margin} | {'✅' if passed else '❌'} |")
    if result.change:
        lines += ["", "Change against the base branch:", "", "| | base | this change | change | % |", "|---|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in _change_rows(result.change)]
        note = _rule_note(result)
        lines += ["", md(note, MAX_NOTE_CHARS)] if note else []
    lines += [""] + [f"> {md(n, MAX_NOTE_CHARS)}" for n in cfg.notes] + [f"<sub>{result.schema}. {' '.join(price_lines(result.catalog_as_of))}</sub>"]
    return "\n".join(lines)


def render(result: CheckResult) -> None:
    con = console()
    cfg = result.configuration
    status = "[bold green]PASSED[/bold green]" if result.passed else "[bold red]FAILED[/bold red]"
    plan = (f", {cfg.plan}" if cfg.plan != DDP else "") + (f", stack {cfg.stack}" if cfg.stack else "")
    con.print(f"srift check {status}: {escape(result.model)} on {escape(cfg.instance)}" + (" [Spot]" if cfg.spot else "")
              + f" ({plural(cfg.gpus, 'GPU')}{plan}, from {cfg.chosen_by})")
    con.print(f"Predicted {usd(result.predicted_cost_usd)} over {result.predicted_hours:,.2f} h (median), {_confidence_text(result)}, "
              f"at {usd(result.cost_per_hour_usd)}/h in {cfg.region}, {cfg.throughput_samples_per_s:,.0f} samples/s.")
    con.print(f"[dim]Typical error: {error_text(cfg.typical_error_pct, cfg.typical_error_basis)}.[/dim]")
    cells = [[label, allowed, predicted, margin, "ok" if passed else "[red]EXCEEDED[/red]"]
             for label, allowed, predicted, margin, passed in _limit_cells(result)]
    print_table(con, [Column("limit"), Column("allowed"), Column("predicted"), Column("margin", drop=1), Column("")], cells)
    if result.change:
        print_table(con, [Column(""), Column("base"), Column("this change"), Column("change", drop=1), Column("%")],
                    _change_rows(result.change), title="Change against the baseline")
        note = _rule_note(result)
        if note:
            con.print(f"[dim]{escape(note)}[/dim]")
    for note in cfg.notes:
        con.print(f"[dim]Note: {escape(note)}[/dim]")
    for line in price_lines(result.catalog_as_of):
        con.print(f"[dim]{escape(line)}[/dim]")


def show(result: CheckResult, fmt: str, out_file: str | None = None) -> None:
    """Write the JSON document to ``out_file`` if given, and print ``result`` as ``table``,
    ``json`` or ``markdown``."""
    if out_file:
        write_json(out_file, result.to_dict())
    if fmt == "json":
        print_json(result.to_dict())
    elif fmt == "markdown":
        print(markdown(result))
    else:
        render(result)
