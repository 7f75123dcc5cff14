"""Cluster: the machines a job runs on, as node groups, and the cluster YAML file that describes
your own machines (configs/clusters/ has examples). Catalog instance specs
(``p3.16xlarge:2+g5.xlarge:4``) become clusters in srift/catalog/spec.py.

Vocabularies: intra-node links are those of configs/gpus.yaml (``srift.hardware.links``);
networks are NETWORKS: the transport NCCL runs between nodes (``ethernet`` = NCCL's socket
transport over TCP; ``efa``, ``infiniband`` and ``roce`` are RDMA). What a user knows about the
transport (a cluster placement group, NCCL's socket threads, a per-flow limit, vCPUs for the
data loader) goes in optional node-group fields; unset, the simulator uses NCCL's documented
defaults and says so (srift/perf/comm.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Final, Literal, get_args

from srift.bounds import (
    MAX_GPU_MEMORY_GIB, MAX_GPUS, MAX_INTRA_NODE_GB_PER_S, MIN_INTRA_NODE_GB_PER_S, MAX_GPUS_PER_NODE, MAX_INTERRUPTIONS_PER_HOUR, MAX_NAME_CHARS, MAX_NETWORK_GBPS,
    MAX_JOB_FILE_BYTES, MAX_NODE_GROUPS, MAX_NODE_USD_PER_HOUR, MAX_NODES, MAX_VCPUS_PER_NODE, MIN_NETWORK_GBPS, key_text, shown,
)
from srift.errors import SriftError, closest
from srift.files import read_yaml
from srift.hardware import CPU, find_gpu, gpus, links

Network = Literal["ethernet", "efa", "infiniband", "roce"]
NETWORKS: tuple[Network, ...] = get_args(Network)
ETHERNET: Final = "ethernet"
EFA: Final = "efa"
INFINIBAND: Final = "infiniband"
ROCE: Final = "roce"
CLOUDS = ("aws", "gcp", "azure", "lambda")


def network_of(value: object) -> Network:
    """``value`` as a ``Network`` (the narrowing a table or a data row's text needs).

    Raises:
        ValueError: for anything that is not one of NETWORKS.
    """
    for network in NETWORKS:
        if value == network:
            return network
    raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {value!r}")


@dataclass(frozen=True)
class NodeGroup:
    """``count`` identical nodes.

    Attributes:
        count: Number of nodes.
        gpus_per_node: GPUs (or worker processes for ``gpu: cpu``) per node.
        gpu: Canonical GPU name from configs/gpus.yaml, or ``cpu``.
        intra_node: Link between the GPUs of one node.
        network_gbps: Node network bandwidth, Gbit/s.
        network: ``ethernet`` (NCCL over TCP sockets), ``efa``, ``infiniband`` or ``roce``.
        usd_per_hour: Price per node per hour (None when unknown: cost is then not reported).
        spot: True for spot (preemptible) nodes.
        interruption_per_hour: Expected spot interruptions per node-hour (0 for on-demand).
        instance_type: EC2 type when the group came from the catalog.
        gpu_memory_gib: Memory per GPU (defaults to the GPU spec's).
        vcpus_per_node: vCPUs of one node (the data loader's), None when unknown (then no
            input-pipeline bound).
        cloud: Cloud the nodes run in (``aws``, ``gcp``, ...), None on premises: NCCL picks its
            socket defaults by platform.
        placement_group: True inside an EC2 cluster placement group, False outside, None unknown
            (simulated as outside).
        nccl_socket_threads: NCCL_SOCKET_NTHREADS, None for NCCL's default on the platform.
        nccl_nsocks_perthread: NCCL_NSOCKS_PERTHREAD, None for NCCL's default on the platform.
        single_flow_gbps: Limit of one TCP flow between nodes, Gbit/s (EC2: 5 outside a cluster
            placement group, 10 inside), None for no limit.
        efa_generation: EFA generation (1-4) of an ``efa`` group, None when unknown.
        network_burst_gbps: An "up to N Gigabit" size's burst figure (``network_gbps`` is then the
            baseline it sustains), None otherwise.
        pcie_p2p: Whether the node's GPUs reach each other over PCIe peer to peer: False for a VM
            that does not expose it (NCCL stages every transfer through host memory), None for the
            GPU's own default (configs/gpus.yaml ``pcie_p2p``).
        tcp_plugin: For ``ethernet``: an NCCL net plugin that moves TCP itself (``gpudirect-tcpx``,
            ``gpudirect-tcpxo`` on Google Cloud A3), so NCCL's socket threads and sockets do not
            limit it; None for NCCL's own socket transport.
        nvlink_domain_gpus: GPUs that share one NVLink domain when it spans several nodes (an NVL72
            rack: 72 GPUs on NVLink switch trays, 18 compute trays of 4), a multiple of
            ``gpus_per_node``; None for a domain of the node's own GPUs. ``domain_gpus`` says how
            many of them one job's groups reach over NVLink.
        intra_node_gb_per_s: The node's GPU-to-GPU bandwidth (GB/s per GPU per direction, as
            configs/gpus.yaml's links) when it is not the ``intra_node`` link's datasheet figure
            (a cut NVLink, a measured one); None for the link's own.
    """

    count: int
    gpus_per_node: int
    gpu: str
    intra_node: str
    network_gbps: float
    network: Network = ETHERNET
    usd_per_hour: float | None = None
    spot: bool = False
    interruption_per_hour: float = 0.0
    instance_type: str | None = None
    gpu_memory_gib: float | None = None
    vcpus_per_node: int | None = None
    cloud: str | None = None
    placement_group: bool | None = None
    nccl_socket_threads: int | None = None
    nccl_nsocks_perthread: int | None = None
    single_flow_gbps: float | None = None
    efa_generation: int | None = None
    network_burst_gbps: float | None = None
    tcp_plugin: str | None = None
    pcie_p2p: bool | None = None
    nvlink_domain_gpus: int | None = None
    intra_node_gb_per_s: float | None = None

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_node

    @property
    def nodes_per_domain(self) -> int:
        """Nodes of this group in each NVLink domain of a job on all of them: 1 for a domain of one
        node; for a larger domain, the most whole nodes up to its size that divide the group's
        nodes evenly, as a scheduler places a job in equal blocks, one per domain (Slurm's
        topology/block ``--segment``: the node count a multiple of the segment), so every domain
        holds as many of the job's GPUs (e.g. 64 of an NVL72 rack's 72 for 256 GPUs, 72 for 144)."""
        fit = (self.nvlink_domain_gpus or self.gpus_per_node) // self.gpus_per_node
        return max(k for k in range(1, min(fit, self.count) + 1) if self.count % k == 0)

    @property
    def domain_gpus(self) -> int:
        """The job's GPUs that reach one another over NVLink (``nodes_per_domain`` nodes' worth)."""
        return self.nodes_per_domain * self.gpus_per_node

    @property
    def label(self) -> str:
        base = f"{self.instance_type}:{self.count}" if self.instance_type else f"{self.count} x ({self.gpus_per_node} x {self.gpu})"
        return base + (" [Spot]" if self.spot else "")


@dataclass(frozen=True)
class CommCurve:
    """One collective as ``srift calibrate comm`` measured it: seconds per message size.

    Attributes:
        sizes_bytes: The message sizes.
        times_s: The median seconds at each size.
        p90_times_s: The 90th percentile at each size (None: not measured; the median stands in).
    """

    sizes_bytes: tuple[float, ...]
    times_s: tuple[float, ...]
    p90_times_s: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Calibration:
    """A cluster file's ``comm_calibration``, parsed: the all-reduce curve and those of the other
    collectives measured on the same sizes (the file keeps ``<name>_times_s`` lists beside
    ``sizes_bytes``; srift/profiling/calibrate.py writes them).

    Attributes:
        allreduce: The all-reduce curve (``times_s``, ``p90_times_s``).
        world_size: The workers it was measured on (None: the cluster's own).
        broadcast: The broadcast curve, or None.
        all_gather: The all-gather curve, or None.
        reduce_scatter: The reduce-scatter curve, or None.
    """

    allreduce: CommCurve
    world_size: int | None = None
    broadcast: CommCurve | None = None
    all_gather: CommCurve | None = None
    reduce_scatter: CommCurve | None = None


@dataclass(frozen=True)
class Cluster:
    """A set of node groups running one data-parallel job.

    Attributes:
        name: Label (the spec or the cluster file's ``name``).
        node_groups: The groups (more than one for a mixed cluster).
        comm_calibration: The collectives ``srift calibrate comm`` measured on it (or None).
    """

    name: str
    node_groups: tuple[NodeGroup, ...]
    comm_calibration: Calibration | None = field(default=None, compare=False, hash=False)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.node_groups)

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.node_groups)

    @property
    def heterogeneous(self) -> bool:
        return len({g.gpu for g in self.node_groups}) > 1

    @property
    def cpu_workers(self) -> bool:
        """Some node group trains on CPU workers (gloo on the compute's cores), not GPUs."""
        return any(g.gpu == CPU for g in self.node_groups)

    def on_spot(self) -> "Cluster":
        """The same machines, every node priced and interrupted as spot."""
        return dataclasses.replace(self, node_groups=tuple(dataclasses.replace(g, spot=True) for g in self.node_groups))

    @property
    def usd_per_hour(self) -> float | None:
        """Whole-cluster price per hour, or None when any group is unpriced."""
        total = 0.0
        for g in self.node_groups:
            if g.usd_per_hour is None:
                return None
            total += g.usd_per_hour * g.count
        return total


_GROUP_KEYS = {
    "count", "gpus_per_node", "gpu", "intra_node", "network_gbps", "network", "usd_per_hour",
    "spot", "interruption_per_hour", "gpu_memory_gib", "instance_type",
    "vcpus_per_node", "cloud", "placement_group", "nccl_socket_threads", "nccl_nsocks_perthread",
    "single_flow_gbps", "efa_generation", "tcp_plugin", "nvlink_domain_gpus", "intra_node_gb_per_s",
}
TCP_PLUGINS = ("gpudirect-tcpx", "gpudirect-tcpxo")
# Intra-node links whose NVLink switches can join several nodes in one domain (NVLink 4's NVLink
# Switch System, NVLink 5's NVL72 rack); configs/gpus.yaml names them.
MULTI_NODE_NVLINK = ("nvswitch4", "nvswitch5")
# NCCL accepts 1-16 socket threads and 1-64 sockets per thread, their product at most 64
# (NCCL documentation, Environment Variables: NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD).
MAX_SOCKET_THREADS, MAX_SOCKETS_PER_THREAD, MAX_SOCKETS = 16, 64, 64
# comm_calibration lists: the measured curves (srift calibrate comm); the first two are required.
_COLLECTIVE_CURVES = ("broadcast", "all_gather", "reduce_scatter")  # Calibration's optional curves
_CURVES = ("sizes_bytes", "times_s", "p90_times_s",
           *(f"{name}_{q}times_s" for name in _COLLECTIVE_CURVES for q in ("", "p90_")))
_MAX_MESSAGE_BYTES = 2.0**50  # a calibrated message size (1 PiB)
_MAX_COLLECTIVE_S = 1e6
# (upper bound, may be zero) of each numeric node-group field (srift/bounds.py)
_GROUP_NUMBERS = {"network_gbps": (MAX_NETWORK_GBPS, True), "usd_per_hour": (MAX_NODE_USD_PER_HOUR, True),
                  "interruption_per_hour": (MAX_INTERRUPTIONS_PER_HOUR, True), "gpu_memory_gib": (MAX_GPU_MEMORY_GIB, False)}


def cluster_from_dict(data: Any, source: str = "cluster file") -> Cluster:
    """Validate a parsed cluster YAML document and build the Cluster.

    Every count and number is checked against what srift models (srift/bounds.py).

    Raises:
        SriftError: naming the first field that is missing or wrong.
    """

    def bad(what: str) -> SriftError:
        return SriftError(f"{source}: {what}.", "fix the field; see configs/clusters/ for examples.")

    if not isinstance(data, dict):
        raise bad("the file must be a mapping with 'name' and 'node_groups'")
    unknown = set(data) - {"name", "node_groups", "comm_calibration", "description"}
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(key_text(k) for k in unknown))}")
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.isprintable() or len(name) > MAX_NAME_CHARS):
        raise bad(f"'name' must be a one-line name of at most {MAX_NAME_CHARS} characters, got {shown(name)}")
    groups_raw = data.get("node_groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise bad("'node_groups' must be a non-empty list")
    if len(groups_raw) > MAX_NODE_GROUPS:
        raise bad(f"'node_groups' has {len(groups_raw)} groups; srift models at most {MAX_NODE_GROUPS}")
    groups = [_group(g, f"node_groups[{i}]", bad) for i, g in enumerate(groups_raw)]
    nodes, gpu_count = sum(g.count for g in groups), sum(g.gpus for g in groups)
    if nodes > MAX_NODES or gpu_count > MAX_GPUS:
        raise bad(f"the cluster has {nodes:,} nodes and {gpu_count:,} GPUs; srift models at most {MAX_NODES:,} nodes "
                  f"and {MAX_GPUS:,} GPUs")
    calib = data.get("comm_calibration")
    return Cluster(name=name or Path(source).stem, node_groups=tuple(groups),
                   comm_calibration=None if calib is None else parse_calibration(calib, bad))


def _group(g: Any, where: str, bad: Callable[[str], SriftError]) -> NodeGroup:
    """One validated node group."""
    if not isinstance(g, dict):
        raise bad(f"{where} must be a mapping")
    extra = set(g) - _GROUP_KEYS
    if extra:
        raise bad(f"{where} has unknown key(s) {', '.join(sorted(key_text(k) for k in extra))}")
    for key in ("count", "gpus_per_node", "gpu", "intra_node", "network_gbps"):
        if g.get(key) is None:
            raise bad(f"{where}.{key} is required")
    for key, high in (("count", MAX_NODES), ("gpus_per_node", MAX_GPUS_PER_NODE)):
        v = g[key]
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= high:
            raise bad(f"{where}.{key} must be an integer from 1 to {high:,}, got {shown(v)}")
    gpu_name = g["gpu"]
    if not isinstance(gpu_name, str):
        raise bad(f"{where}.gpu must be a GPU name, got {shown(gpu_name)}")
    canonical = CPU if gpu_name.lower() == CPU else find_gpu(gpu_name)
    if canonical is None:
        near = closest(gpu_name, list(gpus()))
        raise bad(f"{where}.gpu {shown(gpu_name)} is not a GPU in configs/gpus.yaml" + (f" (did you mean {', '.join(near)}?)" if near else ""))
    if not isinstance(g["intra_node"], str) or g["intra_node"] not in links():
        raise bad(f"{where}.intra_node must be one of {', '.join(links())}, got {shown(g['intra_node'])}")
    intra_bw = g.get("intra_node_gb_per_s")
    if intra_bw is not None and (not isinstance(intra_bw, (int, float)) or isinstance(intra_bw, bool)
                                 or not MIN_INTRA_NODE_GB_PER_S <= intra_bw <= MAX_INTRA_NODE_GB_PER_S):
        raise bad(f"{where}.intra_node_gb_per_s must be a number of GB/s per GPU per direction from "
                  f"{MIN_INTRA_NODE_GB_PER_S:g} to {MAX_INTRA_NODE_GB_PER_S:,.0f} (e.g. 200 for NVLink cut to "
                  f"400 GB/s both ways), got {shown(intra_bw)}")
    network = g.get("network", ETHERNET)
    if not isinstance(network, str) or network not in NETWORKS:
        raise bad(f"{where}.network must be one of {', '.join(NETWORKS)}, got {shown(network)}")
    for key, (upper, zero_ok) in _GROUP_NUMBERS.items():
        v = g.get(key)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= upper or (v == 0 and not zero_ok)):
            low = "0" if zero_ok else "above 0"
            raise bad(f"{where}.{key} must be a number from {low} to {upper:,.0f}, got {shown(v)}")
    for key in ("network_gbps", "single_flow_gbps"):
        v = g.get(key)
        if isinstance(v, (int, float)) and 0 < v < MIN_NETWORK_GBPS:
            raise bad(f"{where}.{key} must be 0 (unknown) or at least {MIN_NETWORK_GBPS:g} Gb/s, got {shown(v)}")
    domain = _nvlink_domain(g, where, bad)
    if g["network_gbps"] <= 0 and g["count"] > (domain or g["gpus_per_node"]) // g["gpus_per_node"]:
        raise bad(f"{where}.network_gbps must be positive for several nodes" + (" beyond one NVLink domain" if domain else ""))
    spot = g.get("spot", False)
    if not isinstance(spot, bool):
        raise bad(f"{where}.spot must be true or false, got {shown(spot)}")
    itype = g.get("instance_type")
    if itype is not None and (not isinstance(itype, str) or not itype.isprintable() or len(itype) > MAX_NAME_CHARS):
        raise bad(f"{where}.instance_type must be a name, got {shown(itype)}")
    transport = _transport_fields(g, where, bad)
    return NodeGroup(
        count=g["count"],
        gpus_per_node=g["gpus_per_node"],
        gpu=canonical,
        intra_node=g["intra_node"],
        network_gbps=float(g["network_gbps"]),
        network=network_of(network),
        usd_per_hour=None if g.get("usd_per_hour") is None else float(g["usd_per_hour"]),
        spot=spot,
        interruption_per_hour=float(g.get("interruption_per_hour") or 0.0),
        instance_type=itype,
        gpu_memory_gib=None if g.get("gpu_memory_gib") is None else float(g["gpu_memory_gib"]),
        nvlink_domain_gpus=domain,
        intra_node_gb_per_s=None if intra_bw is None else float(intra_bw),
        **transport,
    )


