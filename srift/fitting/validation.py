"""Comparing predictions with measurements: MAPE, the same run on other systems, the simulator on
measured one-node rows, and model-free checks of measured DDP scaling.

Used by ``scripts/validate.py`` and ``scripts/fit_models.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from typing import Any, Iterable

import numpy as np
import pandas as pd

from srift.catalog.spec import cluster_from_spec
from srift.cluster import ETHERNET, Cluster, NodeGroup, network_of
from srift.fitting.datasets import ProfileSource, label_key, row_link
from srift.job import Job
from srift.perf import comm as CM
from srift.perf import compute as C
from srift.profile import DeviceInfo, PhaseTimes, Profile
from srift.simulate import Predictor
from srift.simulate.breakdown import COMM_INTERFERENCE

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


# Node-group fields a measured row may carry (what its NCCL ran with, when the source says).
_ROW_TRANSPORT = ("nccl_socket_threads", "nccl_nsocks_perthread", "placement_group")


def _given(r, name: str):
    v = getattr(r, name, None)
    return None if v is None or (isinstance(v, float) and np.isnan(v)) or v == "" else v


def row_cluster(r, n_gpus: int | None = None) -> Cluster:
    """The cluster a measured row ran on (``n_gpus``: that many GPUs of its system on one node).

    An EC2 row (``instance``) is the catalog's instance type x its ``nodes``; a row with ``nodes``
    and a ``network`` (ddl-benchmarks) is that many nodes of ``gpus_per_node``; any other row is one
    node. A row's NCCL settings (``nccl_socket_threads`` ...) replace the platform's defaults.
    """
    instance = _given(r, "instance")
    nodes = _given(r, "nodes")
    if n_gpus is not None:
        return Cluster(str(r.label), (NodeGroup(1, int(n_gpus), r.gpu, row_link(r), 100.0, ETHERNET),))
    if isinstance(instance, str):
        cluster = cluster_from_spec(f"{instance}:{int(r.nodes)}")
    elif nodes is not None and _given(r, "network"):
        cluster = Cluster(str(r.label), (NodeGroup(int(nodes), int(r.gpus_per_node), r.gpu, row_link(r),
                                                   float(r.network_gbps), network_of(r.network)),))
    else:
        return Cluster(str(r.label), (NodeGroup(1, int(r.n_gpus), r.gpu, row_link(r), 100.0, ETHERNET),))
    extra: dict[str, Any] = {k: (bool(v) if k == "placement_group" else int(v))
                             for k in _ROW_TRANSPORT if (v := _given(r, k)) is not None}
    if extra:
        cluster = dataclasses.replace(cluster, node_groups=tuple(dataclasses.replace(g, **extra) for g in cluster.node_groups))
    return cluster


def row_job(r) -> Job:
    """The job of a measured row: its per-GPU batch and precision; its ``data_loading`` when the
    source says (ddl-benchmarks: synthetic; DAWNBench: JPEGs), else synthetic: the other sources
    are throughput benchmarks, predicted without an input pipeline as before; its recipe's
    gradient all-reduce (``bucket_cap_mb``, ``grad_compression``) when the source's code states one; its
    training ``stack`` where the row names one (srift/stacks.py)."""
    extra: dict[str, Any] = {k: v for k in ("bucket_cap_mb", "grad_compression", "stack") if (v := _given(r, k)) is not None}
    return Job(batch_size=int(r.batch_per_gpu), precision=r.precision, data_loading=_given(r, "data_loading") or "synthetic",
               **extra)


SIMULATED = ["pred", "ideal", "hidden"]


def _simulated(profile: Profile, cluster: Cluster, job: Job) -> tuple[float, float, float]:
    """(iteration, the same without all-reduce interference, the hidden all-reduce seconds the
    interference ``k`` multiplies: those hidden behind backward x the GPUs' share of them)."""
    predictor = Predictor(profile, job)
    p = predictor.predict(cluster)
    b = p.breakdown
    hidden = b.hidden_comm_s
    if cluster.nodes > 1 and hidden > 0:
        hidden *= CM.CommModel.for_cluster(cluster).gpu_side_fraction(predictor.bucket_sizes_bytes)
    return p.iteration_time_s, p.iteration_time_s - b[COMM_INTERFERENCE], hidden


def simulate_rows(rows: pd.DataFrame, profiles: ProfileSource, n_gpus: int | None = None) -> pd.DataFrame:
    """Simulator predictions for measured rows (``n_gpus`` overrides the row's count, on one node).

    Returns columns ``pred`` (iteration seconds), ``ideal`` (the same without all-reduce
    interference) and ``hidden`` (all-reduce seconds hidden behind backward, across nodes times
    the GPUs' share of them: ``pred = ideal + k x hidden``), in row order.
    """
    out = [_simulated(profiles.for_row(r), row_cluster(r, n_gpus), row_job(r)) for r in rows.itertuples()]
    return pd.DataFrame(out, columns=SIMULATED, index=rows.index)


def anchored_profile(profile: Profile, gpu: str, precision: str, measured_s: float) -> Profile:
    """``profile`` as if ``srift profile`` had measured it on one ``gpu`` at ``precision`` in
    ``measured_s`` per iteration: the compute model's per-layer, optimizer and overhead times
    scaled to that total (what a user's measured profile gives the simulator). Multi-GPU
    predictions from it carry no compute-model error: only the communication's and the overlap's."""
    lt = C.layer_times(profile, gpu, precision)
    scale = measured_s / lt.total_s
    layers = [dataclasses.replace(layer, fwd_s=float(f * scale), bwd_s=float(b * scale))
              for layer, f, b in zip(profile.layers, lt.fwd_s, lt.bwd_s)]
    phases = PhaseTimes(data_s=0.0, forward_s=lt.forward_s * scale, backward_s=lt.backward_s * scale,
                        optimizer_s=lt.optimizer_s * scale, total_s=measured_s)
    return dataclasses.replace(profile, layers=layers, phases=phases, precision=precision,
                               device=DeviceInfo(gpu, "cuda", gpu))


# Anchored profiles by (model, batch, seq_len, GPU, precision, 1-GPU time): the fits simulate the
# same rows many times.
_ANCHORED: dict[tuple, Profile] = {}


def simulate_anchored(rows: pd.DataFrame, profiles: ProfileSource) -> pd.DataFrame:
    """``simulate_rows`` from each row's measured 1-GPU time (``t1`` column): compute anchored
    (``anchored_profile``), so the prediction's error is the multi-GPU part's alone."""
    out = []
    for r in rows.itertuples():
        base = profiles.for_row(r)
        key = (id(base), r.gpu, r.precision, float(r.t1))
        prof = _ANCHORED.get(key)
        if prof is None:
            if len(_ANCHORED) > 1024:
                _ANCHORED.clear()
            prof = _ANCHORED[key] = anchored_profile(base, r.gpu, r.precision, float(r.t1))
        out.append(_simulated(prof, row_cluster(r), row_job(r)))
    return pd.DataFrame(out, columns=SIMULATED, index=rows.index)


@contextlib.contextmanager
def using_params(compute: C.ComputeParams | None = None, comm: CM.CommParams | None = None) -> Iterator[None]:
    """Run the simulator on these parameters instead of the shipped ones (fits and leave-out refits)."""
    shipped_c, shipped_m = C.load_params, CM.load_params
    if compute is not None:
        C.load_params = lambda path=None, _p=compute: _p  # type: ignore[assignment]
    if comm is not None:
        CM.load_params = lambda path=None, _p=comm: _p  # type: ignore[assignment]
    CM._MODEL_CACHE.clear()
    try:
        yield
    finally:
        C.load_params, CM.load_params = shipped_c, shipped_m
        CM._MODEL_CACHE.clear()


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
