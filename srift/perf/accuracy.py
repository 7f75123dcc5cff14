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
GROUPS = ("single_gpu", "one_node", "multi_node")


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

    One GPU -> the single-GPU group; one node -> the one-node multi-GPU group; several nodes -> the
    multi-node group's in-fit MAPE (leaving a GPU out says little about the network, which is what
    changes across nodes), with which way those runs missed; CPU workers -> None (they run on
    measured times; scripts/validate_local_ddp.py checks them).
    """
    groups = load_accuracy().get("groups", {})
    if cpu:
        return None, "CPU workers: outside the GPU validation; scripts/validate_local_ddp.py checks them on your machine"
    if nodes > 1:
        one = groups.get("one_node")
        within = f"; within one node ±{float(one['logo']):.1f} %" if one else ""
        g = groups.get("multi_node")
        if not g or not g.get("rows"):
            return None, f"not validated across nodes: no measured multi-node run to compare with{within}"
        bias = float(g.get("bias_pct", 0.0))
        way = f"they ran {-bias:.0f} % slower than predicted on average" if bias < 0 else f"they ran {bias:.0f} % faster than predicted on average"
        return float(g["fit"]), (f"MAPE over {g['rows']} measured multi-node runs ({g.get('basis', 'scripts/validate.py')}): "
                                 f"{way}{within}")
    key = "single_gpu" if gpus <= 1 else "one_node"
    g = groups.get(key)
    if not g:
        return None, "no validation figures shipped"
    what = "single-GPU" if key == "single_gpu" else "one-node multi-GPU"
    return float(g["logo"]), f"leave-one-GPU-out MAPE over {g['rows']} measured {what} runs, scripts/validate.py"
