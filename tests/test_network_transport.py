"""The network transports of the communication model, each term on a hand-computed case: TCP's
share of the wire, NCCL's socket threads and EC2's per-flow limit, the ring across nodes,
InfiniBand's own efficiency curve, all-gather/reduce-scatter, and the cluster-file fields."""

from __future__ import annotations

import math

import numpy as np
import pytest

from srift.catalog.spec import cluster_from_spec
from srift.cluster import Cluster, NodeGroup, cluster_from_dict
from srift.errors import SriftError
from srift.perf.comm import (
    CommModel, CommParams, LinkClass, NetworkClass, SocketDefaults, load_params, net_rate, tcp_goodput_share,
)

IDEAL = LinkClass(alpha_s=1e-6, eff_max=1.0, s_half_bytes=1e-30, shape=1.0, p90_ratio=1.0)
SOCKETS = NetworkClass(alpha_s=1e-4, efficiency=tcp_goodput_share(1500), t_half_s=0.0, shape=1.0, p90_ratio=1.0,
                       algorithm="ring", per_thread_gbps=20.0)
IB = NetworkClass(alpha_s=2e-6, efficiency=0.95, t_half_s=2e-5, shape=1.0, p90_ratio=1.0, algorithm="ring")
PARAMS = CommParams({k: IDEAL for k in ("nvswitch", "nvswitch4", "nvlink", "pcie", "shared-memory")},
                    networks={"ethernet": SOCKETS, "infiniband": IB, "roce": IB, "efa": IB},
                    socket_defaults={"generic": SocketDefaults(1, 1, 1500), "aws": SocketDefaults(2, 8, 9001),
                                     "gcp": SocketDefaults(4, 1, 1460)})


def _group(nodes: int = 2, gbps: float = 10.0, network: str = "ethernet", **kw) -> NodeGroup:
    return NodeGroup(nodes, 4, "RTX-2080-Ti", "pcie3", gbps, network, **kw)


def test_tcp_carries_its_payload_share_of_the_wire():
    # 1500-byte MTU: 1448 payload bytes (IPv4 20 + TCP 20 + timestamps 12) per 1538 on the wire
    # (preamble 8, Ethernet header 14, FCS 4, inter-frame gap 12); jumbo 9001 and GCP's 1460.
    assert tcp_goodput_share(1500) == pytest.approx(1448 / 1538)
    assert tcp_goodput_share(9001) == pytest.approx(8949 / 9039)
    assert tcp_goodput_share(1460) == pytest.approx(1408 / 1498)


def test_sockets_run_at_the_smallest_of_link_threads_and_flows():
    # 10 GbE on premises (1 thread, 1 socket, no flow limit): the link, 10 x 1448/1538 Gb/s.
    r = net_rate(_group(gbps=10.0), SOCKETS, PARAMS)
    assert r.limit == "link" and r.bytes_per_s == pytest.approx(10e9 / 8 * 1448 / 1538)
    # 100 Gb/s on premises: one helper thread at 20 Gb/s sets it (the CPU limit, not the link).
    r = net_rate(_group(gbps=100.0), SOCKETS, PARAMS)
    assert r.limit == "threads" and r.bytes_per_s == pytest.approx(20e9 / 8)
    # Four threads: 4 x 20 = 80 < 100 x 0.94.
    r = net_rate(_group(gbps=100.0, nccl_socket_threads=4), SOCKETS, PARAMS)
    assert r.limit == "threads" and r.bytes_per_s == pytest.approx(80e9 / 8)
    # EC2 outside a placement group: 5 Gb/s per TCP flow; one thread with one socket is one flow.
    r = net_rate(_group(gbps=25.0, cloud="aws", single_flow_gbps=5.0, nccl_socket_threads=1, nccl_nsocks_perthread=1),
                 SOCKETS, PARAMS)
    assert r.limit == "flows" and r.bytes_per_s == pytest.approx(5e9 / 8)
    # NCCL's AWS default, 2 threads x 8 sockets = 16 flows (80 Gb/s): 25 Gb/s x 8949/9039 (jumbo frames).
    r = net_rate(_group(gbps=25.0, cloud="aws", single_flow_gbps=5.0), SOCKETS, PARAMS)
    assert r.limit == "link" and r.bytes_per_s == pytest.approx(25e9 / 8 * 8949 / 9039)
    assert "2 thread(s) x 8 socket(s) (NCCL's AWS setting)" in r.basis and "16 flows x 5 Gb/s" in r.basis
    # ... and 100 Gb/s on AWS: 2 threads x 20 = 40 Gb/s.
    r = net_rate(_group(gbps=100.0, cloud="aws", single_flow_gbps=10.0, placement_group=True), SOCKETS, PARAMS)
    assert r.limit == "threads" and r.bytes_per_s == pytest.approx(40e9 / 8)
    assert "inside a cluster placement group" in r.basis
    # Google Cloud gVNIC: 4 threads, 1460-byte MTU.
    r = net_rate(_group(gbps=100.0, cloud="gcp"), SOCKETS, PARAMS)
    assert r.limit == "threads" and r.bytes_per_s == pytest.approx(80e9 / 8)


