"""Fitting the communication model (srift/perf/comm.py): each link class's latency and
efficiency curve from measured all-reduce times, its spread from repeated runs, and the
all-reduce's interference with backward from measured one-node DDP scaling.

Used by ``scripts/fit_models.py`` (configs/perf/comm.json) and ``scripts/validate.py``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from srift.cluster import Cluster, NodeGroup
from srift.fitting.validation import mape
from srift.perf.comm import CommModel, CommParams, LinkClass

def _cluster_of(row: Any) -> Cluster:
    return Cluster("fit", (NodeGroup(int(row.nodes), int(row.gpus_per_node), "H100", str(row.intra_node),
                                     float(row.network_gbps) or 1.0, str(row.network)),))


def comm_times(rows: pd.DataFrame, params) -> np.ndarray:
    """Model all-reduce p50 seconds for each NCCL row under ``params``."""
    out = np.empty(len(rows))
    for key, idx in rows.groupby(["nodes", "gpus_per_node", "intra_node", "network_gbps", "network"]).groups.items():
        sub = rows.loc[idx]
        model = CommModel(_cluster_of(sub.iloc[0]), params=params)
        out[rows.index.get_indexer(idx)] = model.allreduce_time_s(sub["size_bytes"].to_numpy())
    return out


def fit_link_class(rows: pd.DataFrame, base, cls_name: str, start: tuple[float, float, float, float],
                   fixed_shape: float | None = None):
    """Least-squares fit (log time) of one class's (alpha, eff_max, s_half, shape), other classes
    fixed; ``fixed_shape`` pins the shape (for classes with too few points to fit four numbers)."""
    y = np.log(rows["time_s"].to_numpy())
    p90 = base.classes[cls_name].p90_ratio

    def params_of(x: np.ndarray) -> CommParams:
        a, e, h, s = np.exp(x) if fixed_shape is None else (*np.exp(x), fixed_shape)
        classes = dict(base.classes)
        classes[cls_name] = LinkClass(alpha_s=a, eff_max=e, s_half_bytes=h, shape=s, p90_ratio=p90)
        return CommParams(classes)

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(comm_times(rows, params_of(x))) - y

    lo, hi = [1e-8, 0.05, 1e3, 0.3], [1e-3, 1.5, 1e10, 3.0]
    n = 4 if fixed_shape is None else 3
    x0 = np.log(np.array(start[:n]))
    bounds = (np.log(lo[:n]), np.log(hi[:n]))
    res = least_squares(resid, x0, bounds=bounds, method="trf")
    return params_of(res.x).classes[cls_name], float(np.sqrt(np.mean(res.fun ** 2)))


def log_spread_to_p90(sigma: float) -> float:
    """p90/p50 of a log-normal with log standard deviation ``sigma``."""
    return float(math.exp(1.2815515655446004 * sigma))


def efa_sigma(data_dir: Path) -> tuple[float, int]:
    """Log spread of EFA all-reduce time between two independent runs of the same setup (2x p5,
    blocks 2 and 3 of nccl-tests-aws), at every message size both report."""
    df = pd.read_csv(Path(data_dir) / "nccl-tests-aws" / "allreduce_awsome_distributed_training.csv")
    p5 = df[(df["instance_type"] == "p5.48xlarge") & (df["nodes"].astype(str) == "2") & (df["size_bytes"] > 0)]
    a = p5[p5["block"] == 2].set_index("size_bytes")["oop_time_us"]
    b = p5[p5["block"] == 3].set_index("size_bytes")["oop_time_us"]
    common = a.index.intersection(b.index)
    d = np.log(a[common].astype(float).to_numpy() / b[common].astype(float).to_numpy())
    # The difference of two iid log-normal draws has standard deviation sigma * sqrt(2).
    return float(np.sqrt(np.mean(d ** 2)) / math.sqrt(2.0)), len(common)


def ethernet_sigma(data_dir: Path) -> tuple[float, int]:
    """Log spread of the step time of multi-worker runs over GCE ethernet (CM-DARE, 2-8 workers),
    median over runs of the per-run standard deviation of log step time (first 2 samples dropped)."""
    base = Path(data_dir) / "cm-dare" / "speed_and_cluster_size"
    sigmas = []
    for f in sorted(base.glob("*/*worker*/run_*.csv")):
        m = re.search(r"worker(\d+)", f.parent.name)
        if not m or int(m.group(1)) < 2:
            continue
        v = pd.read_csv(f)["Value"].to_numpy(dtype=float)[2:]
        v = v[v > 0]
        if len(v) >= 10:
            sigmas.append(float(np.std(np.log(1.0 / v))))
    return float(np.median(sigmas)), len(sigmas)


def intra_sigma(rows: pd.DataFrame) -> tuple[float, int]:
    """Log spread of NVSwitch all-reduce time across SuperBench NDv4/NDmv4 baselines (different
    nodes and versions of the same 8x A100 platform), sizes >= 64 MiB."""
    sb = rows[rows["source"].str.startswith("superbench") & (rows["intra_node"] == "nvswitch") & (rows["size_bytes"] >= 2**26)]
    logs = sb.groupby("size_bytes")["time_s"].apply(lambda s: np.std(np.log(s.to_numpy())))
    return float(logs.mean()), int(len(sb))


def fit_overlap_interference(scaling: np.ndarray, ideal_n: np.ndarray, hidden_n: np.ndarray,
                             pred_1: np.ndarray, grid: np.ndarray | None = None) -> tuple[float, float]:
    """The interference ``k`` that best predicts measured DDP scaling, and its MAPE (%).

    Predicted scaling = (ideal_n + k * hidden_n) / pred_1, compared with the measured
    t_n / t_1 of the same system: a ratio, so the compute model's error on that GPU cancels and
    ``k`` sees only what the communication adds. A grid search (k in 0..3, step 0.05) keeps the
    fit deterministic and robust to the few badly scaling systems.
    """
    grid = np.arange(0.0, 3.0001, 0.05) if grid is None else grid
    errs = [mape((ideal_n + k * hidden_n) / pred_1, scaling) for k in grid]
    i = int(np.argmin(errs))
    return float(grid[i]), float(errs[i])