def _nvlink_domain(g: dict[str, Any], where: str, bad: Callable[[str], SriftError]) -> int | None:
    """A node group's ``nvlink_domain_gpus``, checked: whole nodes of GPUs on NVLink switches."""
    v = g.get("nvlink_domain_gpus")
    if v is None:
        return None
    per = g["gpus_per_node"]
    if not isinstance(v, int) or isinstance(v, bool) or not per <= v <= MAX_GPUS or v % per:
        raise bad(f"{where}.nvlink_domain_gpus must be a multiple of gpus_per_node ({per}) up to {MAX_GPUS:,}, "
                  f"got {shown(v)}")
    if v > per and g["intra_node"] not in MULTI_NODE_NVLINK:
        raise bad(f"{where}.nvlink_domain_gpus beyond a node needs NVLink switches that leave the node (intra_node "
                  f"{' or '.join(MULTI_NODE_NVLINK)}), got intra_node {shown(g['intra_node'])}")
    return v


def parse_calibration(calib: Any, bad: Callable[[str], SriftError] | None = None) -> Calibration:
    """A ``comm_calibration`` mapping, checked (``_check_calibration``) and parsed.

    Raises:
        SriftError: for a curve that is not positive sizes and times of one length (2 or more).
    """
    _check_calibration(calib, bad or (lambda what: SriftError(f"{what}.", "re-run `srift calibrate comm` to write it again.")))
    sizes = tuple(float(s) for s in calib["sizes_bytes"])

    def curve(prefix: str) -> CommCurve | None:
        times, p90 = calib.get(f"{prefix}times_s"), calib.get(f"{prefix}p90_times_s")
        return None if times is None else CommCurve(sizes, tuple(float(t) for t in times),
                                                    None if p90 is None else tuple(float(t) for t in p90))

    allreduce = curve("")
    assert allreduce is not None  # times_s is required (_check_calibration)
    return Calibration(allreduce, calib.get("world_size"), *(curve(f"{name}_") for name in _COLLECTIVE_CURVES))