def test_rdma_runs_at_its_efficiency_of_the_link():
    r = net_rate(_group(gbps=100.0, network="infiniband"), IB, PARAMS)
    assert r.limit == "link" and r.bytes_per_s == pytest.approx(100e9 / 8 * 0.95)


def test_ring_across_nodes_by_hand():
    # 2 servers x 4 GeForce cards (PCIe 3 without peer-to-peer: 15.75 / 2 GB/s) over 10 GbE TCP:
    # one ring over 8 ranks, each link carrying 2 x 7/8 of S at the slower of PCIe and the network.
    m = CommModel(Cluster("t", (_group(gbps=10.0),)), PARAMS)
    s = 1.34e9
    net = 10e9 / 8 * 1448 / 1538
    lat = (14 - 4) * 1e-6 + 4 * 1e-4  # 2(n-1) = 14 steps, 2N = 4 of them across the network
    assert m.algorithm == "ring"
    assert m.allreduce_time_s(s) == pytest.approx(lat + 2 * 7 / 8 * s / min(15.75e9 / 2, net))
    # 8 servers: the network carries 2 x 31/32 of S, not the hierarchical 2 x 7/8.
    m8 = CommModel(Cluster("t", (_group(nodes=8, gbps=10.0),)), PARAMS)
    lat8 = (62 - 16) * 1e-6 + 16 * 1e-4
    assert m8.allreduce_time_s(s) == pytest.approx(lat8 + 2 * 31 / 32 * s / net)


def test_infiniband_has_its_own_curve_that_scales_with_the_link():
    # eff(S) = 1 / (1 + rate x t_half / S): at S = rate x t_half the network gets half its rate.
    rate = 100e9 / 8 * 0.95
    s_half = rate * 2e-5  # 237.5 kB
    m = CommModel(Cluster("t", (NodeGroup(2, 1, "RTX-2080-Ti", "pcie3", 100.0, "infiniband"),)), PARAMS)
    n = 2
    lat = 2 * 2e-6 * 1  # 2(n-1) = 2 steps, both across the network (2N = 4 > 2)
    assert m.allreduce_time_s(s_half) == pytest.approx(lat + 2 * (n - 1) / n * s_half / (rate * 0.5))
    # The shipped InfiniBand curve: a 1 MB all-reduce on 100 Gb/s gets most of the link, EFA's far less.
    shipped = load_params()
    ib, efa = shipped.networks["infiniband"], shipped.networks["efa"]
    ib_rate, efa_rate = 100e9 / 8 * ib.efficiency, 100e9 / 8 * efa.efficiency
    assert ib.efficiency_at(np.array(1e6), ib_rate) > 0.6
    assert efa.efficiency_at(np.array(1e6), efa_rate) < 0.3
    assert ib.t_half_s < efa.t_half_s


