"""Fitting the communication model (srift/perf/comm.py): each link class's latency and
efficiency curve from measured all-reduce times, its spread from repeated runs, the network
transports (EFA's curve from nccl-tests; the socket transport's per-thread rate and the networks'
step latency from ddl-benchmarks' multi-node scaling; InfiniBand's and RoCE's efficiency from
their wire formats and a measured RDMA write bandwidth), and the all-reduce's interference with
backward from measured DDP scaling.

Used by ``scripts/fit_models.py`` (configs/perf/comm.json) and ``scripts/validate.py``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from srift.cluster import ETHERNET, INFINIBAND, ROCE, Cluster, NodeGroup, network_of
from srift.fitting.datasets import ProfileSource
from srift.fitting.validation import mape, simulate_anchored, using_params
from srift.perf.comm import CommModel, CommParams, LinkClass, NetworkClass


def _cluster_of(row: Any) -> Cluster:
    return Cluster("fit", (NodeGroup(int(row.nodes), int(row.gpus_per_node), "H100", str(row.intra_node),
                                     float(row.network_gbps) or 1.0, network_of(row.network)),))


# ---- physics of the wire (no fitting; TCP's share is srift.perf.comm.tcp_goodput_share) -------
# An InfiniBand packet of a 4096-byte MTU carries LRH 8 + BTH 12 + ICRC 4 + VCRC 2 header bytes;
# RoCE v2 carries the same payload in Ethernet (14 + FCS 4 + preamble 8 + gap 12) + IPv4 20 + UDP 8
# + BTH 12 + ICRC 4 (InfiniBand Architecture Specification; IBTA RoCEv2 annex).
IB_MTU, IB_HEADER_BYTES, ROCE_HEADER_BYTES = 4096, 26, 82


def ib_write_share(data_dir: Path) -> tuple[float, int]:
    """Measured share of the link an RDMA write stream reaches: SuperBench ib-loopback on Azure
    NDv4/NDmv4 (HDR InfiniBand, 200 Gb/s = 25 GB/s data rate), the median over NICs and runs of
    the bandwidth at messages of 1 MiB and more (perftest's MB/s = 10^6 bytes/s), over 25 GB/s."""
    sb = pd.read_csv(Path(data_dir) / "superbench-results" / "all_metrics_flat.csv")
    ib = sb[(sb["benchmark"] == "ib-loopback") & sb["platform"].isin(["Azure-NDv4-A100", "Azure-NDmv4-A100"])]
    size = ib["metric"].str.extract(r"IB_write_(\d+)_Avg")[0].astype(float)
    big = ib[size >= 2**20]["value"].astype(float)
    return float(np.median(big) * 1e6 / 25e9), int(len(big))


def roce_share(ib_share: float) -> float:
    """RoCE v2's share: the measured InfiniBand share x the ratio of the two wire formats' payload
    shares at a 4096-byte MTU (the NIC and its PCIe path are the same)."""
    return ib_share * (IB_MTU / (IB_MTU + ROCE_HEADER_BYTES)) / (IB_MTU / (IB_MTU + IB_HEADER_BYTES))


def comm_times(rows: pd.DataFrame, params: CommParams) -> np.ndarray:
    """Model all-reduce p50 seconds for each NCCL row under ``params``."""
    out = np.empty(len(rows))
    for key, idx in rows.groupby(["nodes", "gpus_per_node", "intra_node", "network_gbps", "network"]).groups.items():
        sub = rows.loc[idx]
        model = CommModel(_cluster_of(sub.iloc[0]), params=params)
        out[rows.index.get_indexer(idx)] = model.allreduce_time_s(sub["size_bytes"].to_numpy())
    return out


def fit_link_class(rows: pd.DataFrame, base: CommParams, cls_name: str, start: tuple[float, float, float, float],
                   fixed_shape: float | None = None) -> tuple[LinkClass, float]:
    """Least-squares fit (log time) of one intra-node class's (alpha, eff_max, s_half, shape) to
    one-node all-reduce times, other classes fixed; ``fixed_shape`` pins the shape."""
    y = np.log(rows["time_s"].to_numpy())
    p90 = base.classes[cls_name].p90_ratio

    def params_of(x: np.ndarray) -> CommParams:
        a, e, h, s = np.exp(x) if fixed_shape is None else (*np.exp(x), fixed_shape)
        classes = dict(base.classes)
        classes[cls_name] = LinkClass(alpha_s=a, eff_max=e, s_half_bytes=h, shape=s, p90_ratio=p90)
        return dataclasses.replace(base, classes=classes)

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


def anchored_scaling_rows(rows: pd.DataFrame, profiles: ProfileSource) -> pd.DataFrame:
    """Measured multi-GPU rows with a measured 1-GPU time (``t1``) as interference-fit rows: the
    columns ``fit_overlap_interference`` takes (``scaling`` = t / t1 measured; ``ideal`` and
    ``hidden`` from the simulator with the compute anchored on t1, over t1; ``pred1`` = 1), and
    the row's ``model`` as the zoo model a leave-one-model-out fit holds out with it (a BERT
    pre-training row goes with the same encoder's SQuAD rows), its ``gpu`` and ``source``."""
    sim = simulate_anchored(rows, profiles)
    t1 = rows["t1"].to_numpy()
    model = [m if m.endswith("-squad") or not m.startswith("bert") else f"{m}-squad" for m in rows["model"]]
    return pd.DataFrame({"scaling": rows["iteration_time_s"].to_numpy() / t1, "ideal": sim["ideal"].to_numpy() / t1,
                         "hidden": sim["hidden"].to_numpy() / t1, "pred1": np.ones(len(rows)), "model": model,
                         "gpu": rows["gpu"].to_numpy(), "source": rows["source"].to_numpy()})


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


# ---- network classes ----------------------------------------------------------------------------
def fit_network_class(rows: pd.DataFrame, base: CommParams, name: str, start: NetworkClass) -> tuple[NetworkClass, float]:
    """Least-squares fit (log time) of one network class's (alpha, efficiency, t_half, shape) to
    measured all-reduce times across nodes (nccl-tests rows), the other classes fixed."""
    y = np.log(rows["time_s"].to_numpy())

    def params_of(x: np.ndarray) -> CommParams:
        a, e, h, sh = np.exp(x)
        cls = dataclasses.replace(start, alpha_s=a, efficiency=min(e, 1.0), t_half_s=h, shape=sh)
        return dataclasses.replace(base, networks={**base.networks, name: cls})

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(comm_times(rows, params_of(x))) - y

    lo, hi = [1e-7, 0.05, 1e-7, 0.3], [1e-2, 1.0, 1e-2, 3.0]
    x0 = np.log([start.alpha_s, start.efficiency, start.t_half_s, start.shape])
    res = least_squares(resid, x0, bounds=(np.log(lo), np.log(hi)), method="trf")
    return params_of(res.x).networks[name], float(np.sqrt(np.mean(res.fun ** 2)))


def scaling_errors(rows: pd.DataFrame, profiles: ProfileSource, params: CommParams) -> np.ndarray:
    """log of predicted over measured ``t_N / t_1 server`` of multi-node rows under ``params``
    (``ref_time_s``: the same job on one server of ``gpus_per_node`` GPUs), the compute anchored on
    each row's measured 1-GPU time (``t1``, ``simulate_anchored``). What is left is what the
    network adds: the compute model's error is gone, and the intra-node all-reduce's (fitted on
    one-node data) cancels in the ratio to the one-server run."""
    one = rows.assign(nodes=1, network="", n_gpus=rows["gpus_per_node"])
    with using_params(comm=params):
        t_n = simulate_anchored(rows, profiles)["pred"].to_numpy()
        t_1 = simulate_anchored(one, profiles)["pred"].to_numpy()  # no network: the same for every class
    return np.log(t_n / t_1) - np.log(rows["iteration_time_s"].to_numpy() / rows["ref_time_s"].to_numpy())


def fit_network_scaling(rows: pd.DataFrame, profiles: ProfileSource, base: CommParams, name: str,
                        fields: tuple[str, ...], start: tuple[float, ...],
                        bounds: tuple[tuple[float, ...], tuple[float, ...]], grid: int = 13,
                        starts: int = 2) -> tuple[NetworkClass, float]:
    """Fit ``fields`` of network class ``name`` (e.g. ``per_thread_gbps``, ``alpha_s``) to measured
    multi-node scaling (``scaling_errors``), least squares in log.

    The error surface has kinks (a limit starts or stops binding) and is flat where a limit never
    binds (a thread limit above every row's link), so a log-spaced grid of ``grid`` points per
    field (inside ``bounds``) ranks starting points; least squares refines the ``starts`` best and
    the best result wins. Among equally good grid points the one with the largest values comes
    first (no limit the rows do not show). ``start`` is used when the grid has no finite point.
    """
    def params_of(x: np.ndarray) -> CommParams:
        values: dict[str, Any] = dict(zip(fields, map(float, np.exp(x))))
        cls = dataclasses.replace(base.networks[name], **values)
        return dataclasses.replace(base, networks={**base.networks, name: cls})

    def resid(x: np.ndarray) -> np.ndarray:
        return scaling_errors(rows, profiles, params_of(x))

    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    axes = [np.linspace(a, b, grid) for a, b in zip(lo, hi)]
    points = np.array(np.meshgrid(*axes, indexing="ij")).reshape(len(fields), -1).T
    costs = np.array([float(np.sum(resid(x) ** 2)) for x in points])
    # Best first; ties broken towards the largest values (lexsort's last key is the primary one).
    order = np.lexsort((*(-points.T[::-1]), costs))
    x0s = [points[i] for i in order[:starts] if np.isfinite(costs[i])] or [np.log(start)]
    fits = [least_squares(resid, x0, bounds=(lo, hi), method="trf", diff_step=1e-3) for x0 in x0s]
    best = min(fits, key=lambda r: float(np.sum(r.fun ** 2)))
    return params_of(best.x).networks[name], float(np.sqrt(np.mean(best.fun ** 2)))


# What the multi-node training rows fit (the socket transport's rows only), and where each search
# starts: the per-thread rate from "no thread limit below a 100 Gb/s link", so that rows that never
# reach the limit leave it there.
SOCKET_FIT = (("per_thread_gbps", "alpha_s"), (100.0, 5e-5), ((1.0, 1e-7), (400.0, 1e-2)))
# InfiniBand's step latency is not fitted: an InfiniBand hop's NIC and switch latency, about 1 us
# (fitted on ddl-benchmarks' InfiniBand rows it sat at this floor: the ring's traffic already
# explains how those rows grow with servers). RoCE takes it.
IB_ALPHA_FLOOR_S = 1e-6


def fit_ddl_networks(rows: pd.DataFrame, profiles: ProfileSource, params: CommParams) -> tuple[CommParams, dict[str, Any]]:
    """Fit the socket transport (per-thread rate, step latency) on ``rows``' TCP rows by
    ``fit_network_scaling``; InfiniBand and RoCE take the fixed 1 us step latency.

    ``rows``: multi-node training rows of any source that also measured the job on one GPU and on
    one node (``t1``, ``ref_time_s``: ``srift.fitting.datasets.multi_node_scaling_rows``). Without
    TCP rows the socket transport keeps its starting point (no thread limit below 100 Gb/s) and
    says so.
    """
    report: dict[str, Any] = {}
    sock = rows[rows["network"] == ETHERNET].reset_index(drop=True)
    eth = dataclasses.replace(params.networks[ETHERNET], per_thread_gbps=SOCKET_FIT[1][0], alpha_s=SOCKET_FIT[1][1])
    params = dataclasses.replace(params, networks={**params.networks, ETHERNET: eth})
    if len(sock):
        eth, rms = fit_network_scaling(sock, profiles, params, ETHERNET, *SOCKET_FIT)
        report[ETHERNET] = {"rows": len(sock), "rms_log_error": round(rms, 4), "fitted": list(SOCKET_FIT[0]),
                            "on": "TCP rows of " + ", ".join(sorted(sock["source"].unique())) + " (" +
                                  ", ".join(sorted(sock["network_label"].unique())) +
                                  "): t_N / t_1 node, compute anchored on the measured 1-GPU time"}
    else:
        report[ETHERNET] = {"rows": 0, "note": "no TCP rows: no thread limit below 100 Gb/s, latency at its start"}
    ib = dataclasses.replace(params.networks[INFINIBAND], alpha_s=IB_ALPHA_FLOOR_S)
    roce = dataclasses.replace(params.networks[ROCE], alpha_s=IB_ALPHA_FLOOR_S)
    report[INFINIBAND] = {"rows": int((rows["network"] == INFINIBAND).sum()), "fitted": [],
                          "note": "step latency fixed at 1 us (an InfiniBand hop); efficiency from the wire format and ib-loopback"}
    return dataclasses.replace(params, networks={**params.networks, ETHERNET: eth, INFINIBAND: ib, ROCE: roce}), report
