"""An NVLink domain larger than a node (an NVL72 rack: 72 GPUs, compute trays of 4): groups inside it
take NVLink, groups beyond it the network; every other cluster keeps its domain at the node."""

from __future__ import annotations

import dataclasses

import pytest

from srift.catalog.spec import cluster_from_spec
from srift.cluster import Cluster, NodeGroup, cluster_from_dict
from srift.errors import SriftError
from srift.perf.comm import CommModel, CommParams, LinkClass, NetworkClass, topology
from srift.simulate.layouts import Layout, ep_ranks_per_node, PlanSettings, plan_layout
from srift.zoo import llm_arch

# Full nominal bandwidth at every size, 1 us per step on NVLink, 10 us across the network.
IDEAL = LinkClass(alpha_s=1e-6, eff_max=1.0, s_half_bytes=1e-30, shape=1.0, p90_ratio=1.0)
RDMA = NetworkClass(alpha_s=1e-5, efficiency=1.0, t_half_s=0.0, shape=1.0, p90_ratio=1.5, algorithm="hierarchical")
PARAMS = CommParams({"nvswitch4": IDEAL}, networks={"efa": RDMA, "infiniband": RDMA})


def trays(count: int, domain: int | None = 72, gpu: str = "GB200") -> Cluster:
    """``count`` compute trays of 4 GPUs, 4 x 400 Gb/s InfiniBand each, in NVL72 racks (``domain``)."""
    return Cluster("nvl72", (NodeGroup(count, 4, gpu, "nvswitch5", 1600.0, "infiniband", nvlink_domain_gpus=domain),))


def test_nodes_per_domain_fill_each_rack_evenly():
    assert [trays(n).node_groups[0].domain_gpus for n in (1, 2, 16, 18, 36, 64)] == [4, 8, 64, 72, 72, 64]
    # a node count with no divisor up to 18 trays (19, a prime) is laid out tray by tray
    assert trays(19).node_groups[0].domain_gpus == 4
    # without a domain beyond the node, every cluster keeps it at the node
    assert trays(16, None).node_groups[0].domain_gpus == 4
    p5 = cluster_from_spec("p5.48xlarge:2").node_groups[0]
    assert (p5.nodes_per_domain, p5.domain_gpus) == (1, 8)
    t = topology(cluster_from_spec("p5.48xlarge:2"))
    assert (t.nodes, t.gpus_per_node, t.workers) == (2, 8, 16)


def test_a_rack_domain_is_one_node_of_the_topology_with_its_trays_nics():
    t = topology(trays(64), PARAMS)  # 256 GPUs: 4 domains of 16 trays
    assert (t.workers, t.nodes, t.gpus_per_node) == (256, 4, 64)
    assert t.net_gbytes_per_s == pytest.approx(16 * 1600 / 8)
    assert t.net_rate_bytes_per_s == pytest.approx(16 * 1600e9 / 8)  # RDMA at efficiency 1


def test_eight_gpus_on_two_trays_use_nvlink_and_on_two_p5_nodes_the_network():
    s = 1e9
    # 2 trays of an NVL72: one domain of 8; each GPU sends 7/8 of its bytes over its 900 GB/s
    # NVLink 5, none over the network; latency half an all-reduce's 2 (n - 1) NVLink steps
    nvl = CommModel(trays(2), PARAMS)
    assert (nvl.topology.nodes, nvl.topology.gpus_per_node) == (1, 8)
    assert nvl.all_to_all_time_s(s) == pytest.approx(0.5 * 2 * 7 * 1e-6 + 7 / 8 * s / 900e9)
    slow_net = CommModel(Cluster("x", (dataclasses.replace(trays(2).node_groups[0], network_gbps=100.0),)), PARAMS)
    assert slow_net.all_to_all_time_s(s) == nvl.all_to_all_time_s(s)  # the network is not used
    # the same group of 8 on two p5.48xlarge (4 ranks on each): each node's 4 GPUs send 4 x 4/8 of
    # their bytes over half the node's 3200 Gb/s EFA (200 GB/s); latency: hierarchical, 2 (g - 1)
    # NVLink steps and 2 log2(nodes) network steps, halved
    p5 = cluster_from_spec("p5.48xlarge:2")
    assert (p5.node_groups[0].intra_node, p5.node_groups[0].network_gbps, p5.node_groups[0].network) == (
        "nvswitch4", 3200.0, "efa")
    group = CommModel(p5, PARAMS).subgroup(8, 4)
    assert (group.topology.nodes, group.topology.gpus_per_node) == (2, 4)
    assert group.all_to_all_time_s(s) == pytest.approx(0.5 * (2 * 3 * 1e-6 + 2 * 1e-5) + 4 * 4 / 8 * s / 200e9)