def test_all_gather_and_reduce_scatter_move_half_an_all_reduce():
    m = CommModel(Cluster("t", (_group(gbps=10.0),)), PARAMS)
    s = 1e9
    net = 10e9 / 8 * 1448 / 1538
    half_lat = ((14 - 4) * 1e-6 + 4 * 1e-4) / 2
    assert m.all_gather_time_s(s) == pytest.approx(half_lat + 7 / 8 * s / net)
    assert m.reduce_scatter_time_s(s) == pytest.approx(m.all_gather_time_s(s))
    assert m.all_gather_time_s(np.array([0.0, s]))[0] == 0.0
    one = CommModel(Cluster("t", (NodeGroup(1, 4, "A100-40GB", "nvswitch", 0.0),)), PARAMS)
    assert one.all_gather_time_s(s) == pytest.approx(3 * 1e-6 + 3 / 4 * s / 300e9)


def test_socket_threads_cost_vcpus_and_rdma_none():
    assert CommModel(Cluster("t", (_group(gbps=10.0, cloud="aws"),)), PARAMS).socket_vcpus_per_node == 4.0
    assert CommModel(Cluster("t", (_group(gbps=100.0, network="infiniband"),)), PARAMS).socket_vcpus_per_node == 0.0
    assert CommModel(Cluster("t", (_group(nodes=1),)), PARAMS).socket_vcpus_per_node == 0.0


def test_catalog_instances_carry_their_transport_facts():
    # g5.xlarge: "up to 10 Gigabit", baseline 2.5; TCP over ENA; AWS's single-flow limit.
    g = cluster_from_spec("g5.xlarge:2").node_groups[0]
    assert (g.network, g.network_gbps, g.network_burst_gbps, g.cloud, g.vcpus_per_node) == ("ethernet", 2.5, 10.0, "aws", 4)
    assert g.single_flow_gbps == 5.0 and g.placement_group is None
    assert cluster_from_spec("g5.xlarge:2", placement_group=True).node_groups[0].single_flow_gbps == 10.0
    notes = CommModel(cluster_from_spec("g5.xlarge:2")).assumptions()
    assert "baseline" in notes[0] and "no cluster placement group assumed" in notes[0] and "NCCL's AWS setting" in notes[0]
    p4d = cluster_from_spec("p4d.24xlarge:2").node_groups[0]
    assert p4d.network == "efa" and p4d.efa_generation == 1 and p4d.single_flow_gbps is None


def test_cluster_file_transport_fields():
    base = {"count": 2, "gpus_per_node": 4, "gpu": "RTX 2080 Ti", "intra_node": "pcie3", "network_gbps": 25}
    c = cluster_from_dict({"name": "lab", "node_groups": [dict(base, network="roce", vcpus_per_node=32, cloud="aws",
                                                               placement_group=True, nccl_socket_threads=4,
                                                               nccl_nsocks_perthread=2, single_flow_gbps=10)]})
    g = c.node_groups[0]
    assert (g.network, g.vcpus_per_node, g.cloud, g.placement_group, g.nccl_socket_threads, g.nccl_nsocks_perthread,
            g.single_flow_gbps) == ("roce", 32, "aws", True, 4, 2, 10.0)
    for bad, match in ((dict(nccl_socket_threads=17), "nccl_socket_threads"), (dict(nccl_nsocks_perthread=0), "nccl_nsocks"),
                       (dict(nccl_socket_threads=8, nccl_nsocks_perthread=16), "at most 64"),
                       (dict(placement_group="yes"), "placement_group"), (dict(cloud="ibm"), "cloud"),
                       (dict(single_flow_gbps=-1), "single_flow_gbps"), (dict(efa_generation=2), "efa only"),
                       (dict(network="token-ring"), "network")):
        with pytest.raises(SriftError, match=match):
            cluster_from_dict({"name": "lab", "node_groups": [dict(base, **bad)]})


