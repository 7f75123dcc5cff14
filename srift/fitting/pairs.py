"""How much two predictions of one validation group err apart: the error of their ratio, from the
validation's own residuals (what `srift recommend` compares two configurations by; srift/search/rank.py's
``combined_error_pct``).

For each pair of measured runs of a group, the ratio of their residuals ``r = predicted / measured``
(of the step time) is how far srift's ratio of the two runs was from the measured ratio; its mean
absolute departure from 1 over the pairs is the pair's typical error, as a MAPE is a single
prediction's. Two kinds of pair:

- **same GPU** (the scaling term): runs of one source, model, GPU and precision at another GPU
  count or layout: what two configurations of one instance type and stack share cancels;
- **other GPU** (the cross-GPU term): runs of one model and precision on different GPUs.

The layout group's bf16 Megatron runs (data/llm-parallel-layouts) and the MoE group's
(data/moe-training) each give theirs; a kind without pairs gives none (scripts/validate.py
``--only pairs`` prints and writes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

SAME_GPU = (("source_slug", "zoo", "gpu", "precision"), ("gpus_total", "tp", "pp", "cp", "dp", "micro_batch"))
OTHER_GPU = (("zoo", "precision"), ("gpu",))


def pair_mape(rows: pd.DataFrame, residual: np.ndarray, same: Sequence[str], differ: Sequence[str]) -> tuple[float | None, int]:
    """(mean |r_a / r_b - 1| in %, pairs) over the pairs of ``rows`` equal on ``same`` and not on
    all of ``differ`` (None when there is no pair)."""
    keys = rows[list(same)].astype(str).agg("|".join, axis=1).to_numpy()
    other = rows[list(differ)].astype(str).agg("|".join, axis=1).to_numpy()
    errs = []
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            if keys[i] == keys[j] and other[i] != other[j]:
                errs.append(abs(residual[i] / residual[j] - 1.0))
    return (float(np.mean(errs)) * 100.0 if errs else None), len(errs)


def pair_groups(data: Path) -> dict[str, dict[str, object]]:
    """accuracy.json's pair groups (``pairs_<group>_<kind>``: rows = pairs, fit = the pair MAPE)."""
    from srift.fitting import layouts as lf
    from srift.fitting import moe as mf

    dense, _ = lf.load_rows(data)
    moe, _ = mf.load_rows(data)
    recipes, layouts = mf.load_recipes(data), mf.load_pipeline_layouts(data)
    residuals = {  # predicted / measured step time: seconds for the dense rows, tokens/s (inverted) for MoE
        "layouts": (dense, np.array([lf.predict_row(r)[0] for r in dense.itertuples()]) / dense["value"].to_numpy(float)),
        "moe": (moe, moe["value"].to_numpy(float) / np.array([mf.predict_row(r, recipes, layouts)[0] for r in moe.itertuples()])),
    }
    words = {"same_gpu": "runs of one source, model, GPU and precision at other GPU counts or layouts",
             "other_gpu": "runs of one model and precision on other GPUs"}
    out: dict[str, dict[str, object]] = {}
    for group, (rows, res) in residuals.items():
        if not len(rows):
            continue
        for kind, (same, differ) in (("same_gpu", SAME_GPU), ("other_gpu", OTHER_GPU)):
            mape, n = pair_mape(rows.reset_index(drop=True), res, same, differ)
            if mape is not None:
                out[f"pairs_{group}_{kind}"] = {"rows": n, "fit": round(mape, 1),
                                                "basis": f"ratio of predicted to measured over {n} pairs of {words[kind]}"}
    return out