def test_an_expert_parallel_group_across_trays_runs_as_in_one_node():
    arch = llm_arch("qwen3-30b-a3b")
    lay = Layout(1, 1, 1, 8, 1, 1, 8, "1f1b", 8)
    rack = plan_layout(arch, trays(2), lay, 4096, PlanSettings())
    node = plan_layout(arch, Cluster("one node", (NodeGroup(1, 8, "GB200", "nvswitch5", 1600.0, "infiniband"),)), lay,
                       4096, PlanSettings())
    assert rack.breakdown == node.breakdown
    # the same trays without the rack's NVLink: the dispatch and combine cross the network
    apart = plan_layout(arch, trays(2, None), lay, 4096, PlanSettings())
    assert apart.breakdown["exposed_ep"] > 2 * rack.breakdown["exposed_ep"]


def test_the_worst_placed_expert_group_sets_its_ranks_per_domain():
    assert [ep_ranks_per_node(ep, 8) for ep in (1, 4, 8, 16, 64)] == [1, 4, 8, 8, 8]  # min(ep, g) on 8-GPU nodes
    assert ep_ranks_per_node(16, 72) == 8  # ranks 64-79 straddle two 72-GPU domains: 8 and 8
    # 144 GPUs (2 racks of 72): expert-parallel 16 and its expert data-parallel groups of 9 plan
    arch = llm_arch("qwen3-30b-a3b")
    plan = plan_layout(arch, trays(36), Layout(1, 1, 1, 144, 1, 1, 2, "1f1b", 16), 4096, PlanSettings())
    assert plan.iteration_s > 0


def test_a_cluster_file_names_its_nvlink_domain():
    group = {"count": 36, "gpus_per_node": 4, "gpu": "GB200", "intra_node": "nvswitch5", "network_gbps": 1600,
             "network": "infiniband", "nvlink_domain_gpus": 72}
    g = cluster_from_dict({"name": "nvl72", "node_groups": [group]}).node_groups[0]
    assert (g.nvlink_domain_gpus, g.domain_gpus) == (72, 72)
    # two trays in one domain need no network
    cluster_from_dict({"node_groups": [dict(group, count=2, network_gbps=0)]})
    for patch, message in (({"nvlink_domain_gpus": 70}, "multiple of gpus_per_node"),
                           ({"nvlink_domain_gpus": True}, "multiple of gpus_per_node"),
                           ({"intra_node": "pcie5"}, "NVLink switches"),
                           ({"network_gbps": 0}, "network_gbps must be positive")):
        with pytest.raises(SriftError, match=message):
            cluster_from_dict({"node_groups": [dict(group, **patch)]})


def test_gb200_and_gb300_datasheet_figures():
    from srift.hardware import gpu
    gb200, gb300 = gpu("GB200"), gpu("GB300")
    assert (gb200.bf16_tflops, gb200.fp8_tflops, gb200.memory_bandwidth_gb_per_s) == (2500.0, 5000.0, 8000.0)
    assert (gb300.bf16_tflops, gb300.fp8_tflops, gb300.memory_gib) == (2500.0, 5000.0, 268.0)
    assert gb200.memory_gib == pytest.approx(186e9 / 2**30, abs=0.5)  # 13.4 TB / 72 = 186 GB


def test_tensor_parallelism_spans_the_trays_of_a_rack_on_nvlink_and_plain_nodes_over_the_network():
    arch = llm_arch("llama3-8b")
    lay = Layout(8, 1, 1, 1, 1, 1, 4, "1f1b")
    rack = plan_layout(arch, trays(2), lay, 4096, PlanSettings())
    # Two plain 4-GPU nodes: TP 8 runs across them (not refused), its collectives over the network.
    plain = plan_layout(arch, trays(2, None), lay, 4096, PlanSettings())
    assert 0 < rack.iteration_s < plain.iteration_s
    assert plain.breakdown["exposed_tp"] > rack.breakdown["exposed_tp"]