def test_a_mix_of_transports_runs_at_the_slowest():
    ib = NodeGroup(1, 4, "RTX-2080-Ti", "pcie3", 100.0, "infiniband")
    tcp = NodeGroup(1, 4, "RTX-2080-Ti", "pcie3", 100.0, "ethernet")
    m = CommModel(Cluster("t", (ib, tcp)), PARAMS)
    assert m.topology.net_class == "ethernet" and m.topology.net_limit == "threads"
    assert m.topology.net_rate_bytes_per_s == pytest.approx(20e9 / 8)


def test_shipped_socket_fit_explains_the_tcp_cap():
    """ddl-benchmarks: 100 Gb/s TCP moved far less than the link (~3 GB/s for BERT-large): the
    fitted per-thread rate is a single stream's 15-35 Gb/s, and 10 GbE stays link-bound."""
    eth = load_params().networks["ethernet"]
    assert 15.0 < eth.per_thread_gbps < 35.0
    assert eth.efficiency == pytest.approx(1448 / 1538)
    r10 = net_rate(_group(gbps=10.0), eth, load_params())
    r100 = net_rate(_group(gbps=100.0), eth, load_params())
    assert r10.limit == "link" and r100.limit == "threads"
    assert math.isclose(r100.bytes_per_s, eth.per_thread_gbps * 1e9 / 8)


def test_a_tcp_plugin_is_not_limited_by_nccls_socket_threads():
    # Google Cloud A3 High: GPUDirect-TCPX drives its own flows over 800 Gb/s of GPU NICs.
    g = cluster_from_spec("a3-highgpu-8g:2", region="gcp/us-central1").node_groups[0]
    assert (g.network, g.tcp_plugin, g.cloud) == ("ethernet", "gpudirect-tcpx", "gcp")
    r = net_rate(g, SOCKETS, PARAMS)
    assert r.limit == "link" and r.bytes_per_s == pytest.approx(800e9 / 8 * 1408 / 1498)
    assert CommModel(Cluster("t", (g,)), PARAMS).socket_vcpus_per_node == 0.0
    with pytest.raises(SriftError, match="tcp_plugin"):
        cluster_from_dict({"name": "x", "node_groups": [{"count": 2, "gpus_per_node": 8, "gpu": "H100", "intra_node": "nvswitch4",
                                                         "network_gbps": 800, "network": "efa", "tcp_plugin": "gpudirect-tcpx"}]})


def test_a_4_gpu_pcie_vm_without_peer_to_peer_stages_through_host_memory():
    import dataclasses

    # g4dn.12xlarge: 4 T4 on PCIe 3 in a VM that gives them no peer to peer (configs/network.yaml):
    # NCCL's SHM transport copies each byte over PCIe twice, so the ring runs at half of 15.75 GB/s.
    cluster = cluster_from_spec("g4dn.12xlarge")
    assert cluster.node_groups[0].pcie_p2p is False
    with_p2p = dataclasses.replace(cluster, node_groups=(dataclasses.replace(cluster.node_groups[0], pcie_p2p=True),))
    pcie = load_params().classes["pcie"]
    size = 100e6  # ResNet-50's fp32 gradients, about
    eff = pcie.eff_max / (1.0 + (pcie.s_half_bytes / size) ** pcie.shape)
    # Ring of n = 4: 2(n-1) steps of alpha, 2(n-1)/n of the bytes over the link.
    p2p_s = 6 * pcie.alpha_s + 1.5 * size / (15.75e9 * eff)
    shm_s = 6 * pcie.alpha_s + 1.5 * size / (15.75e9 / 2 * eff)
    assert CommModel(with_p2p).allreduce_time_s(size) == pytest.approx(p2p_s)
    assert CommModel(cluster).allreduce_time_s(size) == pytest.approx(shm_s)
    assert shm_s / p2p_s == pytest.approx(2.0, rel=1e-5)  # the latency terms aside: twice as long
    # Bare metal is not documented either way: the T4's own default (peer to peer).
    assert cluster_from_spec("g4dn.metal").node_groups[0].pcie_p2p is None


