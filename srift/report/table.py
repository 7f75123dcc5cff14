"""Tables that fit the terminal: every table view prints through ``print_table``.

A table wider than the console loses whole columns, least important first (each view gives the
order), and says which; no cell is ever shortened (``g5.12xl…``). Only a console narrower than the
columns a view always keeps folds their cells onto a second line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

_UNBOUNDED = 100_000


@dataclass(frozen=True)
class Column:
    """One column of a table.

    Attributes:
        header: The heading ("" for an unlabelled column).
        justify: ``left`` or ``right`` (numbers).
        drop: When the table is too wide, columns go in increasing ``drop`` (1 first); None: kept.
    """

    header: str
    justify: str = "left"
    drop: int | None = None


def cell_len(markup: str) -> int:
    """Terminal columns a cell takes once its rich markup (``[red]...[/red]``) is applied."""
    return Text.from_markup(markup).cell_len


def _build(columns: Sequence[Column], rows: Sequence[Sequence[str]], keep: Sequence[int], title: str | None,
           row_styles: Sequence[str | None] | None, table_args: dict[str, Any], whole: bool = True) -> Table:
    table = Table(title=title, **table_args)
    for i in keep:
        col = columns[i]
        # A cell is shown whole or its column is dropped: never "g5.12xl…" or "14,…". When even the
        # columns that are always kept do not fit (``whole`` False), their cells fold onto more lines.
        widest = max([cell_len(col.header)] + [cell_len(r[i]) for r in rows]) if whole else None
        table.add_column(col.header, justify=col.justify, no_wrap=whole, overflow="fold", min_width=widest)  # type: ignore[arg-type]
    for r, row in enumerate(rows):
        table.add_row(*(row[i] for i in keep), style=row_styles[r] if row_styles else None)
    return table


def fit_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str | None = None,
              row_styles: Sequence[str | None] | None = None, **table_args: Any) -> tuple[Table, list[str]]:
    """The widest table of these columns that fits ``console.width``, and the headers left out.

    Args:
        console: Where it will print (its width decides).
        columns: The columns, in display order.
        rows: One list of cell texts per row, one cell per column.
        title: Table title.
        row_styles: A rich style per row (None: plain).
        table_args: Passed to ``rich.table.Table`` (``box``, ``show_header``, ...).
    """
    if any(len(r) != len(columns) for r in rows):
        raise ValueError("every row needs one cell per column")
    keep = list(range(len(columns)))
    dropped: list[str] = []
    order = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop is not None)
    while True:
        table = _build(columns, rows, keep, title, row_styles, table_args)
        # The width it takes unconstrained (a constrained measure is capped at the console's width).
        natural = Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum
        if natural <= console.width:
            return table, dropped
        if not order:
            return _build(columns, rows, keep, title, row_styles, table_args, whole=False), dropped
        _, i = order.pop(0)
        keep.remove(i)
        dropped.append(columns[i].header)


def print_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str | None = None,
                row_styles: Sequence[str | None] | None = None, **table_args: Any) -> list[str]:
    """Print the table that fits (``fit_table``) and, when columns were left out, one dim line
    naming them; returns their headers."""
    table, dropped = fit_table(console, columns, rows, title, row_styles, **table_args)
    console.print(table)
    if dropped:
        console.print(f"[dim]Not shown at {console.width} columns: {escape(', '.join(dropped))} "
                      f"(a wider terminal, COLUMNS=..., or --format json/markdown shows them).[/dim]")
    return dropped