def _check_calibration(calib: Any, bad: Callable[[str], SriftError]) -> None:
    """A measured curve: positive, finite sizes and times, lists of one length (2 or more)."""
    if not isinstance(calib, dict) or not isinstance(calib.get("sizes_bytes"), list) or not isinstance(calib.get("times_s"), list):
        raise bad("'comm_calibration' needs 'sizes_bytes' and 'times_s' lists")
    n = len(calib["sizes_bytes"])
    if n < 2 or n > 1000:
        raise bad("'comm_calibration' sizes_bytes must list 2 to 1,000 sizes")
    for key in _CURVES:
        values = calib.get(key)
        if values is None and key not in ("sizes_bytes", "times_s"):
            continue
        if not isinstance(values, list) or len(values) != n:
            raise bad(f"'comm_calibration' {key} and sizes_bytes must be lists of the same length ({n})")
        high = _MAX_MESSAGE_BYTES if key == "sizes_bytes" else _MAX_COLLECTIVE_S
        for v in values:
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v <= high:
                raise bad(f"'comm_calibration' {key} must hold numbers above 0 and at most {high:g}, got {shown(v)}")
    if len(set(calib["sizes_bytes"])) != n:
        raise bad("'comm_calibration' sizes_bytes must not repeat a size")
    world = calib.get("world_size")
    if world is not None and (not isinstance(world, int) or isinstance(world, bool) or not 1 <= world <= MAX_GPUS):
        raise bad(f"'comm_calibration' world_size must be an integer from 1 to {MAX_GPUS:,}, got {shown(world)}")