def test_nccl_socket_throughput_with_one_and_four_threads_at_the_shipped_rate():
    # 100 Gb/s TCP on premises with the shipped per-thread rate r: one helper thread moves r (the
    # thread is the limit, as on ddl-benchmarks' IPoIB rows), four move min(4 r, 100 x 1448/1538).
    params = load_params()
    r = params.networks["ethernet"].per_thread_gbps
    one = net_rate(_group(gbps=100.0, nccl_socket_threads=1), params.networks["ethernet"], params)
    four = net_rate(_group(gbps=100.0, nccl_socket_threads=4), params.networks["ethernet"], params)
    assert one.limit == "threads" and one.bytes_per_s == pytest.approx(r * 1e9 / 8)
    assert four.bytes_per_s == pytest.approx(min(4 * r, 100 * 1448 / 1538) * 1e9 / 8)
    # NCCL's defaults: 1 thread x 1 socket on premises, 2 x 8 on AWS, 4 x 1 on Google Cloud gVNIC.
    assert (params.sockets_on(None)[0].threads, params.sockets_on(None)[0].sockets_per_thread) == (1, 1)
    assert (params.sockets_on("aws")[0].threads, params.sockets_on("aws")[0].sockets_per_thread) == (2, 8)
    assert params.sockets_on("gcp")[0].threads == 4


@pytest.mark.parametrize("placement_group, flow_gbps", [(False, 5.0), (True, 10.0)])
def test_nccl_socket_throughput_of_one_and_eight_flows_on_a_25_gbps_vm(placement_group, flow_gbps):
    # p3.16xlarge: 25 Gb/s over TCP (no EFA), jumbo frames (9001-byte MTU: 8949/9039 of the wire for
    # TCP payload). EC2 caps one TCP flow at 5 Gb/s outside a cluster placement group, 10 inside.
    import dataclasses

    params = load_params()
    sockets = params.networks["ethernet"]
    r = sockets.per_thread_gbps
    group = cluster_from_spec("p3.16xlarge:2", placement_group=placement_group).node_groups[0]
    assert (group.network_gbps, group.single_flow_gbps, group.placement_group) == (25.0, flow_gbps, placement_group)
    link = 25.0 * 8949 / 9039
    # One flow (NCCL before 2.4.8, or NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=1): the flow cap.
    one = net_rate(dataclasses.replace(group, nccl_socket_threads=1, nccl_nsocks_perthread=1), sockets, params)
    assert one.limit == "flows" and one.bytes_per_s == pytest.approx(flow_gbps * 1e9 / 8)
    # Eight flows (2 threads x 4 sockets): 8 x 5 = 40 or 8 x 10 = 80 Gb/s of flows and 2 x r of
    # threads, both above the link: the link's TCP share.
    eight = net_rate(dataclasses.replace(group, nccl_socket_threads=2, nccl_nsocks_perthread=4), sockets, params)
    assert min(8 * flow_gbps, 2 * r) > link
    assert eight.limit == "link" and eight.bytes_per_s == pytest.approx(link * 1e9 / 8)
    # A 100 MB ring all-reduce over 2 nodes x 8 GPUs: 2 x 15/16 of it crosses each node's network.
    for rate, g in ((one, dataclasses.replace(group, nccl_socket_threads=1, nccl_nsocks_perthread=1)),
                    (eight, dataclasses.replace(group, nccl_socket_threads=2, nccl_nsocks_perthread=4))):
        model = CommModel(Cluster("p3", (g,)), params)
        bw = rate.bytes_per_s * float(sockets.efficiency_at(np.array([1e8]), rate.bytes_per_s)[0])
        assert model.allreduce_time_s(1e8) == pytest.approx(2 * 15 / 16 * 1e8 / bw, rel=0.02)  # + the ring's latency
