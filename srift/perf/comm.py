"""Collective-communication time (all-reduce, all-gather, reduce-scatter, broadcast) on a cluster.

All-reduce of ``S`` bytes over ``n`` workers (``N`` nodes of ``g`` GPUs):

- one node: ring over the intra-node link,
  ``t = latency + 2(n-1)/n * S / (B_link * eff_link(S))``;
- several nodes: hierarchical and pipelined (what NCCL does with one ring or tree per NIC): the
  intra-node reduce-scatter/all-gather and the inter-node all-reduce of the node's shard run
  concurrently, so the slower stage sets the pace:
  ``t = latency + max(2(g-1)/g * S / (B_link * eff_link(S)), 2(N-1)/N * S / (B_net * eff_net(S)))``.

``eff(S) = eff_max / (1 + (s_half / S) ** shape)`` is the fraction of the nominal bandwidth a
message of ``S`` bytes reaches (small messages are dominated by protocol and pipeline start-up).
Latency is ``2(g-1) * alpha_link`` within a node plus ``2 ceil(log2 N) * alpha_net`` across nodes
(tree). The per-class parameters (link: nvlink, nvswitch, nvswitch4, pcie, shared-memory; network: efa,
infiniband, ethernet) are fitted by ``scripts/fit_models.py`` to data/nccl-tests-aws and the
SuperBench NCCL results and shipped in ``configs/perf/comm.json``, with each class's p90/p50 ratio
(cloud ethernet varies more than EFA or InfiniBand).

Mixed clusters run at the slowest link and network of any node group. A measured curve in
``cluster.comm_calibration`` (from ``srift calibrate comm``) replaces the model (log-log
interpolation); its broadcast, all-gather and reduce-scatter curves, when it has them, serve those
collectives, otherwise they are read off the all-reduce curve. One worker: 0 seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Callable

import numpy as np

from srift.cluster import Cluster
from srift.errors import SriftError
from srift.files import configs_dir, read_json
from srift.hardware import CPU, gpu as gpu_spec, link as link_spec

PARAMS_SCHEMA = "srift.perf.comm/v1"
_Z90 = NormalDist().inv_cdf(0.9)


@dataclass(frozen=True)
class LinkClass:
    """Fitted behaviour of one kind of link or network.

    Attributes:
        alpha_s: Latency per algorithm step (seconds).
        eff_max: Large-message fraction of the nominal bandwidth reached (bus bandwidth).
        s_half_bytes: Message size where the efficiency is half of ``eff_max`` (shape 1).
        shape: Steepness of the efficiency-vs-size curve.
        p90_ratio: p90 / p50 of the communication time (run-to-run and tenant variation).
    """

    alpha_s: float
    eff_max: float
    s_half_bytes: float
    shape: float
    p90_ratio: float

    def efficiency(self, size_bytes: np.ndarray) -> np.ndarray:
        s = np.maximum(size_bytes, 1.0)
        return self.eff_max / (1.0 + (self.s_half_bytes / s) ** self.shape)


@dataclass(frozen=True)
class CommParams:
    """Per-class link parameters (configs/perf/comm.json).

    Attributes:
        classes: Fitted behaviour per link or network class.
        overlap_interference: Seconds added to a GPU iteration per second of all-reduce that runs
            behind backward: NCCL kernels share the SMs and memory bandwidth with the backward
            kernels, so hiding communication is not free. Fitted to measured one-node DDP scaling
            (scripts/fit_models.py); 0 is the ideal-overlap model.
        meta: Provenance, carried but unused by the model.
    """

    classes: dict[str, LinkClass]
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    overlap_interference: float = 0.0

    def get(self, name: str) -> LinkClass:
        if name not in self.classes:
            raise SriftError(f"the communication model has no parameters for '{name}'.", "re-run scripts/fit_models.py.")
        return self.classes[name]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": PARAMS_SCHEMA, "classes": {k: vars(v) for k, v in self.classes.items()},
                "overlap_interference": self.overlap_interference, **self.meta}

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "comm params") -> "CommParams":
        if not isinstance(d, dict) or d.get("schema") != PARAMS_SCHEMA:
            raise SriftError(f"{source} is not a '{PARAMS_SCHEMA}' file.", "re-run scripts/fit_models.py.")
        classes = {k: LinkClass(**{f: float(v[f]) for f in ("alpha_s", "eff_max", "s_half_bytes", "shape", "p90_ratio")})
                   for k, v in d["classes"].items()}
        k = float(d.get("overlap_interference", 0.0))
        if not 0.0 <= k <= 10.0:
            raise SriftError(f"{source}: overlap_interference {k} is outside [0, 10].", "re-run scripts/fit_models.py.")
        return cls(classes, {k2: v for k2, v in d.items() if k2 not in ("schema", "classes", "overlap_interference")}, k)


def params_path() -> Path:
    return configs_dir() / "perf" / "comm.json"


@functools.lru_cache(maxsize=4)
def load_params(path: str | None = None) -> CommParams:
    """The shipped (fitted) communication parameters, or those in ``path``."""
    p = Path(path) if path else params_path()
    data = read_json(p, "communication-model parameters", "reinstall srift-planner, or re-run scripts/fit_models.py.")
    return CommParams.from_dict(data, str(p))


def link_class(intra_node: str) -> str:
    """Parameter class of an intra-node link name (``pcie4`` -> ``pcie``). NVSwitch generations with
    in-switch reduction (NVLink 4 and 5: ``nvswitch4``, ``nvswitch5``) form the ``nvswitch4`` class."""
    if intra_node in ("nvswitch4", "nvswitch5"):
        return "nvswitch4"
    if intra_node.startswith("pcie"):
        return "pcie"
    if intra_node == "nvlink-bridge":
        return "nvlink"
    return intra_node


def _quantile_factor(p90_ratio: float, quantile: float) -> float:
    """Multiplier of the p50 time for a quantile (log-normal spread with the class's p90/p50)."""
    if quantile == 0.5:
        return 1.0
    if not 0.0 < quantile < 1.0:
        raise SriftError(f"quantile must be between 0 and 1, got {quantile}.", "use e.g. 0.5 or 0.9.")
    return float(math.exp(math.log(p90_ratio) * NormalDist().inv_cdf(quantile) / _Z90))


@dataclass(frozen=True)
class Topology:
    """What the collective time depends on (the cache key of a CommModel)."""

    workers: int
    nodes: int
    gpus_per_node: int
    link_gbytes_per_s: float
    link_class: str
    net_gbytes_per_s: float
    net_class: str


def _link_gbytes_per_s(group) -> float:
    """Nominal intra-node bandwidth of a node group. Over PCIe without peer-to-peer (GeForce
    cards, ``pcie_p2p: false`` in configs/gpus.yaml) NCCL stages each transfer through host
    memory, so every byte crosses PCIe twice: half the bandwidth."""
    bw = link_spec(group.intra_node).bandwidth_gb_per_s
    if group.intra_node.startswith("pcie") and group.gpu != CPU and not gpu_spec(group.gpu).pcie_p2p:
        return bw / 2.0
    return bw


def topology(cluster: Cluster) -> Topology:
    """Reduce a (possibly mixed) cluster to its bottleneck topology: slowest link and network."""
    groups = cluster.node_groups
    multi = [g for g in groups if g.gpus_per_node > 1]
    slow = min(multi, key=_link_gbytes_per_s) if multi else groups[0]
    link_bw, lclass = _link_gbytes_per_s(slow), link_class(slow.intra_node)
    slow_net = min(groups, key=lambda g: g.network_gbps)
    if cluster.nodes > 1 and slow_net.network_gbps <= 0:
        raise SriftError(
            f"cluster '{cluster.name}' has {cluster.nodes} nodes but a node group without network bandwidth.",
            "set network_gbps (Gbit/s) on every node group of a multi-node cluster.",
        )
    # The network class of the slowest group; a mix of EFA and plain ethernet runs at ethernet.
    nets = {g.network for g in groups}
    net_class = "ethernet" if "ethernet" in nets else ("efa" if "efa" in nets else "infiniband")
    return Topology(
        workers=cluster.gpus,
        nodes=cluster.nodes,
        gpus_per_node=max(g.gpus_per_node for g in groups),
        link_gbytes_per_s=link_bw,
        link_class=lclass,
        net_gbytes_per_s=slow_net.network_gbps / 8.0,
        net_class=net_class,
    )


class CommModel:
    """All-reduce and broadcast times on one cluster (see module docstring).

    Build with ``CommModel(cluster)`` or the cached ``CommModel.for_cluster(cluster)``.
    """

    def __init__(self, cluster: Cluster, params: CommParams | None = None, _topology: Topology | None = None) -> None:
        self.cluster = cluster
        self.topology = _topology or topology(cluster)
        self.params = params or load_params()
        calib = cluster.comm_calibration
        self.calibration = _Calibration.from_dict(calib, self.topology.workers) if calib else None
        # Measured broadcast, all-gather and reduce-scatter curves (srift calibrate comm writes
        # them) serve those collectives directly.
        self.broadcast_calibration = _Calibration.of(calib, "broadcast", self.topology.workers)
        self.all_gather_calibration = _Calibration.of(calib, "all_gather", self.topology.workers)
        self.reduce_scatter_calibration = _Calibration.of(calib, "reduce_scatter", self.topology.workers)
        t = self.topology
        self._link = self.params.get(t.link_class)
        self._net = self.params.get(t.net_class) if t.nodes > 1 else None

    @classmethod
    def for_cluster(cls, cluster: Cluster) -> "CommModel":
        """A cached model: clusters with the same topology (and no calibration) share one."""
        if cluster.comm_calibration:
            return cls(cluster)
        topo = topology(cluster)
        model = _MODEL_CACHE.get(topo)
        if model is None:
            if len(_MODEL_CACHE) > 4096:
                _MODEL_CACHE.clear()
            model = _MODEL_CACHE[topo] = cls(cluster, _topology=topo)
        return model

    # ---- collectives ---------------------------------------------------------------------
    def allreduce_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        """Seconds to all-reduce ``size_bytes`` (a number or an array of sizes) over all workers."""
        return self._collective(size_bytes, quantile, self._allreduce_model, 1.0)

    def all_gather_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        """Seconds to all-gather ``size_bytes`` (the gathered, unsharded size) over all workers.

        Ring (and, across nodes, hierarchical) all-gather moves ``(n-1)/n`` of the bytes over each
        link: half an all-reduce's traffic (an all-reduce is a reduce-scatter and an all-gather),
        on the same per-class bandwidth, efficiency and latency terms, with half its ring steps.
        A measured all-gather curve is read as it is; without one, a measured all-reduce curve is
        read at half the size.
        """
        if self.all_gather_calibration is not None:
            return self._measured(self.all_gather_calibration, size_bytes, quantile)
        return self._collective(size_bytes, quantile, self._half_allreduce_model, 0.5)

    def reduce_scatter_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        """Seconds to reduce-scatter ``size_bytes`` (the unsharded gradient size): the other half
        of an all-reduce, priced as ``all_gather_time_s`` (or read off a measured reduce-scatter
        curve)."""
        if self.reduce_scatter_calibration is not None:
            return self._measured(self.reduce_scatter_calibration, size_bytes, quantile)
        return self._collective(size_bytes, quantile, self._half_allreduce_model, 0.5)

    def _measured(self, curve: "_Calibration", size_bytes: float | np.ndarray, quantile: float) -> float | np.ndarray:
        """A collective read off its own measured curve (0 for one worker or an empty message)."""
        scalar = np.ndim(size_bytes) == 0
        s = np.asarray(size_bytes, dtype=float)
        out = np.where(s > 0, curve.time_s(s, quantile), 0.0) if self.topology.workers > 1 else np.zeros_like(s)
        return float(out) if scalar else out

    def within_node(self) -> "CommModel":
        """The collectives of one node's GPUs among themselves (HSDP's shard group): this
        cluster's intra-node link, one node. Model-based (a measured curve is of the whole cluster)."""
        t = self.topology
        return self._derived(dataclasses.replace(t, workers=t.gpus_per_node, nodes=1))

    def across_nodes(self) -> "CommModel":
        """The collectives between nodes of one GPU per node, each over its own share of the node's
        network (HSDP's replica groups: the ``g`` GPUs of a node run ``g`` such collectives at
        once, one per NIC share): ``nodes`` workers, ``network / g`` each. An all-reduce of a
        ``S / g`` shard here takes the inter-node term of a hierarchical all-reduce of ``S``."""
        t = self.topology
        return self._derived(dataclasses.replace(t, workers=t.nodes, gpus_per_node=1,
                                                 net_gbytes_per_s=t.net_gbytes_per_s / max(t.gpus_per_node, 1)))

    def _derived(self, topo: Topology) -> "CommModel":
        model = _DERIVED_CACHE.get(topo)
        if model is None or model.params is not self.params:
            if len(_DERIVED_CACHE) > 4096:
                _DERIVED_CACHE.clear()
            plain = dataclasses.replace(self.cluster, comm_calibration=None)
            model = _DERIVED_CACHE[topo] = CommModel(plain, self.params, _topology=topo)
        return model

    def broadcast_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        """Seconds to broadcast ``size_bytes`` from one worker to all (pipelined ring/tree)."""
        # A pipelined broadcast moves each byte over each link once; an all-reduce moves
        # 2(n-1)/n: a measured all-reduce curve is read at the size scaled by that ratio.
        n = self.topology.workers
        if self.broadcast_calibration is not None:
            return self._measured(self.broadcast_calibration, size_bytes, quantile)
        return self._collective(size_bytes, quantile, self._broadcast_model, n / (2.0 * (n - 1)) if n > 1 else 1.0)

    def _collective(self, size_bytes: float | np.ndarray, quantile: float,
                    model: Callable[[np.ndarray], np.ndarray], calib_size_factor: float) -> float | np.ndarray:
        scalar = np.ndim(size_bytes) == 0
        s = np.asarray(size_bytes, dtype=float)
        if self.topology.workers <= 1:
            out = np.zeros_like(s)
        elif self.calibration is not None:
            out = self.calibration.time_s(s * calib_size_factor, quantile)
        else:
            out = model(s) * self._spread(quantile)
        out = np.where(s > 0, out, 0.0)
        return float(out) if scalar else out

    def gpu_side_fraction(self, size_bytes: np.ndarray) -> float:
        """Share of the all-reduce time of these messages during which the GPUs move the data.

        Within one node it is all of it. Across nodes the network sets the pace and the GPUs'
        part is what the same all-reduce would take over the node's own link (the bytes they copy
        and reduce), so the interference with backward (``overlap_interference``) shrinks with it.
        """
        t = self.topology
        s = np.asarray(size_bytes, dtype=float)
        if t.workers <= 1 or t.nodes == 1 or not len(s):
            return 1.0
        n = t.workers
        link_bw = t.link_gbytes_per_s * 1e9
        gpu_side = 2.0 * (n - 1) / n * s / (link_bw * self._link.efficiency(s))
        total = self._allreduce_model(s)
        return float(min(1.0, gpu_side.sum() / max(total.sum(), 1e-30)))

    # ---- model internals -----------------------------------------------------------------
    def _spread(self, quantile: float) -> float:
        cls = self._net if self._net is not None else self._link
        return _quantile_factor(cls.p90_ratio, quantile)

    def _latency_s(self) -> float:
        t = self.topology
        lat = 2.0 * (t.gpus_per_node - 1) * self._link.alpha_s if t.gpus_per_node > 1 else 0.0
        if self._net is not None:
            lat += 2.0 * math.ceil(math.log2(t.nodes)) * self._net.alpha_s
        return lat

    def _allreduce_model(self, s: np.ndarray) -> np.ndarray:
        t = self.topology
        link_bw = t.link_gbytes_per_s * 1e9
        if t.nodes == 1:
            n = t.workers
            return self._latency_s() + 2.0 * (n - 1) / n * s / (link_bw * self._link.efficiency(s))
        g, nn = t.gpus_per_node, t.nodes
        intra = 2.0 * (g - 1) / g * s / (link_bw * self._link.efficiency(s)) if g > 1 else 0.0 * s
        inter = 2.0 * (nn - 1) / nn * s / (t.net_gbytes_per_s * 1e9 * self._net.efficiency(s))  # type: ignore[union-attr]
        return self._latency_s() + np.maximum(intra, inter)

    def _half_allreduce_model(self, s: np.ndarray) -> np.ndarray:
        """All-gather or reduce-scatter: half an all-reduce's latency and bandwidth terms."""
        return self._allreduce_model(s) * 0.5

    def _broadcast_model(self, s: np.ndarray) -> np.ndarray:
        t = self.topology
        link_bw = t.link_gbytes_per_s * 1e9
        stage = s / (link_bw * self._link.efficiency(s)) if t.gpus_per_node > 1 else 0.0 * s
        if self._net is not None:
            stage = np.maximum(stage, s / (t.net_gbytes_per_s * 1e9 * self._net.efficiency(s)))
        return self._latency_s() / 2.0 + stage


# Clusters with the same topology share one model (the recommender builds thousands of clusters).
_MODEL_CACHE: dict[Topology, CommModel] = {}
# Sub-topologies of a cluster (HSDP's shard and replica groups), by topology (the parameters
# are checked by identity: they are loaded once).
_DERIVED_CACHE: dict[Topology, CommModel] = {}


@dataclass(frozen=True)
class _Calibration:
    """A measured all-reduce curve, interpolated log-log."""

    log_sizes: np.ndarray
    log_p50: np.ndarray
    log_p90: np.ndarray
    scale: float

    @classmethod
    def of(cls, calib: dict[str, Any] | None, name: str, workers: int) -> "_Calibration | None":
        """The measured curve of collective ``name`` (``broadcast``, ``all_gather``,
        ``reduce_scatter``: keys ``<name>_times_s`` and ``<name>_p90_times_s`` beside the shared
        ``sizes_bytes``), or None when the calibration has none."""
        if not calib or not calib.get(f"{name}_times_s"):
            return None
        # A ring all-gather or reduce-scatter moves (n-1)/n of the bytes over each link, so a curve
        # measured on other worker counts scales like the all-reduce's; a pipelined broadcast moves
        # each byte once whatever the count.
        world = None if name == "broadcast" else calib.get("world_size")
        return cls.from_dict({"sizes_bytes": calib["sizes_bytes"], "times_s": calib[f"{name}_times_s"],
                              "p90_times_s": calib.get(f"{name}_p90_times_s"), "world_size": world}, workers)

    @classmethod
    def from_dict(cls, d: dict[str, Any], workers: int) -> "_Calibration":
        try:
            sizes = np.asarray(d["sizes_bytes"], dtype=float)
            p50 = np.asarray(d["times_s"], dtype=float)
            p90 = np.asarray(d.get("p90_times_s") or d["times_s"], dtype=float)
        except (KeyError, TypeError, ValueError):
            raise SriftError("comm_calibration needs numeric 'sizes_bytes' and 'times_s' lists.",
                             "re-run `srift calibrate comm` to write a valid cluster file.") from None
        if sizes.shape != p50.shape or p90.shape != p50.shape or sizes.size < 2 or np.any(sizes <= 0) or np.any(p50 <= 0):
            raise SriftError("comm_calibration sizes and times must be positive lists of equal length (2 or more).",
                             "re-run `srift calibrate comm` to write a valid cluster file.")
        order = np.argsort(sizes)
        # Measured on ``world_size`` workers; the bandwidth term scales with 2(n-1)/n for another n.
        w = int(d.get("world_size") or workers)
        scale = 1.0
        if w > 1 and workers > 1 and w != workers:
            scale = ((workers - 1) / workers) / ((w - 1) / w)
        return cls(np.log(sizes[order]), np.log(p50[order]), np.log(np.maximum(p90[order], p50[order])), scale)

    def time_s(self, s: np.ndarray, quantile: float) -> np.ndarray:
        x = np.log(np.maximum(s, 1.0))
        hi = self.log_sizes[-1]
        p50 = np.interp(x, self.log_sizes, self.log_p50)
        p90 = np.interp(x, self.log_sizes, self.log_p90)
        # Above the largest measured size, time grows linearly with size (bandwidth-bound);
        # below the smallest, the latency floor holds.
        over = np.maximum(x - hi, 0.0)
        p50 = p50 + over
        p90 = p90 + over
        if quantile == 0.5:
            log_t = p50
        else:
            if not 0.0 < quantile < 1.0:
                raise SriftError(f"quantile must be between 0 and 1, got {quantile}.", "use e.g. 0.5 or 0.9.")
            log_t = p50 + (p90 - p50) * NormalDist().inv_cdf(quantile) / _Z90
        return np.exp(log_t) * self.scale
