"""Cluster: the machines a job runs on, from an instance spec (``p3.16xlarge:2+g5.xlarge:4``) or a
cluster YAML file (see docs and configs/clusters/)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srift.errors import SriftError

if TYPE_CHECKING:
    from srift.catalog.instances import Instance

INTRA_NODE = ("shared-memory", "pcie3", "pcie4", "pcie5", "nvlink-bridge", "nvlink", "nvswitch", "nvswitch4", "nvswitch5")
NETWORKS = ("ethernet", "efa", "infiniband")
_SPEC_PART = re.compile(r"^(?P<type>[a-z0-9][a-z0-9._\-]*?)(?::(?P<count>\d+))?$")  # _: Lambda, Azure names


@dataclass(frozen=True)
class NodeGroup:
    """``count`` identical nodes.

    Attributes:
        count: Number of nodes.
        gpus_per_node: GPUs (or worker processes for ``gpu: cpu``) per node.
        gpu: Canonical GPU name from configs/gpus.yaml, or ``cpu``.
        intra_node: Link between the GPUs of one node.
        network_gbps: Node network bandwidth, Gbit/s.
        network: ``ethernet``, ``efa`` or ``infiniband``.
        usd_per_hour: Price per node per hour (None when unknown: cost is then not reported).
        spot: True for spot (preemptible) nodes.
        interruption_per_hour: Expected spot interruptions per node-hour (0 for on-demand).
        instance_type: EC2 type when the group came from the catalog.
        gpu_memory_gib: Memory per GPU (defaults to the GPU spec's).
    """

    count: int
    gpus_per_node: int
    gpu: str
    intra_node: str
    network_gbps: float
    network: str = "ethernet"
    usd_per_hour: float | None = None
    spot: bool = False
    interruption_per_hour: float = 0.0
    instance_type: str | None = None
    gpu_memory_gib: float | None = None

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_node

    @property
    def label(self) -> str:
        base = f"{self.instance_type}:{self.count}" if self.instance_type else f"{self.count} x ({self.gpus_per_node} x {self.gpu})"
        return base + (" [Spot]" if self.spot else "")


@dataclass(frozen=True)
class Cluster:
    """A set of node groups running one data-parallel job.

    Attributes:
        name: Label (the spec or the cluster file's ``name``).
        node_groups: The groups (more than one for a mixed cluster).
        comm_calibration: Measured all-reduce curve from ``srift calibrate comm`` (or None):
            ``{"backend": ..., "sizes_bytes": [...], "times_s": [...], "p90_times_s": [...]}``.
    """

    name: str
    node_groups: tuple[NodeGroup, ...]
    comm_calibration: dict[str, Any] | None = field(default=None, compare=False, hash=False)

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
    def usd_per_hour(self) -> float | None:
        """Whole-cluster price per hour, or None when any group is unpriced."""
        total = 0.0
        for g in self.node_groups:
            if g.usd_per_hour is None:
                return None
            total += g.usd_per_hour * g.count
        return total

    @property
    def spec(self) -> str:
        """The instance-spec string for catalog clusters (``p3.16xlarge:2+g5.xlarge:4``)."""
        return "+".join(g.label for g in self.node_groups)


def parse_spec(spec: str) -> list[tuple[str, int]]:
    """Split ``TYPE[:COUNT]`` parts joined by ``+`` into ``[(type, count), ...]``.

    Raises:
        SriftError: for an empty part, a bad count, or a malformed type.
    """
    if not spec or not spec.strip():
        raise SriftError("the instance spec is empty.", "pass e.g. --instance p3.16xlarge:2 or g5.xlarge:4+p3.2xlarge:2.")
    parts = []
    for raw in spec.split("+"):
        text = raw.strip().lower()
        m = _SPEC_PART.match(text)
        if not m:
            raise SriftError(
                f"'{raw}' in instance spec '{spec}' is not TYPE[:COUNT].",
                "write each part as an instance type with an optional count, e.g. p3.16xlarge:2.",
            )
        count = int(m.group("count") or 1)
        if count < 1:
            raise SriftError(f"instance count in '{raw}' must be at least 1.", "use a count of 1 or more, e.g. p3.16xlarge:2.")
        parts.append((m.group("type"), count))
    return parts


def node_group(inst: "Instance", count: int, spot: bool) -> NodeGroup:
    """``count`` nodes of a catalog instance type, priced on spot or on demand."""
    return NodeGroup(
        count=count,
        gpus_per_node=inst.gpu_count,
        gpu=inst.gpu_name,
        intra_node=inst.intra_node,
        network_gbps=inst.network_gbps,
        network=inst.cluster_network,
        usd_per_hour=inst.usd_per_hour(spot),
        spot=spot,
        interruption_per_hour=inst.spot_interruption_per_hour if spot else 0.0,
        instance_type=inst.instance_type,
        gpu_memory_gib=inst.gpu_memory_gib,
    )


def cluster_from_spec(spec: str, region: str = "us-east-1", spot: bool = False) -> Cluster:
    """Build a Cluster from an instance spec and the catalog.

    Args:
        spec: ``TYPE[:COUNT]`` parts joined by ``+``; a part may end in ``@spot`` or
            ``@on-demand`` to override ``spot`` for that part.
        region: Catalog region.
        spot: Price all parts at spot unless a part says otherwise.
    """
    from srift.catalog import get_instance

    groups = []
    for raw in spec.split("+"):
        part_spot = spot
        text = raw.strip()
        if "@" in text:
            text, _, market = text.partition("@")
            if market.lower() not in ("spot", "on-demand", "ondemand"):
                raise SriftError(f"unknown market '@{market}' in '{raw}'.", "use @spot or @on-demand.")
            part_spot = market.lower() == "spot"
        ((itype, count),) = parse_spec(text)
        groups.append(node_group(get_instance(itype, region), count, part_spot))
    return Cluster(name=spec, node_groups=tuple(groups))


_GROUP_KEYS = {
    "count", "gpus_per_node", "gpu", "intra_node", "network_gbps", "network", "usd_per_hour",
    "spot", "interruption_per_hour", "gpu_memory_gib", "instance_type",
}


def cluster_from_dict(data: Any, source: str = "cluster file") -> Cluster:
    """Validate a parsed cluster YAML document and build the Cluster.

    Raises:
        SriftError: naming the first field that is missing or wrong.
    """
    from srift.hardware import CPU, find_gpu

    def bad(what: str) -> SriftError:
        return SriftError(f"{source}: {what}.", "fix the field; see configs/clusters/ for examples.")

    if not isinstance(data, dict):
        raise bad("the file must be a mapping with 'name' and 'node_groups'")
    unknown = set(data) - {"name", "node_groups", "comm_calibration", "description"}
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(unknown))}")
    groups_raw = data.get("node_groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise bad("'node_groups' must be a non-empty list")
    groups = []
    for i, g in enumerate(groups_raw):
        where = f"node_groups[{i}]"
        if not isinstance(g, dict):
            raise bad(f"{where} must be a mapping")
        extra = set(g) - _GROUP_KEYS
        if extra:
            raise bad(f"{where} has unknown key(s) {', '.join(sorted(extra))}")
        for key in ("count", "gpus_per_node", "gpu", "intra_node", "network_gbps"):
            if key not in g:
                raise bad(f"{where}.{key} is required")
        for key in ("count", "gpus_per_node"):
            if not isinstance(g[key], int) or isinstance(g[key], bool) or g[key] < 1:
                raise bad(f"{where}.{key} must be a positive integer, got {g[key]!r}")
        gpu_name = str(g["gpu"])
        canonical = CPU if gpu_name.lower() == CPU else find_gpu(gpu_name)
        if canonical is None:
            from srift.errors import closest
            from srift.hardware import gpus

            near = closest(gpu_name, list(gpus()))
            raise bad(f"{where}.gpu '{gpu_name}' is not a GPU in configs/gpus.yaml" + (f" (did you mean {', '.join(near)}?)" if near else ""))
        if g["intra_node"] not in INTRA_NODE:
            raise bad(f"{where}.intra_node must be one of {', '.join(INTRA_NODE)}, got {g['intra_node']!r}")
        network = g.get("network", "ethernet")
        if network not in NETWORKS:
            raise bad(f"{where}.network must be one of {', '.join(NETWORKS)}, got {network!r}")
        for key in ("network_gbps", "usd_per_hour", "interruption_per_hour", "gpu_memory_gib"):
            v = g.get(key)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0):
                raise bad(f"{where}.{key} must be a non-negative number, got {v!r}")
        if g["network_gbps"] <= 0 and g["count"] > 1:
            raise bad(f"{where}.network_gbps must be positive for several nodes")
        groups.append(
            NodeGroup(
                count=g["count"],
                gpus_per_node=g["gpus_per_node"],
                gpu=canonical,
                intra_node=g["intra_node"],
                network_gbps=float(g["network_gbps"]),
                network=network,
                usd_per_hour=None if g.get("usd_per_hour") is None else float(g["usd_per_hour"]),
                spot=bool(g.get("spot", False)),
                interruption_per_hour=float(g.get("interruption_per_hour") or 0.0),
                instance_type=g.get("instance_type"),
                gpu_memory_gib=None if g.get("gpu_memory_gib") is None else float(g["gpu_memory_gib"]),
            )
        )
    calib = data.get("comm_calibration")
    if calib is not None:
        if not isinstance(calib, dict) or not isinstance(calib.get("sizes_bytes"), list) or not isinstance(calib.get("times_s"), list):
            raise bad("'comm_calibration' needs 'sizes_bytes' and 'times_s' lists")
        if len(calib["sizes_bytes"]) != len(calib["times_s"]) or len(calib["sizes_bytes"]) < 2:
            raise bad("'comm_calibration' sizes_bytes and times_s must have the same length (2 or more)")
    return Cluster(name=str(data.get("name") or Path(source).stem), node_groups=tuple(groups), comm_calibration=calib)


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster YAML file."""
    from srift.fileio import read_yaml

    return cluster_from_dict(read_yaml(path, "cluster file"), source=str(path))
