"""The training stack of every validation source (configs/source_stacks.yaml), and the per-stack
table of scripts/validate.py (``--only stacks``): each stack's rows, their leave-one-source-out
error beside their leave-one-stack-out error (the layout factor refitted without every row of
the stack), written to configs/perf/stack_accuracy.json for predictions to quote
(srift/stacks.py ``stack_typical_error``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from srift.errors import SriftError
from srift.files import configs_dir, read_yaml
from srift.job import STACKS


@dataclass(frozen=True)
class SourceStack:
    """One row of configs/source_stacks.yaml: the stack of a source's rows (those whose framework
    column holds ``framework``, when given)."""

    source: str
    stack: str
    why: str
    framework: str | None = None


@functools.lru_cache(maxsize=2)
def source_stacks(path: Path | None = None) -> tuple[SourceStack, ...]:
    """Every row of configs/source_stacks.yaml, checked.

    Raises:
        SriftError: for a row without a source, a why, or a stack srift knows.
    """
    p = path or configs_dir() / "source_stacks.yaml"
    data = read_yaml(p, "source stack table")
    rows = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise SriftError(f"{p.name}: no 'sources' list.", "correct configs/source_stacks.yaml.")
    out = []
    for i, r in enumerate(rows):
        if (not isinstance(r, dict) or not isinstance(r.get("source"), str) or r.get("stack") not in STACKS
                or not isinstance(r.get("why"), str) or set(r) - {"source", "stack", "why", "framework"}):
            raise SriftError(f"{p.name}: row {i + 1} needs a source, a stack (one of {', '.join(STACKS)}) and a why.",
                             "correct configs/source_stacks.yaml.")
        out.append(SourceStack(r["source"], r["stack"], r["why"], r.get("framework")))
    return tuple(out)


def stack_of(source: str, framework: str = "") -> str:
    """The stack of a row of ``source`` (its framework column, where the source holds several).

    Raises:
        KeyError: for a source configs/source_stacks.yaml does not tag.
    """
    for row in source_stacks():
        if row.source == source and (row.framework is None or row.framework in framework):
            return row.stack
    raise KeyError(f"source {source!r} has no stack in configs/source_stacks.yaml")


def tag(rows: pd.DataFrame, source_col: str, framework_col: str | None = "framework") -> pd.Series:
    """Each row's stack (``stack_of``)."""
    fw = rows[framework_col].astype(str) if framework_col and framework_col in rows else pd.Series("", index=rows.index)
    return pd.Series([stack_of(str(s), f) for s, f in zip(rows[source_col], fw)], index=rows.index, name="stack")


@dataclass(frozen=True)
class StackFigure:
    """A stack's validation figures (step times; MAPE %).

    Attributes:
        rows: Step-time measurements of the stack.
        loso: Their leave-one-source-out MAPE.
        lostack: Their leave-one-stack-out MAPE (None where the stack is every fitted row of its
            group, so nothing is left to fit: then ``loso`` is quoted).
        groups: The validation groups they come from.
    """

    rows: int
    loso: float
    lostack: float | None
    groups: tuple[str, ...]
    by_group: tuple[tuple[str, "StackFigure"], ...] = ()

    @property
    def quoted(self) -> float:
        """What a prediction of this stack quotes: the leave-one-stack-out figure, else leave-one-source-out."""
        return self.lostack if self.lostack is not None else self.loso


def stack_figures(parts: list[pd.DataFrame]) -> dict[str, StackFigure]:
    """Per stack, from row frames with ``stack``, ``group``, ``loso_err`` and ``lostack_err``
    (signed % errors; ``lostack_err`` NaN where it cannot be computed)."""
    rows = pd.concat(parts, ignore_index=True)

    def figure(g: pd.DataFrame) -> StackFigure:
        lost = g["lostack_err"]
        return StackFigure(len(g), round(float(g["loso_err"].abs().mean()), 1),
                           round(float(lost.abs().mean()), 1) if lost.notna().all() else None, tuple(sorted(set(g["group"]))))

    out = {}
    for stack, g in rows.groupby("stack"):
        whole = figure(g)
        out[str(stack)] = StackFigure(whole.rows, whole.loso, whole.lostack, whole.groups,
                                      tuple((str(k), figure(sub)) for k, sub in g.groupby("group")))
    return out


def frame(group: str, stack: pd.Series, meas: np.ndarray, loso: np.ndarray, lostack: np.ndarray | None) -> pd.DataFrame:
    """A ``stack_figures`` part: signed errors (%) of ``loso`` and ``lostack`` predictions of times
    measured as ``meas`` (None: leave-one-stack-out cannot be computed for these rows)."""
    return pd.DataFrame({"stack": stack.to_numpy(), "group": group, "loso_err": (np.asarray(loso) / meas - 1.0) * 100.0,
                         "lostack_err": np.nan if lostack is None else (np.asarray(lostack) / meas - 1.0) * 100.0})
