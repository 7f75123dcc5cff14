"""Tables fit the terminal: whole columns go, least important first, and no name is ever cut."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from srift.cli import main
from srift.report.format import console
from srift.report.table import Column, fit_table, print_table

COLUMNS = [Column("name"), Column("a", "right", drop=2), Column("b", "right", drop=1), Column("c", "right")]
ROWS = [["g5.12xlarge:3", "1,234", "5,678", "$9.99"], ["p4de.24xlarge:2+g6e.48xlarge:1", "1", "2", "$3.00"]]


def _render(width: int) -> tuple[str, list[str]]:
    con = Console(file=io.StringIO(), width=width, color_system=None)
    dropped = print_table(con, COLUMNS, ROWS)
    return con.file.getvalue(), dropped  # type: ignore[attr-defined]


def _table_width(columns: list[str]) -> int:
    # Heavy-head box: one border per column plus one, and one space of padding on each side.
    cells = {c.header: max([len(c.header)] + [len(r[i]) for r in ROWS]) for i, c in enumerate(COLUMNS)}
    return sum(cells[h] + 3 for h in columns) + 1


def test_columns_go_in_their_drop_order_exactly_when_the_table_is_too_wide():
    full = _table_width(["name", "a", "b", "c"])
    assert full == (30 + 3) + 3 * (5 + 3) + 1 == 58  # by hand: the widest name is 30 characters
    assert _render(full)[1] == []
    assert _render(full - 1)[1] == ["b"]  # b (drop=1) first
    assert _render(_table_width(["name", "a", "c"]) - 1)[1] == ["b", "a"]


def test_no_cell_is_cut_and_every_line_fits():
    for width in (58, 50, 45, 42):
        out, _ = _render(width)
        assert "…" not in out
        assert "p4de.24xlarge:2+g6e.48xlarge:1" in out  # the name whole, on one line
        assert max(len(line) for line in out.splitlines()) <= width


def test_when_even_the_kept_columns_are_too_wide_cells_fold_instead_of_being_cut():
    out, dropped = _render(30)
    assert dropped == ["b", "a"] and "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 30
    assert "$3.00" in out and "$9.99" in out  # the kept figures stay whole


def test_a_row_of_the_wrong_length_is_refused():
    try:
        fit_table(Console(file=io.StringIO(), width=80), COLUMNS, [["x"]])
    except ValueError:
        pass
    else:
        raise AssertionError("accepted a short row")


def test_columns_env_sets_the_width_also_when_piped(monkeypatch):
    monkeypatch.setenv("COLUMNS", "93")
    assert console().width == 93
    monkeypatch.setenv("COLUMNS", "not-a-number")
    assert console(width=140).width == 140  # not a terminal under pytest: the pipe default


@pytest.mark.slow
def test_recommend_at_80_columns_shows_every_configuration_whole(monkeypatch, capsys):
    args = ["recommend", "--model", "resnet50", "--budget", "20", "--spot", "--mixed", "--max-gpus", "24"]
    assert main(args + ["--format", "json"]) == 0
    labels = [r["instance"] for r in json.loads(capsys.readouterr().out)["recommendations"]]
    monkeypatch.setenv("COLUMNS", "80")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    table = [line for line in out.splitlines() if line.startswith("│")]
    assert len(table) == len(labels) and all(label in row for label, row in zip(labels, table))
    assert "Not shown at 80 columns: iteration" in out
    monkeypatch.setenv("COLUMNS", "200")  # wide enough: every column, nothing said
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "bottleneck" in out and "Not shown" not in out


@pytest.mark.slow
def test_catalog_list_at_80_columns_names_every_instance_whole(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["catalog", "list", "--format", "json"]) == 0
    names = [i["instance_type"] for i in json.loads(capsys.readouterr().out)["instances"]]
    assert main(["catalog", "list"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    assert all(f"│ {n} " in out for n in names)
