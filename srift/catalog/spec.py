"""Instance specs: ``TYPE[:COUNT]`` parts joined by ``+`` (``p3.16xlarge:2+g5.xlarge:4``), each
part optionally ending in ``@spot`` or ``@on-demand``, and the catalog node groups they name.

``cluster_from_spec`` turns a spec into a Cluster; ``spec_of`` writes the spec of a list of
(instance type, count, spot) parts, so that any configuration the search finds can be given back
to ``srift predict --instance``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence

from srift.cache import CACHE_ENTRIES
from srift.catalog.instances import Instance
from srift.catalog.load import get_instance
from srift.bounds import MAX_GPUS, MAX_NODE_GROUPS, MAX_NODES, parse_number, shown
from srift.catalog.network import NetworkFacts, efa_interfaces, facts_for
from srift.catalog.transports import network_config
from srift.cluster import EFA, ETHERNET, TCP_PLUGINS, Cluster, NodeGroup
from srift.errors import SriftError

_SPEC_PART = re.compile(r"^(?P<type>[a-z0-9][a-z0-9._\-]*?)(?::(?P<count>\d+))?$")  # _: Lambda, Azure names
MARKETS = {"spot": True, "on-demand": False, "ondemand": False}

#: One part of a configuration: ``count`` instances of a type, on spot or on demand.
Part = tuple[Instance, int, bool]


def parse_spec(spec: str) -> list[tuple[str, int]]:
    """Split ``TYPE[:COUNT]`` parts joined by ``+`` into ``[(type, count), ...]``.

    Raises:
        SriftError: for an empty part, a bad count, or a malformed type.
    """
    if not spec or not spec.strip():
        raise SriftError("the instance spec is empty.", "pass e.g. --instance p3.16xlarge:2 or g5.xlarge:4+p3.2xlarge:2.")
    raw_parts = spec.split("+")
    if len(raw_parts) > MAX_NODE_GROUPS:
        raise SriftError(f"the instance spec has {len(raw_parts)} parts; srift models at most {MAX_NODE_GROUPS}.",
                         "join fewer instance types with +.")
    parts = []
    for raw in raw_parts:
        text = raw.strip().lower()
        m = _SPEC_PART.match(text)
        if not m:
            raise SriftError(
                f"{shown(raw)} in instance spec {shown(spec)} is not TYPE[:COUNT].",
                "write each part as an instance type with an optional count, e.g. p3.16xlarge:2.",
            )
        digits = (m.group("count") or "1").lstrip("0") or "0"
        count = int(parse_number(digits[:19], f"instance count in {shown(raw)}", integer=True,  # 19 digits: above any bound
                                 hint="use a count of 1 or more, e.g. p3.16xlarge:2."))
        if count < 1:
            raise SriftError(f"instance count in '{raw}' must be at least 1.", "use a count of 1 or more, e.g. p3.16xlarge:2.")
        if count > MAX_NODES:
            raise SriftError(f"instance count {shown(digits, 24)} in instance spec {shown(spec)} is more than the "
                             f"{MAX_NODES:,} instances srift models in one cluster.", f"use a count from 1 to {MAX_NODES:,}.")
        parts.append((m.group("type"), count))
    total = sum(n for _, n in parts)
    if total > MAX_NODES:
        raise SriftError(f"instance spec {shown(spec)} has {total:,} instances; srift models at most {MAX_NODES:,} in one cluster.",
                         "use fewer instances.")
    return parts


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def _facts(inst: Instance) -> NetworkFacts | None:
    """The row's network facts; None for a row configs/network.yaml does not describe (a
    hand-made catalog): its node group then carries no per-flow limit or EFA generation."""
    try:
        return facts_for(inst)
    except SriftError:
        return None


def node_group(inst: Instance, count: int, spot: bool, placement_group: bool | None = None) -> NodeGroup:
    """``count`` nodes of a catalog instance type, priced on spot or on demand, with what the
    network facts say about its transport: the baseline (not burst) bandwidth, the vCPUs, the
    cloud (NCCL's socket defaults), EC2's single-flow limit inside or outside a cluster placement
    group (``placement_group`` None: not known, outside assumed), the EFA generation and whether
    the VM gives its GPUs PCIe peer to peer."""
    facts = _facts(inst)
    flow = None if facts is None else (facts.single_flow_gbps_placement_group if placement_group else facts.single_flow_gbps)
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
        vcpus_per_node=inst.vcpus or None,
        cloud=inst.cloud,
        placement_group=placement_group,
        single_flow_gbps=flow if inst.cluster_network == ETHERNET else None,
        efa_generation=None if facts is None else facts.efa_generation,
        pcie_p2p=None if facts is None else facts.gpu_p2p,
        network_burst_gbps=facts.network_burst_gbps if facts is not None and facts.burstable else None,
        tcp_plugin=inst.transport if inst.transport in TCP_PLUGINS else None,
    )


def cluster_from_spec(spec: str, region: str = "us-east-1", spot: bool = False,
                      placement_group: bool | None = None) -> Cluster:
    """Build a Cluster from an instance spec and the catalog.

    Args:
        spec: ``TYPE[:COUNT]`` parts joined by ``+``; a part may end in ``@spot`` or
            ``@on-demand`` to override ``spot`` for that part.
        region: Catalog region.
        spot: Price all parts at spot unless a part says otherwise.
        placement_group: The instances share an EC2 cluster placement group (True), do not
            (False), or it is not known (None: simulated as outside one).
    """
    if len(spec.split("+")) > MAX_NODE_GROUPS:
        parse_spec(spec)  # says so
    groups = []
    for raw in spec.split("+"):
        part_spot = spot
        text = raw.strip()
        if "@" in text:
            text, _, market = text.partition("@")
            if market.lower() not in MARKETS:
                raise SriftError(f"unknown market '@{market}' in '{raw}'.", "use @spot or @on-demand.")
            part_spot = MARKETS[market.lower()]
        ((itype, count),) = parse_spec(text)
        groups.append(node_group(get_instance(itype, region), count, part_spot, placement_group))
    nodes, gpus = sum(g.count for g in groups), sum(g.gpus for g in groups)
    if nodes > MAX_NODES or gpus > MAX_GPUS:
        raise SriftError(f"instance spec {shown(spec)} has {nodes:,} instances with {gpus:,} GPUs; srift models at most "
                         f"{MAX_NODES:,} instances and {MAX_GPUS:,} GPUs in one cluster.", "use fewer instances.")
    return Cluster(name=spec, node_groups=tuple(groups))


def efa_fallbacks(cluster: Cluster) -> list[tuple[str, Cluster]]:
    """The cluster as a launcher that does not set up every EFA interface runs it, for a multi-node
    cluster with EFA nodes (else none): ``one EFA interface`` (``network_gbps`` / its interfaces;
    only for sizes with several) and ``no EFA`` (TCP over that one interface's share, with EC2's
    single-flow limit). What a SkyPilot task gets without ``aws.use_internal_ips`` or without
    ``network_tier: best`` (srift/report/handoff.py)."""
    efa = [g for g in cluster.node_groups if g.network == EFA]
    if cluster.nodes < 2 or not efa:
        return []
    share = {g.instance_type: g.network_gbps / efa_interfaces(g.instance_type or "") for g in efa}
    out = []
    if any(efa_interfaces(g.instance_type or "") > 1 for g in efa):
        one = tuple(dataclasses.replace(g, network_gbps=share[g.instance_type]) if g.network == EFA else g
                    for g in cluster.node_groups)
        out.append(("one EFA interface", dataclasses.replace(cluster, node_groups=one)))
    flow = _single_flow_gbps()
    none = tuple(dataclasses.replace(g, network="ethernet", network_gbps=share[g.instance_type], efa_generation=None,
                                     single_flow_gbps=flow[bool(g.placement_group)])
                 if g.network == EFA else g for g in cluster.node_groups)
    out.append(("no EFA (TCP)", dataclasses.replace(cluster, node_groups=none)))
    return out


def _single_flow_gbps() -> dict[bool, float]:
    """EC2's single-flow TCP limit outside (False) and inside (True) a cluster placement group."""
    flows = network_config()["clouds"]["aws"]["single_flow_gbps"]
    return {False: float(flows["outside_placement_group"]), True: float(flows["inside_cluster_placement_group"])}


def spec_of(parts: Sequence[Part]) -> str:
    """The spec ``cluster_from_spec`` reads back as these parts: ``TYPE:COUNT`` joined by ``+``,
    each part marked ``@spot`` or ``@on-demand`` when the parts mix the two markets."""
    if len({spot for _, _, spot in parts}) > 1:
        return "+".join(f"{inst.instance_type}:{n}@{'spot' if spot else 'on-demand'}" for inst, n, spot in parts)
    return "+".join(f"{inst.instance_type}:{n}" for inst, n, _ in parts)


def cluster_of(parts: Sequence[Part]) -> Cluster:
    """The Cluster of these parts, named by its spec."""
    return Cluster(name=spec_of(parts), node_groups=tuple(node_group(inst, n, spot) for inst, n, spot in parts))


@functools.lru_cache(maxsize=8192)
def one_type_cluster(inst: Instance, count: int, spot: bool) -> Cluster:
    """``cluster_of`` ``count`` nodes of one instance type (cached: a search bounds a count, then
    simulates it)."""
    return cluster_of([(inst, count, spot)])


def label_of(parts: Sequence[Part]) -> str:
    """How tables name a configuration: its spec, with `` [Spot]`` when every part is on spot."""
    spec = spec_of(parts)
    markets = {spot for _, _, spot in parts}
    return spec if len(markets) > 1 else spec + (" [Spot]" if True in markets else "")
