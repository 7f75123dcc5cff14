"""`srift calibrate comm` with 2 gloo processes: a cluster file --cluster accepts as it is."""

import pytest

from srift.cli import main
from srift.cluster import load_cluster
from srift.perf.comm import CommModel
from srift.testing import free_port


@pytest.mark.slow
@pytest.mark.distributed
def test_calibrate_gloo_two_processes(tmp_path, capsys):
    out = tmp_path / "local.yaml"
    assert main(["calibrate", "comm", "--backend", "gloo", "--nproc", "2", "-o", str(out),
                 "--sizes", "4096,262144,1048576", "--reps", "3"]) == 0
    cluster = load_cluster(out)
    assert cluster.gpus == 2 and cluster.node_groups[0].gpu == "cpu"
    calib = cluster.comm_calibration
    assert calib is not None and calib.broadcast is not None and calib.allreduce.p90_times_s is not None
    assert calib.allreduce.sizes_bytes == (4096, 262144, 1048576) and all(t > 0 for t in calib.allreduce.times_s)
    assert all(p90 >= p50 for p50, p90 in zip(calib.allreduce.times_s, calib.allreduce.p90_times_s))
    model = CommModel(cluster)
    # The model reproduces the measured points, all-reduce and broadcast alike.
    assert model.allreduce_time_s(262144) == pytest.approx(calib.allreduce.times_s[1], rel=1e-6)
    assert len(calib.broadcast.times_s) == 3 and all(t > 0 for t in calib.broadcast.times_s)
    assert model.broadcast_time_s(262144) == pytest.approx(calib.broadcast.times_s[1], rel=1e-6)
    assert "Wrote" in capsys.readouterr().out


def test_calibrate_rejects_bad_arguments(tmp_path, capsys):
    assert main(["calibrate", "comm", "--nproc", "1", "-o", str(tmp_path / "x.yaml")]) == 2
    assert "--nproc must be at least 2" in capsys.readouterr().err
    assert main(["calibrate", "comm", "--backend", "mpi", "-o", str(tmp_path / "x.yaml")]) == 2
    assert main(["calibrate", "comm", "--sizes", "a,b", "-o", str(tmp_path / "x.yaml")]) == 2
    assert main(["calibrate", "comm", "--network", "carrier-pigeon", "-o", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert "unknown network 'carrier-pigeon'" in err and "To fix" in err and not (tmp_path / "x.yaml").exists()
    assert not (tmp_path / "x.yaml").exists()


def test_calibration_keeps_the_trimmed_mean_and_the_p90():
    from srift.profiling.calibrate import calibration_from_times

    # Ten repetitions at one size, bimodal (gloo on a busy host) plus one stall of 50 ms.
    reps = [1e-3] * 5 + [3e-3] * 4 + [50e-3]
    calib = calibration_from_times("gloo", 2, [4096], {"all_reduce": [reps], "broadcast": [[1e-3] * 10]})
    # The slowest tenth (the stall) is dropped; the rest averaged: (5 x 1 + 4 x 3) / 9 ms.
    assert calib["times_s"] == pytest.approx([(5 * 1e-3 + 4 * 3e-3) / 9])
    assert calib["p90_times_s"] == pytest.approx([3e-3])  # 90th percentile of the ten
    assert calib["broadcast_times_s"] == pytest.approx([1e-3])
    assert calib["sizes_bytes"] == [4096] and calib["world_size"] == 2 and calib["repetitions"] == 10


@pytest.mark.slow
@pytest.mark.distributed
def test_calibrate_across_two_machines_under_torchrun(tmp_path):
    """Two torchrun agents (two 'machines' of one worker each, on this host) measure together;
    rank 0 writes a two-node cluster whose network figure is the measured bus bandwidth."""
    import os
    import subprocess
    import sys

    port = free_port()
    out = tmp_path / "two.yaml"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(r),
                               "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
                               "-m", "srift.cli", "calibrate", "comm", "--backend", "gloo", "-o", str(out),
                               "--sizes", "4096,1048576", "--reps", "3", "--network", "efa"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    cluster = load_cluster(out)
    g = cluster.node_groups[0]
    assert (cluster.nodes, g.gpus_per_node, g.gpu, g.network) == (2, 1, "cpu", "efa")
    calib = cluster.comm_calibration
    assert calib is not None
    size, t = calib.allreduce.sizes_bytes[-1], calib.allreduce.times_s[-1]
    assert g.network_gbps == pytest.approx(2 * (2 - 1) / 2 * size / t * 8 / 1e9, rel=0.01)
    assert CommModel(cluster).allreduce_time_s(1048576) == pytest.approx(t, rel=1e-6)


DGX_A100_TOPO = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tmlx5_0\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tPXB\t48-63\t3
GPU1\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tPXB\t48-63\t3
GPU2\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tSYS\t16-31\t1
GPU3\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tSYS\t16-31\t1
GPU4\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tSYS\t112-127\t7
GPU5\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tSYS\t112-127\t7
GPU6\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tSYS\t80-95\t5
GPU7\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tSYS\t80-95\t5

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""

DGX1_TOPO = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity
GPU0\t X \tNV1\tNV1\tNV2\t0-19
GPU1\tNV1\t X \tNV2\tSYS\t0-19
GPU2\tNV1\tNV2\t X \tNV1\t0-19
GPU3\tNV2\tSYS\tNV1\t X \t0-19
"""

PCIE_TOPO = """\
\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPHB\t0-31\tN/A
GPU1\tPHB\t X \t0-31\tN/A
"""


def test_intra_node_link_from_nvidia_smi_topology():
    from srift.profiling.calibrate import intra_node_from_topo

    assert intra_node_from_topo(DGX_A100_TOPO, "ampere") == "nvswitch"
    assert intra_node_from_topo(DGX_A100_TOPO, "hopper") == "nvswitch4"
    assert intra_node_from_topo(DGX1_TOPO, "volta") == "nvlink"  # hybrid cube mesh, some pairs over SYS
    assert intra_node_from_topo(PCIE_TOPO, "ampere", 4) == "pcie4"
    assert intra_node_from_topo(PCIE_TOPO, "turing", 3) == "pcie3"
    assert intra_node_from_topo(PCIE_TOPO, "ada") == "pcie4"  # generation unknown
    assert intra_node_from_topo("No devices were found", None) is None


def test_free_port_lies_below_the_ports_the_kernel_hands_out_itself():
    """The port stays unbound until rank 0 listens; below the ephemeral range no outgoing connection
    or ``bind(0)`` elsewhere on the host can be given it meanwhile."""
    import socket

    from srift.testing import LOWEST_PORT, _ephemeral_low

    low = _ephemeral_low()
    for _ in range(5):
        port = free_port()
        assert LOWEST_PORT <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: binds
