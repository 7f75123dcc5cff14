"""Hardware the training stacks run on (#43): A800/H800 nodes with NVLink cut to 400 GB/s, H20, a
cluster file's own intra-node bandwidth, and tensor parallelism across nodes priced over the
network. Times checked against the comm model's formulas (srift/perf/comm.py) by hand."""

from __future__ import annotations

import json

import pytest

from srift.cluster import Cluster, NodeGroup, cluster_from_dict
from srift.errors import SriftError
from srift.files import configs_dir
from srift.hardware import find_gpu, gpu, link, matching_gpus
from srift.perf.comm import CommModel
from srift.simulate.layout.plan import check_layout
from srift.simulate.layouts import Layout, PlanSettings, block_comm, block_parts, plan_layout, tp_block_comm
from srift.zoo import llm_arch


def node_group(gpu_name: str, link_name: str, count: int = 1, network_gbps: float = 3200.0, **extra: object) -> dict:
    return dict(count=count, gpus_per_node=8, gpu=gpu_name, intra_node=link_name, network_gbps=network_gbps,
                network="infiniband", **extra)


def cluster(*groups: dict) -> Cluster:
    return cluster_from_dict({"name": "test", "node_groups": list(groups)})


def test_a800_h800_h20_carry_their_datasheet_figures():
    h800, a800, h20 = gpu("H800"), gpu("A800"), gpu("NVIDIA H20")
    # H800 SXM5: the H100 SXM5's compute and memory (989.4 dense BF16 = 1979 sparse / 2), FP8 1979 dense.
    assert (h800.bf16_tflops, h800.fp8_tflops, h800.memory_gib, h800.memory_bandwidth_gb_per_s) == (989.4, 1979.0, 80, 3350)
    assert (a800.bf16_tflops, a800.tf32_tflops, a800.memory_gib, a800.memory_bandwidth_gb_per_s) == (312.0, 156.0, 80, 2039)
    # H20: 148 dense BF16, 296 FP8, 96 GB at 4.0 TB/s.
    assert (h20.bf16_tflops, h20.fp8_tflops, h20.memory_gib, h20.memory_bandwidth_gb_per_s) == (148.0, 296.0, 96, 4000)
    assert h20.compute_capability == h800.compute_capability == "9.0" and a800.compute_capability == "8.0"
    # 400 GB/s both ways is 200 GB/s per GPU per direction, the unit of every link.
    assert link("nvswitch4-400").bandwidth_gb_per_s == link("nvswitch-400").bandwidth_gb_per_s == 200.0
    # "H20" is not the start of "H200", nor "H200" the H20.
    assert matching_gpus("H20") == {"H20"} and matching_gpus("H200") == {"H200"}
    assert matching_gpus("A100") == {"A100-40GB", "A100-80GB"} and find_gpu("NVIDIA H800") == "H800"


def test_an_h800_nodes_all_reduce_runs_at_its_cut_nvlink():
    # One 8-GPU node: an all-reduce of s bytes takes 2 (n - 1) alpha + 2 (n - 1) / n x s / (B x eff(s)),
    # alpha and eff(s) the NVSwitch-4 class's (both nodes' class), B 450 GB/s (H100) or 200 (H800).
    s = 1e9
    h100 = CommModel.for_cluster(cluster(node_group("H100", "nvswitch4")))
    h800 = CommModel.for_cluster(cluster(node_group("H800", "nvswitch4-400")))
    assert h100.topology.link_class == h800.topology.link_class == "nvswitch4"
    alpha, eff = h800._link.alpha_s, float(h800._link.efficiency(s))
    by_hand_h800 = 14 * alpha + 1.75 * s / (200e9 * eff)
    by_hand_h100 = 14 * alpha + 1.75 * s / (450e9 * eff)
    assert h800.allreduce_time_s(s) == pytest.approx(by_hand_h800, rel=1e-9)
    assert h100.allreduce_time_s(s) == pytest.approx(by_hand_h100, rel=1e-9)
    assert by_hand_h800 == pytest.approx(8.79e-3, rel=0.01) and by_hand_h100 == pytest.approx(3.91e-3, rel=0.01)
    # The shipped HGX H800 cluster file prices the same.
    shipped = CommModel.for_cluster(cluster_from_dict(
        __import__("yaml").safe_load((configs_dir() / "clusters" / "hgx-h800.yaml").read_text())))
    assert shipped.allreduce_time_s(s) == pytest.approx(by_hand_h800, rel=1e-9)


def test_intra_node_bandwidth_in_the_cluster_file_replaces_the_links():
    s = 1e9
    cut = CommModel.for_cluster(cluster(node_group("H100", "nvswitch4", intra_node_gb_per_s=200)))
    h800 = CommModel.for_cluster(cluster(node_group("H800", "nvswitch4-400")))
    assert cut.topology.link_gbytes_per_s == 200.0
    assert cut.allreduce_time_s(s) == pytest.approx(h800.allreduce_time_s(s), rel=1e-12)
    for bad in (0, -5, "fast", True, 1e9):
        with pytest.raises(SriftError, match="intra_node_gb_per_s must be a number of GB/s"):
            cluster(node_group("H100", "nvswitch4", intra_node_gb_per_s=bad))


