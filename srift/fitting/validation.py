"""Comparing predictions with measurements: MAPE, the same run on other systems, the simulator on
measured one-node rows, and model-free checks of measured DDP scaling.

Used by ``scripts/validate.py`` and ``scripts/fit_models.py``.
"""

from __future__ import annotations

import re
from typing import Iterable

import numpy as np
import pandas as pd

from srift.catalog.spec import cluster_from_spec
from srift.cluster import Cluster, NodeGroup
from srift.fitting.datasets import ProfileSource, label_key, row_link
from srift.job import Job
from srift.simulate import predict

def mape(pred: Iterable[float], meas: Iterable[float]) -> float:
    p, m = np.asarray(list(pred), float), np.asarray(list(meas), float)
    return float(np.mean(np.abs(p - m) / m) * 100.0) if len(m) else float("nan")


def same_gpu_repeats(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows measured on another system with the same GPU model and count as well (same model,
    precision, per-GPU batch and source; another host, vendor or form factor), with ``others_s``:
    the mean of those other systems' iteration times. On single GPUs it is what a profile
    measured on one machine predicts for another machine with the GPU srift treats as the same
    (srift's A100-40GB and A100-80GB each cover the PCIe card and the SXM4 module); on several,
    how far one system's measurement is from another's."""
    key = ["gpu", "n_gpus", "model", "precision", "batch_per_gpu", "source"]
    out = []
    for pos in rows.groupby(key).indices.values():
        labels = rows["label"].to_numpy()[pos]
        times = rows["iteration_time_s"].to_numpy()[pos]
        if len(set(labels)) < 2:
            continue
        out += [(p, float(times[labels != label].mean())) for p, label in zip(pos, labels)]
    out.sort()
    return rows.iloc[[p for p, _ in out]].assign(others_s=[v for _, v in out])


def simulate_rows(rows: pd.DataFrame, profiles: ProfileSource, n_gpus: int | None = None) -> pd.DataFrame:
    """Simulator predictions for measured one-node rows (``n_gpus`` overrides the row's count).

    Returns columns ``pred`` (iteration seconds), ``ideal`` (the same without all-reduce
    interference) and ``hidden`` (all-reduce seconds hidden behind backward), in row order.
    """
    out = []
    for r in rows.itertuples():
        n = int(n_gpus or r.n_gpus)
        instance = getattr(r, "instance", None)
        if isinstance(instance, str) and n_gpus is None:
            # A measured EC2 cluster: the catalog's instance (GPUs, link, network) x its nodes.
            cluster = cluster_from_spec(f"{instance}:{int(r.nodes)}")
        else:
            cluster = Cluster(str(r.label), (NodeGroup(1, n, r.gpu, row_link(r), 100.0, "ethernet"),))
        p = predict(profiles.for_row(r), cluster, Job(batch_size=int(r.batch_per_gpu), precision=r.precision))
        b = p.breakdown
        out.append((p.iteration_time_s, p.iteration_time_s - b["comm_interference"],
                    max(0.0, b["comm_total"] - b["exposed_comm"])))
    return pd.DataFrame(out, columns=["pred", "ideal", "hidden"], index=rows.index)


def system_of(label: str) -> str:
    """A system label without its GPU count (``Dell 8x H100 80GB SXM5`` -> ``Dell H100 80GB SXM5``)
    or NVLink bridge (``4x RTX 2080Ti NVLink``: its 1-GPU row is the card's)."""
    return re.sub(r"\s+NVLink$", "", label_key(re.sub(r"\b\d+\s*x\s*", "", str(label))), flags=re.I).strip()


def scaling_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """Multi-GPU rows with the 1-GPU row of the same system, model, precision, per-GPU batch and
    source: ``t1`` is the 1-GPU iteration time, ``scaling`` = t_n / t_1 (1 = perfect)."""
    key = ["system", "model", "precision", "batch_per_gpu", "source"]
    rows = rows.assign(system=rows["label"].map(system_of))
    one = rows[rows["n_gpus"] == 1].groupby(key, as_index=False)["iteration_time_s"].median()
    multi = rows[rows["n_gpus"] > 1].reset_index(drop=True)
    pairs = multi.merge(one.rename(columns={"iteration_time_s": "t1"}), on=key, how="inner")
    return pairs.assign(scaling=pairs["iteration_time_s"] / pairs["t1"])


def scaling_anomalies(rows: pd.DataFrame, superlinear: float = 0.9, flat_gain: float = 1.05) -> tuple[np.ndarray, np.ndarray]:
    """Model-free checks of measured multi-GPU rows against the same system's rows with fewer GPUs
    (same model, precision, per-GPU batch and source), in row order:

    - super-linear: the iteration is shorter than ``superlinear`` times the fastest such row's,
      i.e. each GPU got more than 10 % faster by adding GPUs, which data parallelism cannot do;
    - flat: the whole-system throughput is at most ``flat_gain`` times the best such row's, i.e.
      the added GPUs bought nothing.
    """
    key = pd.DataFrame({"system": rows["label"].map(system_of), "model": rows["model"], "precision": rows["precision"],
                        "batch": rows["batch_per_gpu"], "source": rows["source"]})
    fast = np.zeros(len(rows), dtype=bool)
    flat = np.zeros(len(rows), dtype=bool)
    for _, idx in key.groupby(list(key.columns)).groups.items():
        sub = rows.loc[idx]
        for i, r in zip(idx, sub.itertuples()):
            fewer = sub[sub["n_gpus"] < r.n_gpus]
            if not len(fewer):
                continue
            pos = rows.index.get_loc(i)
            fast[pos] = r.iteration_time_s < superlinear * fewer["iteration_time_s"].min()
            flat[pos] = r.throughput_total <= flat_gain * fewer["throughput_total"].max()
    return fast, flat
