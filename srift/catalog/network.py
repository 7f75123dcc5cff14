"""Interconnect and network facts of a catalog instance, from configs/network.yaml.

``facts_for(instance)`` says, with sources, what links the GPUs inside the VM, what bandwidth and
transport NCCL gets between VMs, EFA generation and GPUDirect RDMA, and EC2's single-flow limits;
every fact srift does not know is listed in ``NetworkFacts.unknowns`` together with the assumption
the simulator runs on instead (``assumed_when_unknown`` in the YAML). The catalog build uses
``resolve`` to write the simulated values into the CSV, so a row and its facts always agree.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from srift.catalog.transports import network_config, cluster_network, transports
from srift.cluster import Network
from srift.errors import SriftError

if TYPE_CHECKING:
    from srift.catalog.instances import Instance

UNKNOWN = "unknown"
FLAG_NETWORK_ASSUMED = "network-assumed"  # row flag: network_gbps is the assumption, not a known figure
_UP_TO = re.compile(r"^up to (\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class NetworkFacts:
    """What srift knows about one instance type's links, and what it assumes where it does not.

    Attributes:
        cloud: Cloud of the instance.
        family: Instance family / machine series.
        instance_type: The type.
        intra_node: GPU-to-GPU link inside the VM (a configs/gpus.yaml link) or ``unknown``.
        intra_node_source: Where ``intra_node`` comes from.
        transport: Inter-VM transport (``tcp``, ``efa``, ``infiniband``, ``roce``,
            ``gpudirect-tcpx``, ``gpudirect-tcpxo``) or ``unknown``.
        transport_source: Where ``transport`` comes from.
        network_gbps: Bandwidth a sustained all-reduce gets, Gbit/s (AWS: the baseline), or None.
        network_burst_gbps: Documented burst ("up to N Gigabit") or fixed figure, or None.
        burstable: True for an "up to N" size (burst N, far lower baseline); None when not documented.
        network_source: Where the bandwidth comes from.
        efa: True when the type has an EFA.
        efa_generation: EFA generation (1-4); None without EFA or when unknown (see ``unknowns``).
        gpudirect_rdma: NICs move data to and from GPU memory directly; None when unknown.
        gpu_p2p: GPUs of one VM reach each other's memory over PCIe (CUDA peer to peer); False
            where the VM does not expose it (NCCL then stages through host memory); None when not
            documented (the GPU's own default: configs/gpus.yaml ``pcie_p2p``).
        gpu_p2p_source: Where ``gpu_p2p`` comes from.
        single_flow_gbps: Limit of one TCP flow between VMs outside a cluster placement group (AWS).
        single_flow_gbps_placement_group: The same inside a cluster placement group (AWS).
        single_flow_source: Where the single-flow limits come from.
        simulated_intra_node: The link the simulator uses (``intra_node`` or the assumption).
        simulated_network_gbps: The bandwidth the simulator uses.
        simulated_transport: The transport the simulator uses.
        unknowns: Names of the facts that are unknown (``intra_node``, ``network_gbps``, ...).
        assumption: Why the simulator's values stand in for the unknown ones.
    """

    cloud: str
    family: str
    instance_type: str
    intra_node: str
    intra_node_source: str
    transport: str
    transport_source: str
    network_gbps: float | None
    network_burst_gbps: float | None
    burstable: bool | None
    network_source: str
    efa: bool
    efa_generation: int | None
    gpudirect_rdma: bool | None
    gpu_p2p: bool | None
    gpu_p2p_source: str
    single_flow_gbps: float | None
    single_flow_gbps_placement_group: float | None
    single_flow_source: str
    simulated_intra_node: str
    simulated_network_gbps: float
    simulated_transport: str
    unknowns: tuple[str, ...]
    assumption: str

    @property
    def cluster_network(self) -> Network:
        """The cluster-file network class the simulator runs the transport as."""
        return cluster_network(self.simulated_transport)

    def basis(self) -> str:
        """One sentence for a prediction's basis: the links used, and what was assumed."""
        burst = (f" (baseline; bursts to {self.network_burst_gbps:g} Gb/s for minutes only)"
                 if self.burstable and self.network_burst_gbps else "")
        text = (f"{self.instance_type}: {self.simulated_intra_node} between GPUs, "
                f"{self.simulated_network_gbps:g} Gb/s{burst} over {self.simulated_transport} between VMs")
        if self.gpu_p2p is False:
            text += "; no GPU peer to peer inside the VM (NCCL stages through host memory)"
        if self.single_flow_gbps is not None and self.simulated_transport == "tcp":
            text += (f"; one TCP flow is capped at {self.single_flow_gbps:g} Gb/s outside a cluster placement group "
                     f"({self.single_flow_gbps_placement_group:g} Gb/s inside)")
        if self.unknowns:
            text += f"; unknown: {', '.join(self.unknowns)} (assumed: {self.assumption})"
        return text + "."


def family_entry(cloud: str, family: str) -> dict[str, Any] | None:
    """The raw YAML entry of a family, or None when configs/network.yaml has none."""
    fams = network_config()["clouds"].get(cloud, {}).get("families", {})
    entry = fams.get(family)
    return dict(entry) if entry is not None else None


def _num(value: Any) -> float | None:
    return None if value is None or value == UNKNOWN else float(value)


def _tri(value: Any) -> bool | None:
    return None if value is None or value == UNKNOWN else bool(value)


def resolve(cloud: str, family: str, instance_type: str, *, efa: bool = False,
            baseline_gbps: float | None = None) -> NetworkFacts:
    """The facts of one type from configs/network.yaml (plus, for AWS, its EFA and baseline).

    Args:
        cloud: Cloud of the type.
        family: Its family (a key under ``clouds.<cloud>.families``).
        instance_type: The type (per-type overrides live under the family's ``types``).
        efa: AWS: the size has an EFA (then the transport is ``efa``, else ``tcp``).
        baseline_gbps: AWS: the size's baseline bandwidth, None when not known.

    Raises:
        SriftError: when the family is not in configs/network.yaml (the build then stops).
    """
    cfg = network_config()
    entry = family_entry(cloud, family)
    if entry is None:
        raise SriftError(f"configs/network.yaml has no facts for {cloud} family '{family}'.",
                         "add the family (with `unknown` where a fact is not documented) and rebuild the catalog.")
    entry.update(entry.get("types", {}).get(instance_type, {}))
    cloud_cfg = cfg["clouds"][cloud]
    assumed = cfg["assumed_when_unknown"]
    unknowns: list[str] = []

    intra = str(entry.get("intra_node", UNKNOWN))
    if intra == UNKNOWN:
        unknowns.append("intra_node")

    burst: float | None = None
    burstable: bool | None = None
    if cloud == "aws":
        transport = "efa" if efa else "tcp"
        transport_source = "data/karpenter-aws: EFA interfaces of the size" if efa else "no EFA on this size: TCP over ENA"
        doc = entry.get("documented", {}).get(instance_type, UNKNOWN)
        up_to = _UP_TO.match(doc) if isinstance(doc, str) else None
        if up_to:
            burst, burstable = float(up_to.group(1)), True
        elif doc != UNKNOWN:
            burst, burstable = float(doc), False
        network = baseline_gbps
        if network is None and burstable is False:
            network = burst  # a fixed documented figure is the sustained one
        network_source = f"{cloud_cfg['baseline']['source']}; {cloud_cfg['network_source']}"
        gen = entry.get("efa_generation") if efa else None
        if efa and (gen is None or gen == UNKNOWN):
            unknowns.append("efa_generation")
        efa_generation = int(gen) if efa and gen not in (None, UNKNOWN) else None
        flows = cloud_cfg["single_flow_gbps"]
        single: tuple[float | None, float | None, str] = (
            float(flows["outside_placement_group"]), float(flows["inside_cluster_placement_group"]), str(flows["source"]))
    else:
        transport = str(entry.get("transport", UNKNOWN))
        transport_source = str(entry.get("transport_source", cloud_cfg.get("network_source", "")))
        network = _num(entry.get("network_gbps"))
        burst = network
        network_source = str(entry.get("network_source", cloud_cfg.get("network_source", "")))
        efa_generation = None
        single = (None, None, "")  # no documented single-flow limit
    if transport == UNKNOWN:
        unknowns.append("transport")
    if network is None:
        unknowns.append("network_gbps")
    gpudirect = _tri(entry.get("gpudirect_rdma"))
    sim_intra = intra if intra != UNKNOWN else str(assumed["intra_node"])
    sim_net = network if network is not None else float(assumed["network_gbps"])
    sim_transport = transport if transport != UNKNOWN else str(assumed["transport"])
    rdma = bool(transports()[sim_transport]["rdma"])
    if gpudirect is None and rdma:
        unknowns.append("gpudirect_rdma")  # matters only where NCCL runs over RDMA
    said = {"intra_node": f"{sim_intra} inside the VM", "transport": f"{sim_transport} between VMs",
            "network_gbps": f"{sim_net:g} Gb/s between VMs", "efa_generation": "the EFA generation plays no part",
            "gpudirect_rdma": "RDMA staged through host memory"}
    assumption = "; ".join(said[u] for u in unknowns)
    if any(u in unknowns for u in ("intra_node", "transport", "network_gbps")):
        assumption += f" ({assumed['why']})"
    return NetworkFacts(
        cloud=cloud, family=family, instance_type=instance_type,
        intra_node=intra, intra_node_source=str(entry.get("intra_node_source", "")),
        transport=transport, transport_source=transport_source,
        network_gbps=network, network_burst_gbps=burst, burstable=burstable, network_source=network_source,
        efa=efa, efa_generation=efa_generation, gpudirect_rdma=gpudirect,
        gpu_p2p=_tri(entry.get("gpu_p2p")), gpu_p2p_source=str(entry.get("gpu_p2p_source", "")),
        single_flow_gbps=single[0], single_flow_gbps_placement_group=single[1], single_flow_source=single[2],
        simulated_intra_node=sim_intra, simulated_network_gbps=sim_net, simulated_transport=sim_transport,
        unknowns=tuple(unknowns), assumption=assumption,
    )


def efa_interfaces(instance_type: str) -> int:
    """EFA network interfaces of an AWS size (configs/network.yaml ``clouds.aws.efa_interfaces``; 1
    for sizes not listed). A launcher that attaches one gets ``network_gbps / efa_interfaces``."""
    table = network_config()["clouds"]["aws"].get("efa_interfaces", {}).get("types", {})
    return int(table.get(instance_type, 1))


def facts_for(instance: "Instance") -> NetworkFacts:
    """The interconnect and network facts of a catalog row (see ``NetworkFacts``).

    Example:
        >>> facts_for(get_instance("g5.xlarge")).burstable  # "up to 10 Gigabit": baseline 2.5
        True
    """
    baseline = None if FLAG_NETWORK_ASSUMED in instance.flags else instance.network_gbps
    return resolve(instance.cloud, instance.family, instance.instance_type, efa=instance.efa, baseline_gbps=baseline)