def _transport_fields(g: dict[str, Any], where: str, bad: Any) -> dict[str, Any]:
    """The optional transport and host fields of a node group, validated."""
    out: dict[str, Any] = {}
    for key, lo, hi in (("vcpus_per_node", 1, MAX_VCPUS_PER_NODE), ("nccl_socket_threads", 1, MAX_SOCKET_THREADS),
                        ("nccl_nsocks_perthread", 1, MAX_SOCKETS_PER_THREAD), ("efa_generation", 1, 4)):
        v = g.get(key)
        if v is None:
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
            raise bad(f"{where}.{key} must be an integer " + (f"from {lo} to {hi}" if hi else f"of at least {lo}") + f", got {v!r}")
        out[key] = v
    threads, socks = out.get("nccl_socket_threads"), out.get("nccl_nsocks_perthread")
    if threads is not None and socks is not None and threads * socks > MAX_SOCKETS:
        raise bad(f"{where}: nccl_socket_threads x nccl_nsocks_perthread must be at most {MAX_SOCKETS} (NCCL's limit), "
                  f"got {threads * socks}")
    flow = g.get("single_flow_gbps")
    if flow is not None:
        if not isinstance(flow, (int, float)) or isinstance(flow, bool) or not 0 < flow <= MAX_NETWORK_GBPS:
            raise bad(f"{where}.single_flow_gbps must be a number above 0 and at most {MAX_NETWORK_GBPS:,.0f}, got {shown(flow)}")
        out["single_flow_gbps"] = float(flow)
    pg = g.get("placement_group")
    if pg is not None:
        if not isinstance(pg, bool):
            raise bad(f"{where}.placement_group must be true or false, got {pg!r}")
        out["placement_group"] = pg
    cloud = g.get("cloud")
    if cloud is not None:
        if cloud not in CLOUDS:
            raise bad(f"{where}.cloud must be one of {', '.join(CLOUDS)} (leave it out on premises), got {cloud!r}")
        out["cloud"] = cloud
    if out.get("efa_generation") is not None and g.get("network", ETHERNET) != EFA:
        raise bad(f"{where}.efa_generation is for network: efa only")
    plugin = g.get("tcp_plugin")
    if plugin is not None:
        if plugin not in TCP_PLUGINS or g.get("network", ETHERNET) != ETHERNET:
            raise bad(f"{where}.tcp_plugin must be one of {', '.join(TCP_PLUGINS)}, with network: ethernet, got {plugin!r}")
        out["tcp_plugin"] = plugin
    return out


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster YAML file."""
    return cluster_from_dict(read_yaml(path, "cluster file", MAX_JOB_FILE_BYTES), source=str(path))
