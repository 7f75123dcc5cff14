"""Rows of NVIDIA's Megatron-Core performance tables (data/llm-parallel-layouts, data/moe-training)
that srift predicts, and by reason how many it leaves out (offline: pandas). One loader serves the
dense layout group (srift/fitting/layouts.py) and the MoE group (srift/fitting/moe.py); each says
which metric, precisions and GPUs it keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd

from srift.errors import SriftError
from srift.zoo import canonical_name


def load_rows(data: Path, folder: Path, why_left_out: Callable[[Any], str | None],
              zoo_name: Callable[[str], str] = str,
              carries_shape: Callable[[Any], bool] = lambda r: False) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows of every CSV in ``data / folder`` that srift predicts, with a ``zoo`` column (the
    zoo's name of ``zoo_name(row.model)``, or the model as printed for a row that
    ``carries_shape``: its architecture is in its own columns), and the count of rows left out by
    reason.

    A row is left out for ``why_left_out(row)`` (the caller's metric, precision and GPU rules; None
    keeps it), a model not in the zoo (unless it carries its shape), or a layout whose
    TP x PP x CP x DP is not its GPU count.
    """
    raw = pd.concat([pd.read_csv(p) for p in sorted((data / folder).glob("*.csv"))], ignore_index=True)
    out: dict[str, int] = {}
    keep = []
    for r in raw.itertuples():
        reason = why_left_out(r)
        if reason is None and not carries_shape(r):
            try:
                canonical_name(zoo_name(str(r.model)))
            except SriftError:
                reason = f"model {r.model} not in the zoo"
        if reason is None and int(r.tp) * int(r.pp) * int(r.cp) * int(r.dp) != int(r.gpus_total):
            reason = "layout does not multiply out to the GPU count"
        if reason:
            out[reason] = out.get(reason, 0) + 1
        else:
            keep.append(r.Index)
    rows = raw.loc[keep].reset_index(drop=True)
    rows["zoo"] = [str(r.model) if carries_shape(r) else canonical_name(zoo_name(str(r.model))) for r in rows.itertuples()]
    return rows, out
