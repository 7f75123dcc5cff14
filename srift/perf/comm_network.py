"""What a cluster's links and network reach: the parameter class of an intra-node link
(``link_class``), the large-message rate a node group's network transport reaches and what sets it
(``net_rate``: the link, NCCL's socket threads or the per-flow limit), and the bottleneck
``Topology`` a CommModel is built on (srift/perf/comm.py reduces a cluster to it).

srift/perf/comm.py re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass

from srift.cluster import NodeGroup
from srift.perf.comm_params import SOCKETS, CommParams, NetworkClass, tcp_goodput_share


def link_class(intra_node: str) -> str:
    """Parameter class of an intra-node link name (``pcie4`` -> ``pcie``). NVSwitch generations with
    in-switch reduction (NVLink 4 and 5: ``nvswitch4``, ``nvswitch5``) form the ``nvswitch4`` class; a
    generation cut to fewer links (A800's ``nvswitch-400``, H800's ``nvswitch4-400``) is its own
    generation's class at its lower bandwidth."""
    intra_node = intra_node.removesuffix("-400")
    if intra_node in ("nvswitch4", "nvswitch5"):
        return "nvswitch4"
    if intra_node.startswith("pcie"):
        return "pcie"
    if intra_node == "nvlink-bridge":
        return "nvlink"
    return intra_node



@dataclass(frozen=True)
class NetRate:
    """The large-message rate one node's network transport reaches, and what set it.

    Attributes:
        bytes_per_s: The rate (bytes/s).
        limit: What set it: ``link``, ``threads`` or ``flows``.
        basis: One sentence on how it was obtained (assumptions included).
        socket_threads: NCCL socket helper threads per connection (0 for RDMA).
    """

    bytes_per_s: float
    limit: str
    basis: str
    socket_threads: int = 0


def net_rate(group: NodeGroup, net: NetworkClass, params: CommParams) -> NetRate:
    """The rate a node group's transport reaches for large messages (see the module docstring).

    Sockets: ``min(link x TCP share at the platform's MTU, threads x per_thread_gbps, threads x
    sockets x single-flow limit)``, with the group's NCCL settings or NCCL's defaults on its
    platform. RDMA: ``link x efficiency``.
    """
    link_gbps = group.network_gbps
    burst = (f" (the baseline: it bursts to {group.network_burst_gbps:g} Gb/s for minutes only)"
             if group.network_burst_gbps and group.network_burst_gbps > link_gbps else "")
    if group.network != SOCKETS:
        wire = link_gbps * net.efficiency
        gen = f" (generation {group.efa_generation})" if group.efa_generation else ""
        return NetRate(wire * 1e9 / 8.0, "link", f"{group.network}{gen} {link_gbps:g} Gb/s{burst} at {net.efficiency:.0%}: "
                                                    f"{wire:.3g} Gb/s per node")
    defaults, platform = params.sockets_on(group.cloud)
    share = tcp_goodput_share(defaults.mtu_bytes)
    wire = link_gbps * share
    if group.tcp_plugin:
        # GPUDirect-TCPX/O drive their own flows from the GPU NICs: no socket-thread or per-flow
        # limit of NCCL's transport applies (and no measurement says what does): the link's TCP share.
        return NetRate(wire * 1e9 / 8.0, "link", f"NCCL over {group.tcp_plugin} (its own TCP flows, no socket-thread limit; "
                                                    f"not measured): {link_gbps:g} Gb/s{burst} x {share:.3f} (TCP at a "
                                                    f"{defaults.mtu_bytes}-byte MTU) = {wire:.3g} Gb/s per node")
    threads = group.nccl_socket_threads or defaults.threads
    socks = group.nccl_nsocks_perthread or defaults.sockets_per_thread
    said = "set" if group.nccl_socket_threads or group.nccl_nsocks_perthread else (
        f"NCCL's {'AWS' if platform == 'aws' else 'Google Cloud gVNIC' if platform == 'gcp' else 'default'} setting")
    candidates = {"link": wire}
    if net.per_thread_gbps is not None:
        candidates["threads"] = threads * net.per_thread_gbps
    flow_text = ""
    if group.single_flow_gbps is not None:
        candidates["flows"] = threads * socks * group.single_flow_gbps
        where = {True: "inside a cluster placement group", False: "outside a cluster placement group",
                 None: "no cluster placement group assumed"}[group.placement_group]
        flow_text = f", {threads * socks} flows x {group.single_flow_gbps:g} Gb/s ({where})"
    limit = min(candidates, key=lambda k: candidates[k])
    gbps = candidates[limit]
    thread_text = f", {threads} x {net.per_thread_gbps:.3g} Gb/s per thread" if net.per_thread_gbps is not None else ""
    basis = (f"NCCL over TCP sockets, {threads} thread(s) x {socks} socket(s) ({said}): min({link_gbps:g} Gb/s{burst} "
             f"x {share:.3f} (TCP at a {defaults.mtu_bytes}-byte MTU){thread_text}{flow_text}) = {gbps:.3g} Gb/s per node, "
             f"set by the {limit}")
    return NetRate(gbps * 1e9 / 8.0, limit, basis, threads)


@dataclass(frozen=True)
class Topology:
    """What the collective time depends on (the cache key of a CommModel).

    Attributes:
        workers: Ranks.
        nodes: NVLink domains: nodes, or multi-node domains (``topology``).
        gpus_per_node: Ranks per NVLink domain (the largest group's): a node's GPUs, or the
            ``NodeGroup.domain_gpus`` of a domain that spans nodes.
        link_gbytes_per_s: Nominal intra-node bandwidth of the slowest link (GB/s).
        link_class: Its parameter class.
        net_gbytes_per_s: Nominal network bandwidth of the slowest group's domain (GB/s).
        net_class: The network class (the slowest transport of any group).
        net_rate_bytes_per_s: The large-message rate the network transport reaches per node
            (the slowest group's), 0 on one node.
        net_basis: How that rate was obtained.
        net_limit: What set it (``link``, ``threads``, ``flows``).
        socket_threads: NCCL socket helper threads per connection (0 for RDMA or one node).
    """

    workers: int
    nodes: int
    gpus_per_node: int
    link_gbytes_per_s: float
    link_class: str
    net_gbytes_per_s: float
    net_class: str
    net_rate_bytes_per_s: float = 0.0
    net_basis: str = ""
    net_limit: str = ""
    socket_threads: int = 0

