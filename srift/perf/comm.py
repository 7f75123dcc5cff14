"""Collective-communication time (all-reduce, broadcast, all-gather, reduce-scatter) on a cluster.

Inside one node NCCL runs a ring over the intra-node link:
``t = 2(n-1) alpha_link + 2(n-1)/n * S / (B_link * eff_link(S))``.

Across nodes the time depends on the *transport* NCCL runs between them, not only on the link's
nominal rate (the cluster file's ``network``):

- ``ethernet``: NCCL's socket transport (TCP). Its large-message rate per node is the smallest of
  three documented limits: the link after TCP/IP framing (``link x efficiency``), what NCCL's
  socket helper threads can push (``threads x per_thread_gbps``: each thread copies through the
  kernel's socket buffers, a CPU limit), and, on EC2, what its TCP flows may carry
  (``threads x sockets per thread x single-flow limit``: 5 Gb/s per flow outside a cluster
  placement group, 10 inside). NCCL's defaults are 1 thread x 1 socket, 2 x 8 on AWS and 4 x 1
  on Google Cloud with gVNIC (NCCL environment-variable documentation); a cluster file may set
  them. The threads cost CPU (``socket_vcpus_per_node``).
- ``efa``, ``infiniband``, ``roce``: RDMA; the rate is ``link x efficiency`` of the class (EFA
  fitted to nccl-tests on p4de and p5; InfiniBand and RoCE from their wire formats).

Every class has its own efficiency-vs-size curve, scaled with the rate it reaches: a message of
``rate x t_half_s`` bytes gets half of it (a fixed start-up time per collective, so a faster
link needs a larger message to reach the same share):
``eff(S) = 1 / (1 + (rate x t_half_s / S) ** shape)``.

Algorithm (``algorithm`` of the class, chosen by what the data show):

- ``ring``: one ring over all ``n = N x g`` ranks; every link of it, the node's network link
  included, carries ``2(n-1)/n x S``, and the ring runs at its slowest link:
  ``t = latency + 2(n-1)/n * S / min(B_link eff_link(S), B_net eff_net(S))``,
  latency ``2N alpha_net + (2(n-1) - 2N) alpha_link`` (NCCL's tuning model: 2N of the ring's
  steps cross the network). ddl-benchmarks (NCCL over TCP and over InfiniBand, 2-8 servers) scale
  as this predicts: the per-node rate they imply is the same on 2, 4 and 8 servers only under the
  ring's traffic.
- ``hierarchical``: the intra-node reduce-scatter/all-gather and the inter-node all-reduce of
  each node's shard run concurrently (NCCL's tree and PXN paths on EFA):
  ``t = latency + max(2(g-1)/g S / (B_link eff_link), 2(N-1)/N S / (B_net eff_net))``, latency
  ``2(g-1) alpha_link + 2 ceil(log2 N) alpha_net``. On two EFA nodes nccl-tests reports bus
  bandwidth above the NICs' line rate (p4de: 78 GB/s over 50 GB/s of EFA), which no ring can do.

All-gather and reduce-scatter of ``S`` bytes (the whole tensor) move half an all-reduce's data
and take half its latency; a broadcast moves each byte over each link once. ``eff_link``:
per-class curves for nvlink, nvswitch, nvswitch4, pcie, shared-memory (fitted to nccl-tests and
SuperBench NCCL results). Each class has a p90/p50 ratio (cloud TCP varies more than RDMA).

Mixed clusters run at the slowest link and network of any node group. A measured curve in
``cluster.comm_calibration`` (from ``srift calibrate comm``) replaces the model (log-log
interpolation); its broadcast, all-gather and reduce-scatter curves, when it has them, serve those
collectives, otherwise they are read off the all-reduce curve. One worker: 0 seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any, Callable

import numpy as np

from srift.cache import CACHE_ENTRIES, BoundedCache
from srift.cluster import Cluster, Network, NodeGroup
from srift.errors import SriftError
from srift.files import configs_dir, read_json
from srift.hardware import CPU, gpu as gpu_spec, link as link_spec
from srift.perf.quantiles import Z90

# The fitted parameters (srift/perf/comm_params.py), the links' and network's rates and the
# Topology (srift/perf/comm_network.py) and a measured curve (srift/perf/comm_calibration.py) live
# in their own modules; every public name of theirs is re-exported here.
from srift.perf.comm_calibration import _Calibration
from srift.perf.comm_network import *
from srift.perf.comm_params import *


def params_path() -> Path:
    return configs_dir() / "perf" / "comm.json"


@functools.lru_cache(maxsize=4)
def load_params(path: str | None = None) -> CommParams:
    """The shipped (fitted) communication parameters, or those in ``path``."""
    p = Path(path) if path else params_path()
    data = read_json(p, "communication-model parameters", "reinstall srift-planner, or re-run scripts/fit_models.py.")
    return CommParams.from_dict(data, str(p))



def _quantile_factor(p90_ratio: float, quantile: float) -> float:
    """Multiplier of the p50 time for a quantile (log-normal spread with the class's p90/p50)."""
    if quantile == 0.5:
        return 1.0
    if not 0.0 < quantile < 1.0:
        raise SriftError(f"quantile must be between 0 and 1, got {quantile}.", "use e.g. 0.5 or 0.9.")
    return float(math.exp(math.log(p90_ratio) * NormalDist().inv_cdf(quantile) / Z90))



def _link_gbytes_per_s(group: NodeGroup) -> float:
    """Nominal intra-node bandwidth of a node group. Over PCIe without peer-to-peer (GeForce
    cards, ``pcie_p2p: false`` in configs/gpus.yaml; a VM that does not expose it, the node
    group's ``pcie_p2p``) NCCL stages each transfer through host memory (its SHM transport), so
    every byte crosses PCIe twice: half the bandwidth. A node group's ``intra_node_gb_per_s``
    replaces the link's datasheet figure."""
    bw = group.intra_node_gb_per_s or link_spec(group.intra_node).bandwidth_gb_per_s
    if group.intra_node.startswith("pcie") and group.gpu != CPU:
        p2p = gpu_spec(group.gpu).pcie_p2p if group.pcie_p2p is None else group.pcie_p2p
        if not p2p:
            return bw / 2.0
    return bw


# Slowest first: a cluster that mixes transports runs at the slowest one of its groups.
_NET_ORDER = ("ethernet", "roce", "infiniband", "efa")


def topology(cluster: Cluster, params: CommParams | None = None) -> Topology:
    """Reduce a (possibly mixed) cluster to its bottleneck topology: slowest link and network.

    Its "nodes" are NVLink domains: a node's GPUs, or the ``domain_gpus`` of a domain that spans
    several nodes (an NVL72 rack), whose network is its nodes' NICs together. Every collective and
    layout group then takes NVLink within a domain and the network between domains.
    """
    groups = cluster.node_groups
    multi = [g for g in groups if g.gpus_per_node > 1]
    slow = min(multi, key=_link_gbytes_per_s) if multi else groups[0]
    link_bw, lclass = _link_gbytes_per_s(slow), link_class(slow.intra_node)
    slow_net = min(groups, key=lambda g: g.network_gbps * g.nodes_per_domain)
    domains = sum(g.count // g.nodes_per_domain for g in groups)
    if domains > 1 and slow_net.network_gbps <= 0:
        raise SriftError(
            f"cluster '{cluster.name}' has {cluster.nodes} nodes but a node group without network bandwidth.",
            "set network_gbps (Gbit/s) on every node group of a multi-node cluster.",
        )
    nets = {g.network for g in groups}
    net_class = next(n for n in _NET_ORDER if n in nets)
    rate = NetRate(0.0, "", "")
    if domains > 1:
        p = params or load_params()
        net = p.network(net_class)
        # Every group's transport at the class the mix runs as, times its nodes per domain; the
        # slowest sets the pace.
        rates = [_per_domain(g, _net_rate_cached(g if g.network == net_class else _as_network(g, net_class), net, p))
                 for g in groups]
        rate = min(rates, key=lambda r: r.bytes_per_s)
    return Topology(
        workers=cluster.gpus,
        nodes=domains,
        gpus_per_node=max(g.domain_gpus for g in groups),
        link_gbytes_per_s=link_bw,
        link_class=lclass,
        net_gbytes_per_s=slow_net.network_gbps * slow_net.nodes_per_domain / 8.0,
        net_class=net_class,
        net_rate_bytes_per_s=rate.bytes_per_s,
        net_basis=rate.basis,
        net_limit=rate.limit,
        socket_threads=rate.socket_threads,
    )


def _per_domain(group: NodeGroup, rate: NetRate) -> NetRate:
    """A node's network rate as its NVLink domain's: the NICs of its ``nodes_per_domain`` nodes."""
    k = group.nodes_per_domain
    if k == 1:
        return rate
    return dataclasses.replace(rate, bytes_per_s=rate.bytes_per_s * k,
                               basis=f"{rate.basis}; x {k} nodes per NVLink domain of {group.domain_gpus} GPUs")


_NET_RATES: BoundedCache[tuple[Any, ...], NetRate] = BoundedCache()


def _net_rate_cached(group: NodeGroup, net: NetworkClass, params: CommParams) -> NetRate:
    """``net_rate`` memoized on what it reads (the network class and the platform's socket
    defaults by value, the group's transport fields; not the node count, price or market)."""
    key = (net, params.sockets_on(group.cloud), group.network_gbps, group.network, group.cloud, group.placement_group,
           group.nccl_socket_threads, group.nccl_nsocks_perthread, group.single_flow_gbps, group.efa_generation,
           group.network_burst_gbps, group.tcp_plugin)
    return _NET_RATES.get(key, lambda: net_rate(group, net, params))


def _as_network(group: NodeGroup, network: Network) -> NodeGroup:
    return dataclasses.replace(group, network=network)


MAX_SCALARS = 4096  # sizes a model remembers (``CommModel._collective``); it starts again beyond


class CommModel:
    """Collective times on one cluster (see module docstring).

    Build with ``CommModel(cluster)`` or the cached ``CommModel.for_cluster(cluster)``.
    """

    def __init__(self, cluster: Cluster, params: CommParams | None = None, _topology: Topology | None = None) -> None:
        self.cluster = cluster
        self.params = params or load_params()
        self.topology = _topology or topology(cluster, self.params)
        calib = cluster.comm_calibration
        self.calibration = _Calibration.of_curve(calib.allreduce, calib.world_size, self.topology.workers) if calib else None
        # Measured broadcast, all-gather and reduce-scatter curves (srift calibrate comm writes
        # them) serve those collectives directly.
        self.broadcast_calibration = _Calibration.of(calib, "broadcast", self.topology.workers)
        self.all_gather_calibration = _Calibration.of(calib, "all_gather", self.topology.workers)
        self.reduce_scatter_calibration = _Calibration.of(calib, "reduce_scatter", self.topology.workers)
        t = self.topology
        self._link = self.params.get(t.link_class)
        self._net = self.params.network(t.net_class) if t.nodes > 1 else None
        self._assumptions: list[str] | None = None
        self._subgroups: dict[tuple[int, int, float | None], CommModel] = {}  # subgroup(), asked per layout and block
        self._scalars: dict[tuple[object, ...], float] = {}  # the collectives of one size (``_collective``)

    @classmethod
    def for_cluster(cls, cluster: Cluster) -> "CommModel":
        """A cached model: clusters with the same topology (and no calibration) share one."""
        if cluster.comm_calibration:
            return cls(cluster)
        topo = topology(cluster)
        return _MODEL_CACHE.get(topo, lambda: cls(cluster, _topology=topo))

    # ---- what the model assumed ------------------------------------------------------------
    @property
    def algorithm(self) -> str:
        """``ring`` or ``hierarchical`` across nodes; ``ring`` within one node."""
        return self._net.algorithm if self._net is not None else "ring"

    def assumptions(self) -> list[str]:
        """What a multi-node prediction rests on: the transport's rate and how it was set, and the
        algorithm (empty for one node or a measured calibration)."""
        t = self.topology
        if self._net is None or self.calibration is not None:
            return []
        if self._assumptions is None:
            algo = ("one ring over all ranks: the network carries 2(n-1)/n of the data" if self.algorithm == "ring"
                    else "hierarchical (intra-node and inter-node stages concurrent)")
            self._assumptions = [f"network: {t.net_basis}; all-reduce {algo}"]
        return list(self._assumptions)

    @property
    def socket_vcpus_per_node(self) -> float:
        """vCPUs per node NCCL's socket helper threads keep busy while communicating: one send
        and one receive connection of ``threads`` threads each (0 for RDMA or one node)."""
        return 2.0 * self.topology.socket_threads if self._net is not None else 0.0  # 0 threads for a TCP plugin

    # ---- collectives ---------------------------------------------------------------------
    def allreduce_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        """Seconds to all-reduce ``size_bytes`` (a number or an array of sizes) over all workers."""
        return self._collective("allreduce", size_bytes, quantile, lambda s: self._ring_model(s, 2.0, 1.0), 1.0)

    def all_gather_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        """Seconds to all-gather ``size_bytes`` (the gathered, unsharded size; each worker holds
        ``size_bytes / n``) over all workers.

        Ring (and, across nodes, hierarchical) all-gather moves ``(n-1)/n`` of the bytes over each
        link: half an all-reduce's traffic (an all-reduce is a reduce-scatter and an all-gather),
        on the same per-class bandwidth, efficiency and latency terms, with half its ring steps.
        A measured all-gather curve (``srift calibrate comm``) is read as it is.
        """
        if self.all_gather_calibration is not None:
            return self._measured(self.all_gather_calibration, size_bytes, quantile)
        return self._collective("half", size_bytes, quantile, lambda s: self._ring_model(s, 1.0, 0.5), 0.5)

    def reduce_scatter_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        """Seconds to reduce-scatter ``size_bytes`` (the unsharded gradient size; each worker keeps
        ``size_bytes / n`` of the sum): the other half of an all-reduce, priced as an all-gather
        (or read off a measured reduce-scatter curve)."""
        if self.reduce_scatter_calibration is not None:
            return self._measured(self.reduce_scatter_calibration, size_bytes, quantile)
        return self._collective("half", size_bytes, quantile, lambda s: self._ring_model(s, 1.0, 0.5), 0.5)

    def all_to_all_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5,
                          network_fraction: float = 1.0) -> float | np.ndarray:
        """Seconds of an all-to-all in which each worker sends ``size_bytes`` in all (``1 / n`` of it
        to each worker, itself included: a mixture of experts' token dispatch or combine).
        ``network_fraction``: the share of the cross-node bytes that cross the network (below 1
        for a dispatcher that sends a token once per node, srift/simulate/moe.py).

        Every GPU sends its ``(g - 1) / n`` share for the node's other GPUs over its own link (an
        NVSwitch gives each its full bandwidth) while the node's ``g`` GPUs send their
        ``(n - g) / n`` shares to other nodes over the node's network, at once: the slower of the two
        sets the time. Efficiency is read at each peer's message (``size_bytes / n``) on a GPU's
        link and at the node's ``g`` of them on the node's network (whose rate is all its NICs');
        latency is an all-gather's (``n - 1`` steps). The same link and network classes as every collective;
        no calibration curve of the all-reduce is read (it measures another pattern).
        """
        if isinstance(size_bytes, (int, float)):  # one size: remembered, as ``_collective``'s
            return self._remembered(("all_to_all", float(size_bytes), quantile, network_fraction),
                                    lambda: self._all_to_all(np.asarray(size_bytes, dtype=float), quantile, network_fraction))
        return self._all_to_all(np.asarray(size_bytes, dtype=float), quantile, network_fraction)

    def _remembered(self, key: tuple[object, ...], seconds: Callable[[], float | np.ndarray]) -> float:
        """``seconds()`` of one collective of one size, remembered under ``key`` (at most MAX_SCALARS
        sizes; the memo starts again beyond)."""
        found = self._scalars.get(key)
        if found is None:
            if len(self._scalars) >= MAX_SCALARS:
                self._scalars.clear()
            found = self._scalars[key] = float(seconds())
        return found

    def _all_to_all(self, s: np.ndarray, quantile: float, network_fraction: float) -> float | np.ndarray:
        scalar = np.ndim(s) == 0
        t = self.topology
        n = t.workers
        if n <= 1:
            out = np.zeros_like(s)
        else:
            g = max(1, min(t.gpus_per_node, n))
            chunk = s / n
            intra = (g - 1) / n * s / (t.link_gbytes_per_s * 1e9 * self._link.efficiency(chunk)) if g > 1 else 0.0 * s
            if self._net is None or t.nodes <= 1:
                inter = 0.0 * s
            else:
                # The node's g GPUs send their chunks at once, each over its own share of the
                # node's NICs: the node's rate is reached at the node's message, g chunks.
                inter = network_fraction * g * (n - g) / n * s / self._net_bytes_per_s(g * chunk)
            out = (self._latency_s(0.5) + np.maximum(intra, inter)) * self._spread(quantile)
        out = np.where(s > 0, out, 0.0)
        return float(out) if scalar else out

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
        g = max(t.gpus_per_node, 1)
        return self._derived(dataclasses.replace(t, workers=t.nodes, gpus_per_node=1, net_gbytes_per_s=t.net_gbytes_per_s / g,
                                                 net_rate_bytes_per_s=t.net_rate_bytes_per_s / g))

    def subgroup(self, workers: int, ranks_per_node: int, net_share: float | None = None) -> "CommModel":
        """The collectives of a group of ``workers`` ranks, ``ranks_per_node`` of them on each node
        it spans (a tensor-, context-, pipeline- or data-parallel group of a layout,
        srift/simulate/layouts.py). Every GPU of a node is in one such group at once, so each group
        gets ``ranks_per_node / gpus_per_node`` of the node's network; the intra-node link is the
        cluster's (NVSwitch gives every GPU its full bandwidth). ``net_share`` overrides that share
        (a pipeline's point-to-point sends, where fewer GPUs of a node cross it at once).
        Model-based, like ``within_node``.

        Raises:
            ValueError: for fewer than one worker, or ranks per node not dividing the workers.
        """
        key = (workers, ranks_per_node, net_share)
        found = self._subgroups.get(key)
        if found is None:
            found = self._subgroups[key] = self._subgroup(workers, ranks_per_node, net_share)
        return found

    def _subgroup(self, workers: int, ranks_per_node: int, net_share: float | None) -> "CommModel":
        t = self.topology
        r = max(1, min(ranks_per_node, workers))
        if workers < 1 or workers % r:
            raise ValueError(f"a group of {workers} ranks cannot have {ranks_per_node} per node")
        nodes = workers // r
        share = r / max(t.gpus_per_node, 1) if net_share is None else net_share
        if nodes == 1:
            return self._derived(dataclasses.replace(t, workers=workers, nodes=1, gpus_per_node=r))
        return self._derived(dataclasses.replace(t, workers=workers, nodes=nodes, gpus_per_node=r,
                                                 net_gbytes_per_s=t.net_gbytes_per_s * share,
                                                 net_rate_bytes_per_s=t.net_rate_bytes_per_s * share))

    def _derived(self, topo: Topology) -> "CommModel":
        model = _DERIVED_CACHE.get(topo)
        if model is None or model.params is not self.params:
            if len(_DERIVED_CACHE) >= CACHE_ENTRIES:
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
        return self._collective("broadcast", size_bytes, quantile, self._broadcast_model,
                                n / (2.0 * (n - 1)) if n > 1 else 1.0)

    def _collective(self, kind: str, size_bytes: float | np.ndarray, quantile: float,
                    model: Callable[[np.ndarray], np.ndarray], calib_size_factor: float) -> float | np.ndarray:
        """The ``kind`` of collective (what names ``model`` and ``calib_size_factor``) of each size;
        one size's seconds remembered (a layout search prices the same group's collectives of the
        same sizes for many candidates)."""
        if isinstance(size_bytes, (int, float)):
            return self._remembered((kind, float(size_bytes), quantile),
                                    lambda: self._collective_of(size_bytes, quantile, model, calib_size_factor))
        return self._collective_of(size_bytes, quantile, model, calib_size_factor)

    def _collective_of(self, size_bytes: float | np.ndarray, quantile: float,
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
        gpu_side = 2.0 * (n - 1) / n * s / (t.link_gbytes_per_s * 1e9 * self._link.efficiency(s))
        total = self._ring_model(s, 2.0, 1.0)
        return float(min(1.0, gpu_side.sum() / max(total.sum(), 1e-30)))

    # ---- model internals -----------------------------------------------------------------
    def _spread(self, quantile: float) -> float:
        ratio = self._net.p90_ratio if self._net is not None else self._link.p90_ratio
        return _quantile_factor(ratio, quantile)

    def _net_bytes_per_s(self, s: np.ndarray) -> np.ndarray:
        """The network's rate at each message size (per node)."""
        rate = self.topology.net_rate_bytes_per_s
        return rate * self._net.efficiency_at(s, rate)  # type: ignore[union-attr]

    def _latency_s(self, steps_factor: float) -> float:
        """Latency of a collective with ``steps_factor`` x an all-reduce's steps (1 or 0.5)."""
        t = self.topology
        if self._net is None:
            return steps_factor * 2.0 * (t.workers - 1) * self._link.alpha_s
        if self._net.algorithm == "ring":
            steps = 2.0 * (t.workers - 1)
            inter = min(2.0 * t.nodes, steps)
            return steps_factor * ((steps - inter) * self._link.alpha_s + inter * self._net.alpha_s)
        lat = 2.0 * (t.gpus_per_node - 1) * self._link.alpha_s + 2.0 * math.ceil(math.log2(t.nodes)) * self._net.alpha_s
        return steps_factor * lat

    def _ring_model(self, s: np.ndarray, traffic: float, steps_factor: float) -> np.ndarray:
        """An all-reduce (``traffic`` 2, all steps) or an all-gather/reduce-scatter (1, half)."""
        t = self.topology
        link_bw = t.link_gbytes_per_s * 1e9 * self._link.efficiency(s)
        lat = self._latency_s(steps_factor)
        if self._net is None:
            n = t.workers
            return lat + traffic * (n - 1) / n * s / link_bw
        net_bw = self._net_bytes_per_s(s)
        if self._net.algorithm == "ring":
            n = t.workers
            return lat + traffic * (n - 1) / n * s / np.minimum(link_bw, net_bw)
        g, nn = t.gpus_per_node, t.nodes
        intra = traffic * (g - 1) / g * s / link_bw if g > 1 else 0.0 * s
        inter = traffic * (nn - 1) / nn * s / net_bw
        return lat + np.maximum(intra, inter)

    def _broadcast_model(self, s: np.ndarray) -> np.ndarray:
        t = self.topology
        link_bw = t.link_gbytes_per_s * 1e9 * self._link.efficiency(s)
        stage = s / link_bw if t.gpus_per_node > 1 else 0.0 * s
        if self._net is not None:
            stage = np.maximum(stage, s / self._net_bytes_per_s(s))
        return self._latency_s(0.5) + stage


# Clusters with the same topology share one model (the recommender builds thousands of clusters).
_MODEL_CACHE: BoundedCache[Topology, CommModel] = BoundedCache()
# Sub-topologies of a cluster (HSDP's shard and replica groups), by topology (the parameters
# are checked by identity: they are loaded once).
_DERIVED_CACHE: dict[Topology, CommModel] = {}
