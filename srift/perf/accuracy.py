"""How far predictions have been from measurements: the figures `scripts/validate.py` measured,
shipped in ``configs/perf/accuracy.json``, so that `predict` and `recommend` can say how much to
trust a number (torch-free, read once)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from srift.fileio import read_json
from srift.resources import configs_dir

SCHEMA = "srift.perf.accuracy/v1"
GROUPS = ("single_gpu", "one_node")


def accuracy_path() -> Path:
    return configs_dir() / "perf" / "accuracy.json"


@functools.lru_cache(maxsize=1)
def load_accuracy() -> dict[str, Any]:
    """The shipped validation figures (empty when the file is missing or of another schema)."""
    path = accuracy_path()
    if not path.is_file():
        return {}
    data = read_json(path, "validation figures", "reinstall srift, or re-run scripts/validate.py --write-accuracy.")
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else {}


@functools.lru_cache(maxsize=64)
def typical_error(nodes: int, gpus: int, cpu: bool = False) -> tuple[float | None, str]:
    """Leave-one-GPU-out MAPE (%) of the matching validation group, and what it rests on.

    One GPU -> the single-GPU group; one node -> the one-node multi-GPU group; several nodes ->
    None (no multi-node training measurement maps onto a zoo model yet); CPU workers -> None
    (they run on measured times; scripts/validate_local_ddp.py checks them).
    """
    groups = load_accuracy().get("groups", {})
    if cpu:
        return None, "CPU workers: outside the GPU validation; scripts/validate_local_ddp.py checks them on your machine"
    if nodes > 1:
        one = groups.get("one_node")
        within = f"; within one node ±{float(one['logo']):.1f} %" if one else ""
        return None, f"not validated across nodes: no measured multi-node run to compare with{within}"
    key = "single_gpu" if gpus <= 1 else "one_node"
    g = groups.get(key)
    if not g:
        return None, "no validation figures shipped"
    what = "single-GPU" if key == "single_gpu" else "one-node multi-GPU"
    return float(g["logo"]), f"leave-one-GPU-out MAPE over {g['rows']} measured {what} runs, scripts/validate.py"