def test_a_bad_intra_node_bandwidth_is_a_clear_error(srift_cli, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: c\nnode_groups:\n  - {count: 1, gpus_per_node: 8, gpu: H800, intra_node: nvswitch4-400,"
                    " network_gbps: 0, intra_node_gb_per_s: -1}\n")
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--cluster", str(path), "--layout", "tp=8",
                           "--global-batch-size", "8", "--precision", "bf16"])
    assert code == 2 and "intra_node_gb_per_s" in out and "To fix" in out and "Traceback" not in out


def test_tensor_parallelism_across_two_nodes_by_hand():
    # tp=16 on two 8 x H100 nodes with one 400 Gb/s InfiniBand NIC each: the TP group is 16 ranks,
    # 8 per node, its collectives a ring across the network. An all-gather (or reduce-scatter) of
    # the gathered s = 4096 tokens x 8192 x 2 bytes = 64 MiB (Llama 3 70B, micro-batch 1):
    #   half the ring's 2 x 15 steps of latency, 4 of them (2 per node) over the network, and
    #   15/16 of s at the slower of NVLink and the network:
    #   net rate R = 400e9 / 8 x eff_ib (NCCL's large-message share), at s: R / (1 + (R t_half / s)^shape).
    arch = llm_arch("llama3-70b")
    two = Cluster("2 x 8 H100", (NodeGroup(count=2, gpus_per_node=8, gpu="H100", intra_node="nvswitch4",
                                           network_gbps=400.0, network="infiniband"),))
    comm = CommModel.for_cluster(two)
    ib = comm.params.network("infiniband")
    assert ib.algorithm == "ring"
    s = tp_block_comm(4096, arch.hidden, 16).size_bytes
    assert s == 4096 * 8192 * 2
    rate = 400e9 / 8 * ib.efficiency
    net = rate / (1.0 + (rate * ib.t_half_s / s) ** ib.shape)
    nvlink = 450e9 * float(comm._link.efficiency(s))
    assert net < nvlink
    ag = 0.5 * (26 * comm._link.alpha_s + 4 * ib.alpha_s) + 15 / 16 * s / net
    assert ag == pytest.approx(1.364e-3, rel=0.01)  # ~1.36 ms
    parts = block_parts(arch, 16, 1, 1, 4096, "bf16", "H100")
    bc = block_comm(arch, comm, 16, 1, 1, 4096, 2.0, parts)
    assert bc.tp_end_s == pytest.approx(2 * ag, rel=1e-9)  # the head's all-gather and reduce-scatter
    # Priced as if on NVLink (16 ranks in one domain: 0.197 ms) it would be ~7x faster.
    on_nvlink = comm.subgroup(16, 16).all_gather_time_s(s)
    assert on_nvlink == pytest.approx(0.197e-3, rel=0.01) and ag > 6 * on_nvlink


def test_cross_node_tensor_parallelism_runs_slower_and_is_shown(srift_cli):
    arch = llm_arch("llama3-70b")
    assert check_layout(arch, Layout(16, 2, 1, 1, 1, 1, 8), 4096, 8) is None  # not refused
    assert "unevenly" in (check_layout(arch, Layout(12, 1, 1, 1, 1, 1, 8), 4096, 8) or "")
    # Four 8 x H100 nodes on one 400 Gb/s NIC each: TP 8 x PP 4 hides its NVLink collectives
    # behind the GEMMs; TP 16 x PP 2 waits seconds for the network's.
    four = Cluster("4 x 8 H100", (NodeGroup(count=4, gpus_per_node=8, gpu="H100", intra_node="nvswitch4",
                                            network_gbps=400.0, network="infiniband"),))
    across = plan_layout(arch, four, Layout(16, 2, 1, 1, 1, 1, 16), 4096, PlanSettings())
    within = plan_layout(arch, four, Layout(8, 4, 1, 1, 1, 1, 16), 4096, PlanSettings())
    assert within.breakdown["exposed_tp"] == 0.0 and across.breakdown["exposed_tp"] > 1.0
    assert across.iteration_s > 2 * within.iteration_s
    code, out = srift_cli(["predict", "--model", "llama3-70b", "--instance", "p5.48xlarge:4", "--layout", "tp=16,pp=2",
                           "--micro-batch-size", "1", "--global-batch-size", "128", "--seq-len", "4096",
                           "--precision", "bf16", "--format", "json"])
    assert code == 0, out
    d = json.loads(out)
    assert d["layout"]["tp"] == 16
    assert any("tensor parallelism across nodes" in n and "spans 2 nodes" in n for n in d["notes"])
