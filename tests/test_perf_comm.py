"""Communication model: ring/hierarchical all-reduce by hand, calibration curves, mixes, spread.
The transports (sockets, RDMA) are pinned in tests/test_network_transport.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from srift.cluster import Cluster, NodeGroup, parse_calibration
from srift.errors import SriftError
from srift.perf.comm import CommModel, CommParams, LinkClass, NetworkClass, load_params, tcp_goodput_share

# Full nominal bandwidth at every size (s_half ~ 0), 1 us per step inside a node, 10 us across.
IDEAL = LinkClass(alpha_s=1e-6, eff_max=1.0, s_half_bytes=1e-30, shape=1.0, p90_ratio=1.0)
RDMA = NetworkClass(alpha_s=1e-5, efficiency=1.0, t_half_s=0.0, shape=1.0, p90_ratio=1.5, algorithm="hierarchical")
RING = NetworkClass(alpha_s=1e-5, efficiency=1.0, t_half_s=0.0, shape=1.0, p90_ratio=1.5, algorithm="ring")
PARAMS = CommParams({k: IDEAL for k in ("nvswitch", "nvlink", "pcie", "shared-memory")},
                    networks={"efa": RDMA, "infiniband": RING, "roce": RING, "ethernet": RING})
TCP = tcp_goodput_share(1500)  # on premises: NCCL's generic socket settings, a 1500-byte MTU


def _cluster(*groups: NodeGroup, calib=None) -> Cluster:
    return Cluster("t", tuple(groups), comm_calibration=None if calib is None else parse_calibration(calib))


def test_single_node_ring_by_hand():
    c = _cluster(NodeGroup(1, 8, "V100-16GB", "nvlink", 25.0))
    m = CommModel(c, PARAMS)
    s = 100e6
    # ring: 2(n-1) steps of latency, 2(n-1)/n of the data over the 150 GB/s NVLink
    expected = 2 * 7 * 1e-6 + 2 * 7 / 8 * s / 150e9
    assert m.allreduce_time_s(s) == pytest.approx(expected)


def test_two_gpus_over_pcie3_by_hand():
    m = CommModel(_cluster(NodeGroup(1, 2, "T4", "pcie3", 25.0)), PARAMS)
    assert m.allreduce_time_s(1e9) == pytest.approx(2 * 1e-6 + 1e9 / 15.75e9)


def test_multi_node_hierarchical_by_hand():
    # 2 nodes x 8 GPUs, NVSwitch inside (300 GB/s), 400 Gb/s EFA between (50 GB/s)
    m = CommModel(_cluster(NodeGroup(2, 8, "A100-40GB", "nvswitch", 400.0, "efa")), PARAMS)
    s = 1e9
    intra = 2 * 7 / 8 * s / 300e9
    inter = 2 * 1 / 2 * s / 50e9
    latency = 2 * 7 * 1e-6 + 2 * math.ceil(math.log2(2)) * 1e-5
    assert m.allreduce_time_s(s) == pytest.approx(latency + max(intra, inter))
    # 4 nodes: inter-node factor 2(N-1)/N = 1.5, tree latency 2 * log2(4)
    m4 = CommModel(_cluster(NodeGroup(4, 8, "A100-40GB", "nvswitch", 400.0, "efa")), PARAMS)
    assert m4.allreduce_time_s(s) == pytest.approx(2 * 7 * 1e-6 + 4 * 1e-5 + 1.5 * s / 50e9)


def test_one_worker_costs_nothing_and_zero_bytes_cost_nothing():
    m = CommModel(_cluster(NodeGroup(1, 1, "A10G", "pcie4", 25.0)), PARAMS)
    assert m.allreduce_time_s(1e9) == 0.0
    assert m.broadcast_time_s(1e9) == 0.0
    m8 = CommModel(_cluster(NodeGroup(1, 8, "A10G", "pcie4", 25.0)), PARAMS)
    assert m8.allreduce_time_s(0.0) == 0.0


def test_vectorized_sizes_match_scalar_calls():
    m = CommModel(_cluster(NodeGroup(2, 4, "A10G", "pcie4", 50.0)), load_params())
    sizes = np.array([1e3, 1e5, 25e6, 1e9])
    np.testing.assert_allclose(m.allreduce_time_s(sizes), [m.allreduce_time_s(float(s)) for s in sizes])
    assert np.all(np.diff(m.allreduce_time_s(sizes)) > 0)


def test_slowest_link_and_network_dominate_a_mix():
    fast = NodeGroup(1, 8, "A100-40GB", "nvswitch", 400.0, "efa")
    slow = NodeGroup(1, 4, "A10G", "pcie4", 40.0, "ethernet")
    mix = CommModel(_cluster(fast, slow), PARAMS)
    assert mix.topology.link_class == "pcie" and mix.topology.net_class == "ethernet"
    assert mix.topology.net_gbytes_per_s == 5.0 and mix.topology.link_gbytes_per_s == 31.5
    # TCP sockets on the slow group's 40 Gb/s (the EFA group runs at the mix's transport, on 400)
    assert mix.topology.net_rate_bytes_per_s == pytest.approx(40e9 / 8 * TCP)
    all_fast = CommModel(_cluster(NodeGroup(2, 8, "A100-40GB", "nvswitch", 400.0, "efa")), PARAMS)
    s = 500e6
    # One ring over the 12 ranks: each link carries 2 x 11/12 of S at the slower of PCIe 4 and the
    # network; 22 steps, 2 x 2 nodes of them across the network.
    expected = 18 * 1e-6 + 4 * 1e-5 + 2 * 11 / 12 * s / min(31.5e9, 40e9 / 8 * TCP)
    assert mix.allreduce_time_s(s) == pytest.approx(expected)
    assert mix.allreduce_time_s(s) > 5 * all_fast.allreduce_time_s(s)


def test_p90_is_at_least_p50_and_wider_on_ethernet_than_efa():
    params = load_params()
    s = np.array([1e4, 1e6, 1e8, 1e9])
    eth = CommModel(_cluster(NodeGroup(4, 4, "A10G", "pcie4", 50.0, "ethernet")), params)
    efa = CommModel(_cluster(NodeGroup(4, 4, "A10G", "pcie4", 50.0, "efa")), params)
    for m in (eth, efa, CommModel(_cluster(NodeGroup(1, 8, "H100", "nvswitch4", 3200.0, "efa")), params)):
        assert np.all(m.allreduce_time_s(s, 0.9) >= m.allreduce_time_s(s, 0.5))
        assert np.all(m.broadcast_time_s(s, 0.9) >= m.broadcast_time_s(s, 0.5))
    ratio = lambda m: m.allreduce_time_s(1e8, 0.9) / m.allreduce_time_s(1e8)  # noqa: E731
    assert ratio(eth) > ratio(efa) > 1.0
    # the spread is log-normal with the class's p90/p50: p90 of the hand model is 1.5x p50
    hand = CommModel(_cluster(NodeGroup(2, 1, "A10G", "pcie4", 100.0, "efa")), PARAMS)
    assert hand.allreduce_time_s(1e8, 0.9) == pytest.approx(1.5 * hand.allreduce_time_s(1e8))


def test_broadcast_moves_each_byte_once():
    m = CommModel(_cluster(NodeGroup(1, 8, "V100-16GB", "nvlink", 25.0)), PARAMS)
    s = 1e9
    assert m.broadcast_time_s(s) == pytest.approx(7 * 1e-6 + s / 150e9)
    assert m.broadcast_time_s(s) < m.allreduce_time_s(s)


def test_calibration_curve_is_interpolated_log_log():
    calib = {"backend": "gloo", "sizes_bytes": [1e3, 1e5, 1e7], "times_s": [1e-4, 1e-3, 1e-1],
             "p90_times_s": [2e-4, 2e-3, 2e-1], "world_size": 2}
    m = CommModel(_cluster(NodeGroup(1, 2, "cpu", "shared-memory", 10.0), calib=calib), PARAMS)
    assert m.allreduce_time_s(1e5) == pytest.approx(1e-3)
    # halfway in log size between 1e3 and 1e5 -> halfway in log time between 1e-4 and 1e-3
    assert m.allreduce_time_s(1e4) == pytest.approx(math.sqrt(1e-4 * 1e-3))
    assert m.allreduce_time_s(1e6) == pytest.approx(1e-2)
    # beyond the largest size: bandwidth-bound, linear in size; below the smallest: latency floor
    assert m.allreduce_time_s(1e8) == pytest.approx(1.0)
    assert m.allreduce_time_s(10.0) == pytest.approx(1e-4)
    assert m.allreduce_time_s(1e5, 0.9) == pytest.approx(2e-3)
    # a calibration measured on 2 workers, used for 4: bandwidth term x (3/4)/(1/2)
    m4 = CommModel(_cluster(NodeGroup(1, 4, "cpu", "shared-memory", 10.0), calib=calib), PARAMS)
    assert m4.allreduce_time_s(1e5) == pytest.approx(1.5e-3)


def test_bad_calibration_is_a_clear_error():
    calib = {"sizes_bytes": [1e3, 1e5], "times_s": [1e-4, -1.0]}
    with pytest.raises(SriftError, match="calibrate comm"):
        CommModel(_cluster(NodeGroup(1, 2, "cpu", "shared-memory", 10.0), calib=calib), PARAMS)
    with pytest.raises(SriftError, match="quantile"):
        CommModel(_cluster(NodeGroup(1, 2, "cpu", "shared-memory", 10.0)), PARAMS).allreduce_time_s(1e6, 1.5)


def test_multi_node_without_network_bandwidth_is_a_clear_error():
    c = _cluster(NodeGroup(1, 4, "A10G", "pcie4", 0.0), NodeGroup(1, 4, "A10G", "pcie4", 50.0))
    with pytest.raises(SriftError, match="network_gbps"):
        CommModel(c, PARAMS)


def test_models_are_cached_per_topology():
    a = _cluster(NodeGroup(2, 8, "A100-40GB", "nvswitch", 400.0, "efa", usd_per_hour=32.0))
    b = _cluster(NodeGroup(2, 8, "A100-40GB", "nvswitch", 400.0, "efa", usd_per_hour=20.0, spot=True))
    assert CommModel.for_cluster(a) is CommModel.for_cluster(b)


def test_fitted_model_against_published_nccl_figures():
    """nccl-tests-aws README: 2x p4de (EFA 4x100G) busbw 78.3 GB/s at 2 GB (16 ranks), and
    1x p5 (NVSwitch) busbw 483 GB/s at 16 GB (8 ranks). busbw = algbw * 2(n-1)/n."""
    params = load_params()
    p4de = CommModel(_cluster(NodeGroup(2, 8, "A100-80GB", "nvswitch", 400.0, "efa")), params)
    s = 2147483648
    measured = s * (2 * 15 / 16) / 78.3e9
    assert p4de.allreduce_time_s(s) == pytest.approx(measured, rel=0.25)
    p5 = CommModel(_cluster(NodeGroup(1, 8, "H100", "nvswitch4", 3200.0, "efa")), params)
    s = 17179869184
    measured = s * (2 * 7 / 8) / 483.05e9
    assert p5.allreduce_time_s(s) == pytest.approx(measured, rel=0.3)


def test_geforce_cards_without_pcie_p2p_get_half_the_link():
    # RTX 3090 and RTX A6000 (same GA102 chip) on PCIe 4 (31.5 GB/s): the GeForce card has no
    # peer-to-peer, so NCCL bounces through host memory and each byte crosses PCIe twice.
    s = 100e6
    pro = CommModel(_cluster(NodeGroup(1, 4, "RTX-A6000", "pcie4", 25.0)), PARAMS)
    geforce = CommModel(_cluster(NodeGroup(1, 4, "RTX-3090", "pcie4", 25.0)), PARAMS)
    assert pro.allreduce_time_s(s) == pytest.approx(2 * 3 * 1e-6 + 2 * 3 / 4 * s / 31.5e9)
    assert geforce.allreduce_time_s(s) == pytest.approx(2 * 3 * 1e-6 + 2 * 3 / 4 * s / 15.75e9)
    # An NVLink bridge is peer-to-peer: no penalty there.
    bridged = CommModel(_cluster(NodeGroup(1, 2, "RTX-3090", "nvlink", 25.0)), PARAMS)
    assert bridged.topology.link_gbytes_per_s == pytest.approx(150.0)


def test_a_measured_broadcast_curve_serves_broadcasts():
    calib = {"backend": "gloo", "world_size": 2, "sizes_bytes": [1e3, 1e6],
             "times_s": [1e-4, 4e-3], "p90_times_s": [1e-4, 4e-3],
             "broadcast_times_s": [5e-5, 1e-3], "broadcast_p90_times_s": [6e-5, 2e-3]}
    m = CommModel(_cluster(NodeGroup(1, 2, "cpu", "shared-memory", 0.0), calib=calib), PARAMS)
    assert m.broadcast_time_s(1e6) == pytest.approx(1e-3)
    assert m.broadcast_time_s(1e6, quantile=0.9) == pytest.approx(2e-3)
    assert m.broadcast_time_s(np.array([0.0, 1e3])) == pytest.approx([0.0, 5e-5])
    # Without one, a broadcast is read off the all-reduce curve (2 workers: the same bytes).
    del calib["broadcast_times_s"], calib["broadcast_p90_times_s"]
    m = CommModel(_cluster(NodeGroup(1, 2, "cpu", "shared-memory", 0.0), calib=calib), PARAMS)
    assert m.broadcast_time_s(1e6) == pytest.approx(4e-3)


def test_an_nvlink_bridge_uses_the_nvlink_curve_at_the_bridge_bandwidth():
    m = CommModel(_cluster(NodeGroup(1, 2, "Quadro-RTX-8000", "nvlink-bridge", 10.0)), PARAMS)
    assert m.topology.link_class == "nvlink" and m.topology.link_gbytes_per_s == 50.0
